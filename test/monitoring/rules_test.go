package monitoring

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/cozy-health/pkg/doctable"
	"github.com/cozystack/cozy-health/test/harness"
)

// TestAlertRules runs `promtool check rules` on the shipped rule file and
// `promtool test rules` on its unit tests (testdata/alerts_test.yaml).
func TestAlertRules(t *testing.T) {
	pt := promtool(t)
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(pt, args...)
		cmd.Dir = "testdata"
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}
	run("check", "rules", filepath.Join(filesDir(), "alerts.yaml"))
	run("test", "rules", "alerts_test.yaml")
}

// TestAlertRuleShape: every alert carries a severity, a summary, a
// description and a runbook_url whose section exists in docs/runbook.md;
// the annotations name what the alert is about; every alert has unit
// tests in which it fires and in which it stays silent.
func TestAlertRuleShape(t *testing.T) {
	rules := loadRules(t)
	runbook, err := os.ReadFile(filepath.Join(harness.RepoRoot(), "docs", "runbook.md"))
	require.NoError(t, err)
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(string(runbook), -1) {
		anchors[githubAnchor(m[1])] = true
	}

	b, err := os.ReadFile(filepath.Join("testdata", "alerts_test.yaml"))
	require.NoError(t, err)
	var tests struct {
		Tests []struct {
			Name          string `json:"name"`
			AlertRuleTest []struct {
				Alertname string           `json:"alertname"`
				ExpAlerts []map[string]any `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	require.NoError(t, yaml.Unmarshal(b, &tests))
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}

	const runbookPrefix = "https://github.com/cozystack/cozy-health/blob/main/docs/runbook.md#"
	names := map[string]bool{}
	for _, r := range rules {
		if r.Alert == "" {
			continue
		}
		names[r.Alert] = true
		t.Run(r.Alert, func(t *testing.T) {
			assert.Contains(t, []string{"critical", "warning"}, r.Labels["severity"])
			assert.NotEmpty(t, r.Annotations["summary"])
			assert.NotEmpty(t, r.Annotations["description"])
			url := r.Annotations["runbook_url"]
			if assert.True(t, strings.HasPrefix(url, runbookPrefix), url) {
				anchor := strings.TrimPrefix(url, runbookPrefix)
				assert.Equal(t, strings.ToLower(r.Alert), anchor)
				assert.True(t, anchors[anchor], "docs/runbook.md has no section #%s", anchor)
			}
			assert.True(t, fires[r.Alert], "no unit test in which %s fires", r.Alert)
			assert.True(t, silent[r.Alert], "no unit test in which %s stays silent", r.Alert)
			// The annotations name what the alert is about: the component
			// (unless the expression pins it), the node, the resource, the
			// reason and the cause wherever the expression keeps them.
			text := r.Annotations["summary"] + r.Annotations["description"]
			p, err := parseQuery(r.Expr)
			require.NoError(t, err)
			pinned := map[string]bool{}
			for _, s := range p.Selectors {
				for _, m := range s.Matchers {
					if !m.IsRegexp && !m.IsNegative {
						pinned[m.Label] = true
					}
				}
			}
			for _, l := range p.Grouping {
				switch {
				case l == "component" && pinned[l]:
				case l == "component", l == "node", l == "resource", l == "reason", l == "cause":
					assert.Contains(t, text, "$labels."+l, "the annotations do not name %s", l)
				}
			}
		})
	}
}

// TestAlertTables: the shipped rules (alerts.yaml) are the one source of
// the alert names; the alert table of docs/reference/alerts.md,
// docs/runbook.md's sections and the promtool unit tests name the same set.
// The fault matrix (faultMatrix, then watchdog) is the one source of the
// measured faults; that page's fault-to-alert table (TestScrapeCrossCheck)
// and its table of times on the real evaluators (TestAlertEvaluation) list
// the same set.
// Every comparison is of sets (pkg/doctable, as for the other reference
// pages), reporting what is missing and what is extra by name.
func TestAlertTables(t *testing.T) {
	var rules []string
	for _, r := range loadRules(t) {
		if r.Alert != "" {
			rules = append(rules, r.Alert)
		}
	}
	page, err := os.ReadFile(filepath.Join(harness.RepoRoot(), alertsPage))
	require.NoError(t, err)
	runbook, err := os.ReadFile(filepath.Join(harness.RepoRoot(), "docs", "runbook.md"))
	require.NoError(t, err)
	tests, err := os.ReadFile(filepath.Join("testdata", "alerts_test.yaml"))
	require.NoError(t, err)

	doctable.SameSet(t, "alerts.yaml", rules, alertsPage+"'s alert table",
		doctable.Column(t, string(page), "| alert | severity | fires when | runbook |", 0, alertName))
	var sections []string
	for _, m := range regexp.MustCompile(`(?m)^## (CozyHealth\w+)\s*$`).FindAllStringSubmatch(string(runbook), -1) {
		sections = append(sections, m[1])
	}
	doctable.SameSet(t, "alerts.yaml", rules, "docs/runbook.md's alert sections", sections)
	var tested []string
	for _, m := range regexp.MustCompile(`(?m)^\s*alertname:\s*(\S+)\s*$`).FindAllStringSubmatch(string(tests), -1) {
		tested = append(tested, m[1])
	}
	doctable.SameSet(t, "alerts.yaml", rules, "the promtool unit tests (testdata/alerts_test.yaml)", doctable.Unique(tested))

	var matrix, matrixAlerts []string
	for _, f := range append(append([]faultAlert{}, faultMatrix...), watchdog) {
		matrix = append(matrix, f.key())
		matrixAlerts = append(matrixAlerts, f.alert)
	}
	assert.Empty(t, doctable.Missing(rules, matrixAlerts), "the fault matrix names these, which alerts.yaml has not")
	doctable.SameSet(t, "the fault matrix (faultMatrix, watchdog)", matrix, alertsPage+"'s fault-to-alert table (TestScrapeCrossCheck)",
		doctable.Column(t, string(page), "| fault (lab) | alert | expression holds after |", 1, alertKey))
	doctable.SameSet(t, "the fault matrix (faultMatrix, watchdog)", matrix, alertsPage+"'s alert times on the real evaluators (TestAlertEvaluation)",
		doctable.Column(t, string(page), "| alert | fault (repair) | `for` |", 0, alertKey))
}

// alertsPage is the reference page of the alerts, from the repository root.
const alertsPage = "docs/reference/alerts.md"

var alertCell = regexp.MustCompile("^`(CozyHealth\\w+)`(?: \\((.+?)\\))?")

// alertName is the alert a cell starts with ("`CozyHealthX` (the
// watchdog)" -> CozyHealthX), "" for none.
func alertName(cell string) string {
	if m := alertCell.FindStringSubmatch(cell); m != nil {
		return m[1]
	}
	return ""
}

// alertKey is the cell as faultAlert.key names it: "`CozyHealthX` (etcd)"
// -> "CozyHealthX (etcd)", "`CozyHealthX` (`Cause`)" -> "CozyHealthX
// (Cause)".
func alertKey(cell string) string {
	m := alertCell.FindStringSubmatch(cell)
	switch {
	case m == nil:
		return ""
	case m[2] == "":
		return m[1]
	}
	return m[1] + " (" + strings.Trim(m[2], "`") + ")"
}

// githubAnchor is the anchor GitHub gives a Markdown heading.
func githubAnchor(heading string) string {
	h := strings.ToLower(strings.TrimSpace(heading))
	h = regexp.MustCompile(`[^a-z0-9 _-]`).ReplaceAllString(h, "")
	return strings.ReplaceAll(h, " ", "-")
}
