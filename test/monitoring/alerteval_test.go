package monitoring

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/cozystack/cozy-health/test/harness"
	"github.com/cozystack/cozy-health/test/lab"
)

// evalConfig says how Prometheus evaluates the shipped rules.
type evalConfig struct {
	// forDivisor divides every rule's `for` (1: the shipped durations).
	forDivisor int
	// interval, when set, replaces the rule group's interval (the
	// evaluation interval); otherwise the shipped one stays.
	interval time.Duration
	// scrape is the scrape interval of the aggregators.
	scrape time.Duration
	// fireTimeout bounds the wait for every alert to fire (and to resolve).
	fireTimeout time.Duration
	// report is the agents' report interval (the lab's 2 s when unset).
	report time.Duration
	// vmDelay, when set, replaces victoria-metrics's -search.latencyOffset
	// and vmalert's -rule.evalDelay (30 s each by default).
	vmDelay time.Duration
}

// alertWatch is one alert of the fault matrix: the fault that makes it
// fire, the repair that resolves it, the labels that pick it out, and
// what was observed.
type alertWatch struct {
	ev                   *Evaluator
	alert, fault, repair string
	labels               map[string]string
	forDur               time.Duration
	faultAt, repairAt    time.Time
	// Observed: first firing in Prometheus's /api/v1/alerts and first
	// present in Alertmanager's /api/v2/alerts after the fault; gone from
	// each after the repair.
	promFiring, amFiring, promResolved, amResolved time.Duration
}

// alertResult is one alert's measured times.
type alertResult struct {
	Evaluator, Alert, Fault, Repair                string
	For, Eval, Scrape                              time.Duration
	PromFiring, AMFiring, PromResolved, AMResolved time.Duration
}

// TestAlertEvaluation evaluates the rules the chart ships on the real
// evaluators, against the lab: Debian's prometheus, and VictoriaMetrics's
// vmalert over victoria-metrics single (built by `make vmalert`; their
// -search.latencyOffset and -rule.evalDelay, 30 s each by default, cut to
// 1 s here), each with its own Debian prometheus-alertmanager.
// Both scrape the three aggregator replicas every second (honor_labels, as
// the chart's ServiceMonitor and VMServiceScrape) and evaluate the rules
// the chart renders as its PrometheusRule (the VMRule's spec is the same)
// every second, with every `for` divided by 30 (2m -> 4s, 5m -> 10s,
// 10m -> 20s, 15m -> 30s) so the test stays short. For every alert in the
// lab's fault matrix it injects the fault, waits until the alert fires in
// the evaluator and reaches its Alertmanager, repairs, and waits until it
// is gone from both; it logs the table of times. An alert never fires
// before its (scaled) `for` has passed since the fault. `make
// alerts-timing` runs the same with the shipped `for` and intervals
// (TestAlertTiming).
func TestAlertEvaluation(t *testing.T) {
	harness.SkipShort(t)
	res := runAlertEval(t, evalConfig{forDivisor: 30, interval: time.Second, scrape: time.Second, fireTimeout: 3 * time.Minute, vmDelay: time.Second})
	logAlertTable(t, res)
}

func (w *alertWatch) matches(ls map[string]string) bool {
	if ls["alertname"] != w.alert {
		return false
	}
	for k, v := range w.labels {
		if ls[k] != v {
			return false
		}
	}
	return true
}

// observe polls Prometheus and Alertmanager until every watch in ws is
// firing in both (resolved false) or gone from both (resolved true).
func observe(ctx context.Context, t *testing.T, ws []*alertWatch, resolved bool, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	type seen struct {
		pa []Alert
		aa []map[string]string
	}
	for {
		now := time.Now()
		views := map[*Evaluator]*seen{}
		for _, w := range ws {
			if views[w.ev] != nil {
				continue
			}
			v := &seen{}
			var err error
			v.pa, err = PromAlerts(ctx, w.ev.Alerts)
			require.NoError(t, err, w.ev.Name)
			v.aa, err = AMAlerts(ctx, w.ev.AM)
			require.NoError(t, err, w.ev.Name)
			views[w.ev] = v
		}
		done := true
		for _, w := range ws {
			pa, aa := views[w.ev].pa, views[w.ev].aa
			inProm, firing, inAM := false, false, false
			for _, a := range pa {
				if w.matches(a.Labels) {
					inProm = true
					firing = firing || a.State == "firing"
				}
			}
			for _, ls := range aa {
				inAM = inAM || w.matches(ls)
			}
			if !resolved {
				if firing && w.promFiring == 0 {
					w.promFiring = now.Sub(w.faultAt)
				}
				if inAM && w.amFiring == 0 {
					w.amFiring = now.Sub(w.faultAt)
				}
				done = done && w.promFiring > 0 && w.amFiring > 0
			} else {
				if !inProm && w.promResolved == 0 {
					w.promResolved = now.Sub(w.repairAt)
				}
				if !inAM && w.amResolved == 0 {
					w.amResolved = now.Sub(w.repairAt)
				}
				done = done && w.promResolved > 0 && w.amResolved > 0
			}
		}
		if done {
			return
		}
		if now.After(deadline) {
			for _, w := range ws {
				t.Errorf("%s: %s (%s / %s): firing after %v (Alertmanager %v), resolved after %v (Alertmanager %v); its alerts %v; Alertmanager's %v",
					w.ev.Name, w.alert, w.fault, w.repair, w.promFiring, w.amFiring, w.promResolved, w.amResolved, views[w.ev].pa, views[w.ev].aa)
			}
			t.FailNow()
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// runAlertEval starts the lab, and on it Prometheus and vmalert over
// victoria-metrics single, each with its own Alertmanager, and measures
// every alert of the fault matrix on both as c says.
func runAlertEval(t *testing.T, c evalConfig) []alertResult {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute+4*c.fireTimeout)
	defer cancel()
	dir := t.TempDir()
	_, _, _, err := Binaries()
	require.NoError(t, err)

	l, err := lab.Up(ctx, lab.Options{
		Dir: filepath.Join(dir, "lab"), Nodes: 3, BinDir: binDir(t), LeaseDuration: 6 * time.Second, Interval: c.report,
		Log: func(f string, a ...any) { t.Logf(f, a...) },
	})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, l.Down()) })
	st := l.State
	_, err = l.WaitFor(ctx, nil, "all Healthy", 2*time.Minute, lab.AllHealthy([]string{"etcd", "disk", "cilium", "kube-ovn", "linstor", "node"}))
	require.NoError(t, err)

	stack, err := StartStack(dir, st, EvalConfig{ForDivisor: c.forDivisor, Interval: c.interval, Scrape: c.scrape, VMDelay: c.vmDelay},
		func(f string, a ...any) { t.Logf(f, a...) })
	require.NoError(t, err)
	t.Cleanup(func() {
		stack.Close()
		if t.Failed() {
			for _, n := range stack.Names() {
				t.Logf("%s log (tail):\n%s", n, stack.LogTail(n, 4000))
			}
		}
	})
	evs, forOf, eval := stack.Evaluators, stack.For, stack.Eval

	var matrix []alertWatch
	for _, f := range faultMatrix {
		matrix = append(matrix, alertWatch{alert: f.alert, fault: f.fault, repair: f.repair, labels: f.labels})
	}
	// Each evaluator has scraped every replica, and none of the measured
	// alerts is pending or firing: the lab is healthy. Other alerts present
	// then are logged (a finding, not measured here).
	measured := append([]alertWatch{}, matrix...)
	measured = append(measured, alertWatch{alert: watchdog.alert, labels: watchdog.labels})
	for _, ev := range evs {
		var others []string
		require.Eventually(t, func() bool {
			if !ev.Ready(ctx, len(st.Aggregators)) {
				return false
			}
			pa, err := PromAlerts(ctx, ev.Alerts)
			if err != nil {
				return false
			}
			others = others[:0]
			for _, a := range pa {
				for _, m := range measured {
					if m.matches(a.Labels) {
						return false
					}
				}
				others = append(others, fmt.Sprintf("%s %v", a.State, a.Labels))
			}
			return true
		}, 3*time.Minute+4*eval, 250*time.Millisecond, "%s: every aggregator scraped with none of the measured alerts pending or firing (%v)", ev.Name, others)
		if len(others) > 0 {
			t.Logf("%s: before the faults, alerts outside the measured ones: %v", ev.Name, others)
		}
	}
	t.Logf("Prometheus and victoria-metrics scrape %d aggregators every %s; Prometheus and vmalert evaluate the chart's rules every %s (for divided by %d); no measured alert pending",
		len(st.Aggregators), c.scrape, eval, c.forDivisor)

	var ws []*alertWatch
	for _, ev := range evs {
		for _, m := range matrix {
			w := m
			w.ev, w.forDur = ev, forOf[w.alert]
			ws = append(ws, &w)
		}
	}
	byFault := func(f string) []*alertWatch {
		var out []*alertWatch
		for _, w := range ws {
			if w.fault == f {
				out = append(out, w)
			}
		}
		return out
	}
	apply := func(spec string, mark func(*alertWatch, time.Time), of string) {
		at := time.Now()
		for _, w := range byFault(of) {
			mark(w, at)
		}
		injectLabFault(ctx, t, st.Dir, spec)
	}
	setFault := func(w *alertWatch, at time.Time) { w.faultAt = at }
	setRepair := func(w *alertWatch, at time.Time) { w.repairAt = at }

	// Every fault at once (as the scrape cross-check injects them).
	faults, repairs := labFaults()
	for _, spec := range faults {
		apply(spec, setFault, spec)
	}
	for _, w := range byFault(backupFault) {
		w.faultAt = time.Now()
	}
	require.NoError(t, createStaleBackup(ctx, labRestConfig(t, st)))
	observe(ctx, t, ws, false, c.fireTimeout)

	// Every repair at once.
	for i, spec := range repairs {
		apply(spec, setRepair, faults[i])
	}
	for _, w := range byFault(backupFault) {
		w.repairAt = time.Now()
	}
	require.NoError(t, freshenBackup(ctx, t, st))
	observe(ctx, t, ws, true, c.fireTimeout)

	// The watchdog: every aggregator killed, then started again.
	var nws []*alertWatch
	for _, ev := range evs {
		nws = append(nws, &alertWatch{ev: ev, alert: watchdog.alert, fault: watchdog.fault, repair: watchdog.repair,
			labels: watchdog.labels, forDur: forOf[watchdog.alert]})
	}
	cur, err := lab.LoadState(st.Dir)
	require.NoError(t, err)
	killed := time.Now()
	for _, w := range nws {
		w.faultAt = killed
	}
	for _, a := range cur.Aggregators {
		if a.Pid > 0 {
			_ = syscall.Kill(a.Pid, syscall.SIGKILL)
		}
	}
	observe(ctx, t, nws, false, c.fireTimeout)
	started := time.Now()
	for _, w := range nws {
		w.repairAt = started
	}
	msg, err := lab.Fault(ctx, st.Dir, "", watchdog.repair, "")
	require.NoError(t, err)
	t.Logf("%s: %s", watchdog.repair, msg)
	observe(ctx, t, nws, true, c.fireTimeout)
	ws = append(ws, nws...)

	var out []alertResult
	for _, w := range ws {
		// An alert cannot fire before its expression has held for `for`,
		// and its expression cannot hold before the fault.
		assert.GreaterOrEqual(t, w.promFiring, w.forDur, "%s: %s fired %v after %s, before its for %v", w.ev.Name, w.alert, w.promFiring, w.fault, w.forDur)
		out = append(out, alertResult{Evaluator: w.ev.Name, Alert: w.alert, Fault: w.fault, Repair: w.repair, For: w.forDur, Eval: eval, Scrape: c.scrape,
			PromFiring: w.promFiring, AMFiring: w.amFiring, PromResolved: w.promResolved, AMResolved: w.amResolved})
	}
	return out
}

// freshenBackup moves the stale Cluster's lastSuccessfulBackup to now, as
// CNPG's operator does after a backup succeeds.
func freshenBackup(ctx context.Context, t *testing.T, st *lab.State) error {
	dyn, err := dynamic.NewForConfig(labRestConfig(t, st))
	if err != nil {
		return err
	}
	ri := dyn.Resource(cnpgClusters).Namespace(staleTenant)
	u, err := ri.Get(ctx, staleCluster, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get Cluster: %w", err)
	}
	now := time.Now().UTC().Format(time.RFC3339)
	status, _ := u.Object["status"].(map[string]any)
	status["lastSuccessfulBackup"] = now
	if _, err := ri.UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("Cluster status: %w", err)
	}
	return nil
}

func logAlertTable(t *testing.T, res []alertResult) {
	t.Helper()
	var b strings.Builder
	b.WriteString("| Evaluator | Alert | Fault (repair) | for | eval / scrape | fault → firing (evaluator / its Alertmanager) | repair → resolved (evaluator / its Alertmanager) |\n|---|---|---|---|---|---|---|\n")
	s := func(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }
	for _, r := range res {
		fmt.Fprintf(&b, "| %s | %s | %s (%s) | %s | %s / %s | %s / %s | %s / %s |\n", r.Evaluator, r.Alert, r.Fault, r.Repair, model.Duration(r.For), model.Duration(r.Eval), model.Duration(r.Scrape),
			s(r.PromFiring), s(r.AMFiring), s(r.PromResolved), s(r.AMResolved))
	}
	t.Logf("measured alert times:\n%s", b.String())
}
