package monitoring

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	healthv1alpha1 "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
	"github.com/cozystack/cozy-health/pkg/client/clientset/versioned"
	"github.com/cozystack/cozy-health/test/harness"
	"github.com/cozystack/cozy-health/test/lab"
)

// targetLabels are the labels the scraper adds to every series (not in
// any exposition); a query may group by them.
var targetLabels = map[string]bool{"instance": true, "job": true, "pod": true, "namespace": true, "service": true, "container": true, "endpoint": true}

// series is one scraped series: its labels and where it came from.
type series struct {
	labels map[string]string
	value  float64
	target string
}

// scrapeIndex maps a series name (histograms expanded into _bucket, _sum
// and _count) to its series.
type scrapeIndex map[string][]series

func (ix scrapeIndex) add(target, body string) error {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return fmt.Errorf("parse the scrape of %s: %w", target, err)
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			ls := map[string]string{}
			for _, l := range m.GetLabel() {
				ls[l.GetName()] = l.GetValue()
			}
			value := m.GetGauge().GetValue() + m.GetCounter().GetValue() + m.GetUntyped().GetValue()
			put := func(n string, extra ...string) {
				l := ls
				if len(extra) > 0 {
					l = map[string]string{}
					for k, v := range ls {
						l[k] = v
					}
					l[extra[0]] = extra[1]
				}
				ix[n] = append(ix[n], series{labels: l, value: value, target: target})
			}
			switch {
			case m.Histogram != nil:
				for _, b := range m.GetHistogram().GetBucket() {
					put(name+"_bucket", "le", fmt.Sprint(b.GetUpperBound()))
				}
				put(name+"_bucket", "le", "+Inf")
				put(name + "_sum")
				put(name + "_count")
			case m.Summary != nil:
				put(name, "quantile", "0.5")
				put(name + "_sum")
				put(name + "_count")
			default:
				put(name)
			}
		}
	}
	return nil
}

// matches says whether any series of s's metric satisfies all its
// matchers (the label values, not the sample values: the status gauges
// export every status, 0 or 1).
func (ix scrapeIndex) matches(s selector) bool { return ix.matchesValue(s, nil) }

// matchesValue is matches, and the sample value is *want when want is set.
func (ix scrapeIndex) matchesValue(s selector, want *float64) bool {
	for _, se := range ix[s.Metric] {
		if (want == nil || se.value == *want) && ix.matchesLabels(s, se) {
			return true
		}
	}
	return false
}

// matchesLabels says whether se satisfies all of s's matchers.
func (scrapeIndex) matchesLabels(s selector, se series) bool {
	for _, m := range s.Matchers {
		v := se.labels[m.Label]
		var hit bool
		if m.IsRegexp {
			hit = regexp.MustCompile("^(?:" + m.Value + ")$").MatchString(v)
		} else {
			hit = v == m.Value
		}
		if hit == m.IsNegative {
			return false
		}
	}
	return true
}

func (ix scrapeIndex) hasLabel(metric, label string) bool {
	for _, se := range ix[metric] {
		if _, ok := se.labels[label]; ok {
			return true
		}
	}
	return false
}

func get(ctx context.Context, url string) (string, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode, err
}

// scrapeLab scrapes every aggregator replica and every running agent.
func scrapeLab(ctx context.Context, st *lab.State) (scrapeIndex, error) {
	ix := scrapeIndex{}
	var targets []string
	for _, a := range st.Aggregators {
		targets = append(targets, "aggregator "+a.Name+" http://"+a.Metrics+"/metrics")
	}
	for _, n := range st.Nodes {
		targets = append(targets, "agent "+n.Name+" http://"+n.AgentMetrics+"/metrics")
	}
	for _, tg := range targets {
		f := strings.Fields(tg)
		body, code, err := get(ctx, f[2])
		if err != nil {
			continue // a stopped agent
		}
		if code != http.StatusOK {
			return nil, fmt.Errorf("scrape %s %s: %d", f[0], f[1], code)
		}
		if err := ix.add(f[0]+"/"+f[1], body); err != nil {
			return nil, err
		}
	}
	return ix, nil
}

// query is one query the rules or the dashboard run.
type query struct {
	from string
	expr string
	p    parsed
}

func referencedQueries(t *testing.T) []query {
	var qs []query
	for _, r := range loadRules(t) {
		p, err := parseQuery(r.Expr)
		require.NoError(t, err)
		qs = append(qs, query{from: "alert " + r.Alert, expr: r.Expr, p: p})
	}
	for _, q := range loadDashboardQueries(t) {
		expr := expandGrafana(q.Expr)
		p, err := parseQuery(expr)
		require.NoError(t, err)
		qs = append(qs, query{from: "panel " + q.Panel, expr: expr, p: p})
	}
	return qs
}

// kubeStateMetrics: a selector of kube-state-metrics' own series (kube_*,
// e.g. kube_deployment_spec_replicas{namespace, deployment}, STABLE in its
// docs/metrics/workload/deployment-metrics.md), which the watchdog reads to
// know that the store holds cozy-health's Deployment. The lab runs no
// kube-state-metrics: the rule unit tests (testdata/alerts_test.yaml) cover
// those arms.
func kubeStateMetrics(s selector) bool { return strings.HasPrefix(s.Metric, "kube_") }

// notDrivenHere are the silence reasons the cross-check's faults do not
// create, so their selectors need no matching value here (their names
// and labels are still checked on the scrape): the lab renews every
// node's kubelet Lease, so a silent agent is AgentSilent, never
// HeartbeatMissed (no Lease seen: rollup's TestSilenceExplained); a node
// down with its Lease (NodeUnreachable) and every node cut at once
// (ManyNodesSilent) are the e2e's cases (TestFaultMatrix), which read them
// on the same lab.
var notDrivenHere = map[string]bool{"HeartbeatMissed": true, "NodeUnreachable": true, "ManyNodesSilent": true}

// silenceNotDriven tells whether s selects one of notDrivenHere.
func silenceNotDriven(s selector) bool {
	for _, m := range s.Matchers {
		if m.Label == "reason" && !m.IsRegexp && !m.IsNegative && notDrivenHere[m.Value] {
			return true
		}
	}
	return false
}

func selectorString(s selector) string {
	var ms []string
	for _, m := range s.Matchers {
		op := "="
		switch {
		case m.IsRegexp && m.IsNegative:
			op = "!~"
		case m.IsRegexp:
			op = "=~"
		case m.IsNegative:
			op = "!="
		}
		ms = append(ms, fmt.Sprintf("%s%s%q", m.Label, op, m.Value))
	}
	return s.Metric + "{" + strings.Join(ms, ",") + "}"
}

func binDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("COZY_HEALTH_BIN"); d != "" {
		return d
	}
	d := filepath.Join(harness.RepoRoot(), "bin")
	if _, err := os.Stat(filepath.Join(d, "cozy-health-agent")); err != nil {
		t.Fatalf("the scrape cross-check runs the real binaries: run `make build` (or make test) first: %v", err)
	}
	return d
}

// TestScrapeCrossCheck starts a lab (real apiserver, etcd members, Talos
// shims, source servers, agent and aggregator binaries), injects the
// faults the alerts are about, and scrapes the real aggregators and
// agents: every series name the rules and the dashboard read exists,
// every label they match or group on exists on it, and every selector
// matches a series once its fault is on. It logs, per alert, how long
// after the fault its expression held on the scrape: the alert fires
// that long after the fault plus its `for`, plus up to one scrape and one
// evaluation interval (30 s each). The backups alert is fed from a CNPG
// Cluster whose last backup is past its maxAge, through the aggregators'
// cluster adapters; what the replicas export for it goes through promtool
// against the shipped rules. Last, every aggregator is killed and it logs
// when the Health objects pass freshUntil (the watchdog).
func TestScrapeCrossCheck(t *testing.T) {
	harness.SkipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	l, err := lab.Up(ctx, lab.Options{
		Dir: t.TempDir(), Nodes: 3, BinDir: binDir(t), LeaseDuration: 6 * time.Second,
		Log: func(f string, a ...any) { t.Logf(f, a...) },
	})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, l.Down()) })
	st := l.State
	components := []string{"etcd", "disk", "cilium", "kube-ovn", "linstor", "node"}
	_, err = l.WaitFor(ctx, nil, "all Healthy", 2*time.Minute, lab.AllHealthy(components))
	require.NoError(t, err)

	qs := referencedQueries(t)

	// The faults the alerts are about (the fault matrix), and the
	// expression of each alert narrowed to the fault's node, as it must
	// come to hold on the scrape.
	type watch struct {
		faultAlert
		held time.Duration
	}
	var watches []*watch
	for _, f := range faultMatrix {
		watches = append(watches, &watch{faultAlert: f})
	}
	faults, _ := labFaults()
	start := time.Now()
	for _, spec := range faults {
		injectLabFault(ctx, t, st.Dir, spec)
	}
	require.NoError(t, createStaleBackup(ctx, labRestConfig(t, st)))
	t.Logf("fault %s: Cluster %s/%s, lastSuccessfulBackup 50 h ago under a daily ScheduledBackup", backupFault, staleTenant, staleCluster)
	// Drain checks, one answered and one refused, so their counters exist.
	agg := st.Aggregators[0]
	for _, node := range []string{"node-1", "no-such-node"} {
		body, code, err := get(ctx, "http://"+agg.HTTP+"/v1/drain-check?node="+node)
		require.NoError(t, err)
		t.Logf("drain-check %s: %d %s", node, code, strings.TrimSpace(body))
	}

	// Scrape until every selector the rules and the dashboard use matches
	// (but the exempt ones) and every watched expression held.
	var ix scrapeIndex
	var missing []string
	deadline := time.Now().Add(3 * time.Minute)
	for {
		ix, err = scrapeLab(ctx, st)
		require.NoError(t, err)
		elapsed := time.Since(start)
		for _, w := range watches {
			var want *float64
			if w.one {
				one := 1.0
				want = &one
			}
			if w.held == 0 && ix.matchesValue(w.sel, want) {
				w.held = elapsed
			}
		}
		missing = missing[:0]
		for _, q := range qs {
			for _, s := range q.p.Selectors {
				if kubeStateMetrics(s) || silenceNotDriven(s) {
					continue
				}
				if !ix.matches(s) {
					missing = append(missing, q.from+": "+selectorString(s))
				}
			}
		}
		pending := 0
		for _, w := range watches {
			if w.held == 0 {
				pending++
			}
		}
		if (len(missing) == 0 && pending == 0) || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	assert.Empty(t, missing, "selectors that match no series of the lab's scrape")

	// Names and labels, on the final scrape.
	for _, q := range qs {
		for _, s := range q.p.Selectors {
			if kubeStateMetrics(s) {
				continue
			}
			if !assert.NotEmpty(t, ix[s.Metric], "%s: no series %s in the scrape", q.from, s.Metric) {
				continue
			}
			for _, m := range s.Matchers {
				if m.Value == "" && !m.IsRegexp {
					continue // l="" / l!="" hold on a series without l
				}
				assert.True(t, ix.hasLabel(s.Metric, m.Label), "%s: %s has no label %s", q.from, s.Metric, m.Label)
			}
		}
		for _, l := range q.p.Grouping {
			if targetLabels[l] || contains(q.p.Created, l) {
				continue
			}
			found := false
			for _, s := range q.p.Selectors {
				found = found || ix.hasLabel(s.Metric, l)
			}
			assert.True(t, found, "%s: groups by %s, which none of its series carries", q.from, l)
		}
	}
	// The agents' own endpoint is there too.
	var agentSeries int
	for name, ss := range ix {
		for _, s := range ss {
			if strings.HasPrefix(s.target, "agent/") && strings.HasPrefix(name, "cozy_health_agent_check_") {
				agentSeries++
			}
		}
	}
	assert.Positive(t, agentSeries, "the agents' cozy_health_agent_check_* series")

	forOf := map[string]time.Duration{}
	for _, r := range loadRules(t) {
		if d, err := model.ParseDuration(r.For); err == nil {
			forOf[r.Alert] = time.Duration(d)
		}
	}
	for _, w := range watches {
		if assert.NotZero(t, w.held, "%s: its expression never held after %s", w.alert, w.fault) {
			t.Logf("fault-to-alert %s (%s): expression held %.1fs after the fault; fires after %.1fs + for %s, within a further scrape and evaluation interval (30 s + 30 s)",
				w.key(), w.fault, w.held.Seconds(), w.held.Seconds(), forOf[w.alert])
		}
	}

	// The backup facts come from every replica's own adapters, not only
	// from the leader's writes: every replica exports the series.
	for _, w := range watches {
		if w.alert != "CozyHealthBackupsStale" {
			continue
		}
		var without []string
		require.Eventually(t, func() bool {
			ix, err = scrapeLab(ctx, st)
			require.NoError(t, err)
			without = without[:0]
			for _, a := range st.Aggregators {
				found := false
				for _, se := range ix[w.sel.Metric] {
					found = found || (se.target == "aggregator/"+a.Name && ix.matchesLabels(w.sel, se))
				}
				if !found {
					without = append(without, a.Name)
				}
			}
			return len(without) == 0
		}, time.Minute, 500*time.Millisecond, "replicas without %s: %v", selectorString(w.sel), without)
	}
	promtoolBackupsStale(t, ix)

	// The watchdog: every aggregator dies. Their scrape fails at once
	// (absent(cozy_health_leader) from the next scrape); the Health
	// objects pass freshUntil, as any watcher of them (kube-state-metrics)
	// sees.
	killed := time.Now()
	for _, a := range st.Aggregators {
		if a.Pid > 0 {
			_ = syscall.Kill(a.Pid, syscall.SIGKILL)
		}
	}
	for _, a := range st.Aggregators {
		require.Eventually(t, func() bool { _, _, err := get(ctx, "http://"+a.Metrics+"/metrics"); return err != nil }, 30*time.Second, 100*time.Millisecond)
	}
	t.Logf("fault-to-alert %s (%s): no replica scrapes after %.1fs; fires one scrape interval later + for %s", watchdog.key(), watchdog.fault, time.Since(killed).Seconds(), forOf[watchdog.alert])
	hc, err := versioned.NewForConfig(labRestConfig(t, st))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		list, err := hc.HealthV1alpha1().Healths(lab.PlatformNamespace).List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) == 0 {
			return false
		}
		return allStale(list.Items, time.Now())
	}, 2*time.Minute, 250*time.Millisecond)
	t.Logf("every Health object past freshUntil %.1fs after the aggregators died", time.Since(killed).Seconds())
}

func allStale(hs []healthv1alpha1.Health, now time.Time) bool {
	for _, h := range hs {
		if h.Status.FreshUntil != nil && now.Before(h.Status.FreshUntil.Time) {
			return false
		}
	}
	return true
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func labRestConfig(t *testing.T, st *lab.State) *rest.Config {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", st.Kubeconfig)
	require.NoError(t, err)
	return rc
}
