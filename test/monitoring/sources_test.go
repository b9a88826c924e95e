package monitoring

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metricsql"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/cozy-health/test/harness"
)

// filesDir holds the one source of the rules and the dashboard.
func filesDir() string {
	return filepath.Join(harness.RepoRoot(), "deploy", "charts", "cozy-health", "files")
}

// promtool is the promtool binary of the Promtool tool directory.
func promtool(t *testing.T) string {
	t.Helper()
	d, err := harness.Promtool.Dir()
	require.NoError(t, err)
	return filepath.Join(d, "promtool")
}

// ruleFile is a Prometheus rule file.
type ruleFile struct {
	Groups []struct {
		Name     string `json:"name"`
		Interval string `json:"interval"`
		Rules    []rule `json:"rules"`
	} `json:"groups"`
}

type rule struct {
	Alert       string            `json:"alert"`
	Record      string            `json:"record"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

func loadRules(t *testing.T) []rule {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(filesDir(), "alerts.yaml"))
	require.NoError(t, err)
	var f ruleFile
	require.NoError(t, yaml.UnmarshalStrict(b, &f))
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	require.NotEmpty(t, out)
	return out
}

// panelQuery is one query of a dashboard panel.
type panelQuery struct {
	Panel string
	Expr  string
}

func loadDashboardQueries(t *testing.T) []panelQuery {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(filesDir(), "dashboard.json"))
	require.NoError(t, err)
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(b, &d))
	var out []panelQuery
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			require.NotEmpty(t, tg.Expr, "panel %q", p.Title)
			out = append(out, panelQuery{Panel: p.Title, Expr: tg.Expr})
		}
	}
	return out
}

// grafanaVars are the dashboard's variables, replaced by what Grafana
// would put in their place before a query reaches the data source.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "1m",
	"$__interval", "30s",
	"$__range", "6h",
	"${namespace}", ".*",
	"$namespace", ".*",
)

func expandGrafana(expr string) string { return grafanaVars.Replace(expr) }

// selector is one series selector of a query: a metric name and its
// label matchers.
type selector struct {
	Metric   string
	Matchers []metricsql.LabelFilter
}

// parsed is what a query reads: its selectors and the labels its
// grouping and matching clauses (by, without, on, ignoring) name.
type parsed struct {
	Selectors []selector
	Grouping  []string
	// Created are labels the query makes itself (label_replace's
	// destination), which no scrape carries.
	Created []string
}

// parseQuery parses expr with the MetricsQL parser (what vmalert and
// VictoriaMetrics evaluate) and lists what it reads.
func parseQuery(expr string) (parsed, error) {
	e, err := metricsql.Parse(expr)
	if err != nil {
		return parsed{}, err
	}
	var p parsed
	var walkErr error
	metricsql.VisitAll(e, func(x metricsql.Expr) {
		switch x := x.(type) {
		case *metricsql.MetricExpr:
			for _, lfs := range x.LabelFilterss {
				var s selector
				for _, lf := range lfs {
					if lf.Label == "__name__" && !lf.IsRegexp && !lf.IsNegative {
						s.Metric = lf.Value
						continue
					}
					s.Matchers = append(s.Matchers, lf)
				}
				if s.Metric == "" {
					walkErr = fmt.Errorf("a selector without a metric name in %q", expr)
				}
				p.Selectors = append(p.Selectors, s)
			}
		case *metricsql.FuncExpr:
			if x.Name == "label_replace" && len(x.Args) > 1 {
				if dst, ok := x.Args[1].(*metricsql.StringExpr); ok {
					p.Created = append(p.Created, dst.S)
				}
			}
		case *metricsql.ModifierExpr:
			p.Grouping = append(p.Grouping, x.Args...)
		}
	})
	return p, walkErr
}
