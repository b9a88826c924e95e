package monitoring

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// TestDashboardQueries: every panel query of the dashboard parses with
// the MetricsQL parser (VictoriaMetrics, Cozystack's stack) and with
// Prometheus's PromQL parser (through promtool check rules: each query
// becomes a recording rule), after Grafana's variables are put in.
func TestDashboardQueries(t *testing.T) {
	qs := loadDashboardQueries(t)
	require.GreaterOrEqual(t, len(qs), 15)
	type recording struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var recs []recording
	for i, q := range qs {
		expr := expandGrafana(q.Expr)
		_, err := parseQuery(expr)
		require.NoError(t, err, "panel %q: %s", q.Panel, expr)
		recs = append(recs, recording{Record: fmt.Sprintf("dashboard:panel_%d", i), Expr: expr})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": recs}}})
	require.NoError(t, err)
	f := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	require.NoError(t, os.WriteFile(f, b, 0o600))
	out, err := exec.Command(promtool(t), "check", "rules", f).CombinedOutput()
	require.NoError(t, err, "promtool check rules on the dashboard's queries:\n%s", out)
	t.Logf("%s", out)
}

// TestRulesParseAsMetricsQL: vmalert evaluates the rules with MetricsQL.
func TestRulesParseAsMetricsQL(t *testing.T) {
	for _, r := range loadRules(t) {
		_, err := parseQuery(r.Expr)
		require.NoError(t, err, "%s: %s", r.Alert, r.Expr)
	}
}
