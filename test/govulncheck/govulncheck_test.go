// Package govulncheck tests hack/govulncheck.sh against a vulnerability
// database of its own (a file:// database in the format vuln.go.dev
// serves): it must scan what ships, the agent, the aggregator and
// kubectl-health, and nothing else of the module graph (the go.mod tool
// block, hack/, the tests).
package govulncheck

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cozystack/cozy-health/test/harness"
)

// entry is one fake OSV entry: a vulnerability in every version of mod,
// in package pkg (every symbol of it).
type entry struct{ id, mod, pkg string }

// writeDB writes a vulnerability database holding entries under dir and
// returns its file:// URL.
func writeDB(t *testing.T, entries ...entry) string {
	t.Helper()
	dir := t.TempDir()
	const at = "2026-01-01T00:00:00Z"
	for _, d := range []string{"index", "ID"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	type ref struct {
		ID       string `json:"id"`
		Modified string `json:"modified"`
	}
	var vulns []ref
	mods := map[string][]ref{}
	for _, e := range entries {
		osv := map[string]any{
			"schema_version": "1.3.1", "id": e.id, "modified": at, "published": at,
			"summary": "fake vulnerability in " + e.pkg + " (test/govulncheck)", "details": "fake",
			"affected": []any{map[string]any{
				"package":            map[string]any{"name": e.mod, "ecosystem": "Go"},
				"ranges":             []any{map[string]any{"type": "SEMVER", "events": []any{map[string]any{"introduced": "0"}}}},
				"ecosystem_specific": map[string]any{"imports": []any{map[string]any{"path": e.pkg}}},
			}},
			"database_specific": map[string]any{"url": "https://pkg.go.dev/vuln/" + e.id},
		}
		writeJSON(t, filepath.Join(dir, "ID", e.id+".json"), osv)
		vulns = append(vulns, ref{e.id, at})
		mods[e.mod] = append(mods[e.mod], ref{e.id, at})
	}
	type module struct {
		Path  string `json:"path"`
		Vulns []ref  `json:"vulns"`
	}
	var index []module
	for m, v := range mods {
		index = append(index, module{m, v})
	}
	writeJSON(t, filepath.Join(dir, "index", "db.json"), map[string]string{"modified": at})
	writeJSON(t, filepath.Join(dir, "index", "modules.json"), index)
	writeJSON(t, filepath.Join(dir, "index", "vulns.json"), vulns)
	return "file://" + dir
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// run runs hack/govulncheck.sh with db and returns its output and whether
// it succeeded.
func run(t *testing.T, db string) (string, bool) {
	t.Helper()
	cmd := exec.Command("bash", "hack/govulncheck.sh")
	cmd.Dir = harness.RepoRoot()
	cmd.Env = append(os.Environ(), "GOVULNDB="+db)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("run hack/govulncheck.sh: %v", err)
		}
	}
	return string(out), err == nil
}

// TestScansTheShippedBinaries: a vulnerability in a module the agent and
// the aggregator link (zap) fails the scan, naming them; one in a module
// only hack/image links (go-containerregistry, which builds the images)
// does not, as it did while the script scanned ./... .
func TestScansTheShippedBinaries(t *testing.T) {
	harness.SkipShort(t)
	out, ok := run(t, writeDB(t, entry{"GO-2099-0001", "go.uber.org/zap", "go.uber.org/zap"}))
	t.Logf("zap:\n%s", out)
	if ok {
		t.Error("a vulnerability in zap, which the agent links, passed")
	}
	for _, want := range []string{"cozy-health-agent (./agent) FAILED", "cozy-health-aggregator (./aggregator) FAILED", "GO-2099-0001"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}

	out, ok = run(t, writeDB(t, entry{"GO-2099-0002", "github.com/google/go-containerregistry", "github.com/google/go-containerregistry/pkg/v1/layout"}))
	t.Logf("go-containerregistry:\n%s", out)
	if !ok || strings.Contains(out, "GO-2099-0002") {
		t.Error("a vulnerability in a module no shipped binary links (hack/image's go-containerregistry) failed the scan")
	}
	for _, want := range []string{"cozy-health-agent (./agent)", "cozy-health-aggregator (./aggregator)", "kubectl-health (./cmd/kubectl-health)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q: not every shipped binary was scanned", want)
		}
	}

	// vuln.go.dev: where it cannot be reached (as here) the script skips,
	// saying so; where it can, every shipped binary is scanned.
	out, ok = run(t, "")
	t.Logf("vuln.go.dev:\n%s", out)
	switch {
	case strings.Contains(out, "SKIPPED: the vulnerability database https://vuln.go.dev is unreachable"):
		if !ok {
			t.Error("an unreachable database failed the scan instead of skipping it")
		}
	case !strings.Contains(out, "kubectl-health (./cmd/kubectl-health)"):
		t.Error("vuln.go.dev neither skipped as unreachable nor scanned every shipped binary")
	}
}
