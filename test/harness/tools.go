package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Tool names a directory of test binaries built once from the Go module
// proxy into a cache outside the repository, keyed on the files that pin
// their versions. The name is the same everywhere: the manifest
// hack/tools/<name>.sh, the Make target and variable (`make nodebin`,
// $(NODEBIN)), the cache directory ~/.cache/cozy-health/<name>/<key>/ and
// the override $COZY_HEALTH_<NAME>.
type Tool string

// The tools the tests run.
const (
	// TestBin holds kube-apiserver, kubectl and etcd (test/controlplane).
	TestBin Tool = "testbin"
	// NodeBin holds kubelet, kube-proxy, kube-controller-manager,
	// kube-scheduler, coredns and pause (test/nodebin).
	NodeBin Tool = "nodebin"
	// Promtool holds Prometheus's promtool (test/promtool).
	Promtool Tool = "promtool"
	// VMAlert holds vmalert and victoria-metrics single (test/vmalert).
	VMAlert Tool = "vmalert"
	// Flux holds Flux's source-controller and helm-controller and, under
	// crds/, the CRDs of the same versions (test/flux).
	Flux Tool = "flux"
	// Cosign holds Sigstore's cosign (test/cosign): hack/sign signs with
	// it, test/signing verifies.
	Cosign Tool = "cosign"
	// Syft holds Anchore's syft (test/syft): hack/sign's SPDX SBOMs.
	Syft Tool = "syft"
	// Krew holds krew's validate-krew-manifest and kubectl-krew
	// (test/krew): hack/krew and test/signing validate the plugin manifest.
	Krew Tool = "krew"
)

// Env is the variable that overrides the tool's directory.
func (t Tool) Env() string { return "COZY_HEALTH_" + strings.ToUpper(string(t)) }

// Dir returns the tool's directory: $COZY_HEALTH_<NAME> when set, otherwise
// what `hack/tooldir.sh <name>` prints (it builds the tools the first time,
// under flock), remembered in $COZY_HEALTH_<NAME> for the rest of the
// process and its children.
func (t Tool) Dir() (string, error) {
	if d := os.Getenv(t.Env()); d != "" {
		return d, nil
	}
	root := RepoRoot()
	if root == "" {
		return "", fmt.Errorf("find the directory of %s: %s is unset and the repository root was not found", t, t.Env())
	}
	cmd := exec.Command("bash", filepath.Join(root, "hack", "tooldir.sh"), string(t))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("run hack/tooldir.sh %s: %w", t, err)
	}
	d := strings.TrimSpace(string(out))
	_ = os.Setenv(t.Env(), d)
	return d, nil
}
