package push

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/hack/image/oci"
	"github.com/cozystack/cozy-health/test/harness"
)

// Debian's containerd (what the test node and Talos run) pulls what `make
// push` pushed by the digest it wrote into the values, both platforms, from
// the loopback registry: the content it stores is the built index. The
// install e2e (test/nodee2e) does the same through the kubelet and the CRI.
// It also imports an archive the image builder (hack/image/oci) wrote, as
// the lab and the real-node harness do with theirs: `ctr images import`
// names it after the archive's reference and unpacks this machine's
// platform.
func TestContainerdPullsByDigest(t *testing.T) {
	harness.SkipShort(t)
	for _, b := range []string{"containerd", "ctr"} {
		_, err := exec.LookPath(b)
		require.NoError(t, err, "apt-get install containerd (.ci/run installs it)")
	}
	images := t.TempDir()
	writeImages(t, images)
	host, requests := loopbackRegistry(t)
	pushed, err := Push(context.Background(), Options{Images: images, Registry: host + "/cozystack/cozystack", Tag: "0.1.0"})
	require.NoError(t, err)

	// A containerd of our own in a short temporary directory (socket
	// paths are limited), trusting the plain-HTTP registry through a
	// certs.d hosts.toml as a node's registry configuration does.
	dir, err := os.MkdirTemp("/tmp", "ch-ctrd-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "c.sock")
	certs := filepath.Join(dir, "certs.d")
	require.NoError(t, os.MkdirAll(filepath.Join(certs, host), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(certs, host, "hosts.toml"),
		[]byte(fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+host, "http://"+host)), 0o600))
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[metrics]
  address = ""
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock, sock+".ttrpc")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o600))
	cd := exec.Command("containerd", "--config", filepath.Join(dir, "config.toml"))
	log, err := os.Create(filepath.Join(dir, "containerd.log"))
	require.NoError(t, err)
	cd.Stdout, cd.Stderr = log, log
	require.NoError(t, cd.Start())
	t.Cleanup(func() {
		_ = cd.Process.Kill()
		_ = cd.Wait()
	})
	ctr := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", sock, "--namespace", "cozy-health-test"}, args...)...).CombinedOutput()
		return string(out), err
	}
	require.Eventually(t, func() bool { _, err := ctr("version"); return err == nil }, time.Minute, 200*time.Millisecond, "containerd answers")

	for _, p := range pushed {
		before := len(requests())
		out, err := ctr("images", "pull", "--all-platforms", "--hosts-dir", certs, p.Ref)
		require.NoError(t, err, "ctr images pull %s:\n%s", p.Ref, out)
		var byDigest bool
		for _, r := range requests()[before:] {
			byDigest = byDigest || strings.HasSuffix(r, "/manifests/"+p.Digest)
		}
		assert.True(t, byDigest, "containerd asked for the index by digest: %v", requests()[before:])
		ls, err := ctr("images", "ls")
		require.NoError(t, err)
		assert.Contains(t, ls, p.Digest, "containerd stores the pushed index")
		for arch, d := range p.Platforms {
			info, err := ctr("content", "get", d)
			require.NoError(t, err, "linux/%s manifest %s in containerd's store: %s", arch, d, info)
		}
	}

	// An archive written by oci.WriteArchive, imported without a registry.
	bin := filepath.Join(t.TempDir(), "import")
	require.NoError(t, os.WriteFile(bin, []byte("not run: containerd only imports and unpacks it"), 0o755))
	const ref = "localhost/cozy-health/import:lab"
	res, err := oci.WriteArchive(filepath.Join(t.TempDir(), "import.tar"), ref, oci.Program{Name: "import"}, "test",
		map[string]string{runtime.GOARCH: bin}, time.Unix(0, 0))
	require.NoError(t, err)
	out, err := ctr("images", "import", "--platform", "linux/"+runtime.GOARCH, res.Archive)
	require.NoError(t, err, "ctr images import %s:\n%s", res.Archive, out)
	ls, err := ctr("images", "ls")
	require.NoError(t, err)
	assert.Contains(t, ls, ref+" ", "containerd names the image after the archive's reference")
	assert.Contains(t, ls, res.Digest, "containerd stores the archive's index")
	info, err := ctr("content", "get", res.Platforms[runtime.GOARCH].Digest)
	require.NoError(t, err, "linux/%s manifest in containerd's store: %s", runtime.GOARCH, info)
	check, err := ctr("images", "check", "name=="+ref)
	require.NoError(t, err)
	assert.Contains(t, check, "complete", "the image's content is all there")
}
