package realnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/cozystack/cozy-health/hack/image/oci"
)

// startContainerd starts containerd with its root, state and sockets in the
// node's directory and waits until it answers.
func (s *starter) startContainerd(ctx context.Context) error {
	cd := filepath.Join(s.dir, "containerd")
	// Every image comes from an import; a pull that is attempted anyway goes
	// to a closed loopback port, never to a registry.
	if err := os.WriteFile(filepath.Join(cd, "certs.d", "_default", "hosts.toml"), []byte("server = \"http://127.0.0.1:9\"\n"), 0o600); err != nil {
		return err
	}
	cfgPath := filepath.Join(cd, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(containerdConfig(s.st, cd, filepath.Join(s.dir, "cni", "net.d"))), 0o600); err != nil {
		return err
	}
	containerd, err := exec.LookPath("containerd")
	if err != nil {
		return err
	}
	if err := s.n.spawn("containerd", containerd, []string{"--config", cfgPath}); err != nil {
		return err
	}
	return s.n.waitProc(ctx, "containerd", 30*time.Second, func(ctx context.Context) error {
		_, err := s.n.ctr(ctx, "version")
		return err
	})
}

// importSandboxImage imports the CRI sandbox image (the pause binary of the
// NodeBin tool), which no registry serves here.
func (s *starter) importSandboxImage(ctx context.Context) error {
	pauseTar := filepath.Join(s.dir, "pause.tar")
	if _, err := oci.WriteArchive(pauseTar, PauseImage, oci.Program{Name: "pause"}, "harness",
		map[string]string{runtime.GOARCH: filepath.Join(s.bin, "pause")}, time.Unix(0, 0)); err != nil {
		return err
	}
	return s.n.ImportImages(ctx, pauseTar)
}

// ctr runs containerd's ctr against the node's containerd, in the k8s.io
// namespace the CRI uses.
func (n *Node) ctr(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", n.State.ContainerdSocket, "--namespace", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// ImportImages imports OCI image archives into the node's containerd (the
// k8s.io namespace the CRI uses), as `ctr images import` does on a real node.
func (n *Node) ImportImages(ctx context.Context, archives ...string) error {
	for _, a := range archives {
		if _, err := n.ctr(ctx, "images", "import", "--platform", "linux/"+runtime.GOARCH, a); err != nil {
			return fmt.Errorf("import image %s: %w", a, err)
		}
	}
	return nil
}

// TrustRegistry lets the node's containerd pull from the plain-HTTP
// registry at host (host:port on loopback), as a registry mirror entry in
// its certs.d (config_path) does on a real node; containerd reads it at
// every pull.
func (n *Node) TrustRegistry(host string) error {
	dir := filepath.Join(filepath.Dir(n.State.ContainerdSocket), "certs.d", host)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("trust registry %s: %w", host, err)
	}
	cfg := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+host, "http://"+host)
	if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(cfg), 0o600); err != nil {
		return fmt.Errorf("trust registry %s: %w", host, err)
	}
	return nil
}
