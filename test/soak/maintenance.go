package soak

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/cozystack/cozy-health/test/monitoring"
)

// The rolling-maintenance scenario (issue 36): every node in turn taken
// down as a Talos reboot takes it (cordoned with Talos' annotation, its
// agent and kubelet stopped, its etcd member stopped, its uplink relay
// cut), held past the scaled `for` of every alert that maintenance holds,
// and restored; the real evaluators (Prometheus and vmalert, each with its
// Alertmanager) must fire nothing, and the sampler must read no false
// green. Then a real fault on another node during a maintenance must page
// within its bound, and a maintenance that outlasts its window must page
// CozyHealthNodeMaintenanceOverdue. docs/soak.md describes it.

// HeldAlerts are the alerts a node's planned maintenance holds within its
// window (deploy/charts/cozy-health/files/alerts.yaml: `unless ...
// maintenance == 1`); the dwell outlasts the longest of their `for`.
var HeldAlerts = []string{
	"CozyHealthNodeHeartbeatMissed", "CozyHealthAgentSilent", "CozyHealthNodeUnreachable",
	"CozyHealthEtcdFsyncSlow", "CozyHealthDRBDReplicaNotUpToDate",
	"CozyHealthComponentDegraded", "CozyHealthComponentUnknown",
}

// MaintenanceOptions configure RunRollingMaintenance.
type MaintenanceOptions struct {
	// Stack is the evaluators on the lab (monitoring.StartStack).
	Stack *monitoring.Stack
	// Scrape and VMDelay are the stack's scrape interval and
	// victoria-metrics' delays, for the page bounds.
	Scrape, VMDelay time.Duration
	// Window is the aggregators' --maintenance-window.
	Window time.Duration
	// Dwell is how long a node stays in maintenance once its truth is
	// read (default: the longest scaled `for` of HeldAlerts plus 10 s).
	Dwell time.Duration
	// Log receives progress lines.
	Log func(format string, args ...any)
}

// Page is one alert seen firing in an evaluator or present in its
// Alertmanager.
type Page struct {
	Evaluator string
	// Where: "evaluator" (firing in /api/v1/alerts) or "alertmanager".
	Where  string
	Alert  string
	Labels string
	// Phase is the scenario's phase when it was first seen; At when.
	Phase string
	At    time.Time
}

// PageTiming is an expected page: when its cause began and when each
// evaluator fired it and its Alertmanager received it.
type PageTiming struct {
	What   string
	Alert  string
	Labels map[string]string
	From   time.Time
	Bound  time.Duration
	// Firing and InAM: evaluator -> time from From (-1: not within Bound).
	Firing, InAM map[string]time.Duration
}

func (p PageTiming) met() bool {
	for _, m := range []map[string]time.Duration{p.Firing, p.InAM} {
		if len(m) == 0 {
			return false
		}
		for _, d := range m {
			if d < 0 || d > p.Bound {
				return false
			}
		}
	}
	return true
}

// NamedPhase is a scored phase outside the rows.
type NamedPhase struct {
	Name string
	p    *phase
}

// MaintenanceReport is the scenario's result.
type MaintenanceReport struct {
	*Report
	Window, Dwell time.Duration
	// Longest is the longest cordon-to-uncordon of the rolling phase.
	Longest time.Duration
	// Preexisting are alerts firing before the scenario (not counted).
	Preexisting []string
	// Pages is every alert seen firing or received, by phase.
	Pages []Page
	// Phases are the scored phases of the second part.
	Phases []NamedPhase
	// OtherFault and Overrun are the expected pages.
	OtherFault, Overrun PageTiming
	// RollingEnd is when the rolling phase's tail ended.
	RollingEnd time.Time
}

const phaseRolling = "rolling maintenance"

// maintain is the maintenance of node as a Talos reboot does it, and its
// end.
func maintain(node string) (apply, repair func(context.Context, *env) error) {
	do := func(steps [][2]string) func(context.Context, *env) error {
		return func(ctx context.Context, e *env) error {
			for _, s := range steps {
				if err := e.lab(ctx, node, s[0], s[1]); err != nil {
					return err
				}
			}
			return nil
		}
	}
	return do([][2]string{{"cordon", "talos"}, {"node-down", ""}, {"etcd-stop", ""}, {"partition", ""}}),
		do([][2]string{{"partition-heal", ""}, {"etcd-start", ""}, {"node-up", ""}, {"uncordon", ""}})
}

// maintenanceTruth: the maintained nodes' entries Unknown with reason
// PlannedMaintenance, the others' of silent (node -> reason) with theirs;
// components and drains as for silent nodes (silentEntries: etcd with one
// member unknown Degraded or Unknown, the stopped member's node unknown to
// drain, the others unknown or blocked, never safe).
func maintenanceTruth(all, maintained []string, silent map[string]string) Truth {
	nodes := append([]string(nil), maintained...)
	for n := range silent {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	t := silentBecause(func(n string) string {
		if r, ok := silent[n]; ok {
			return r
		}
		return ReasonPlannedMaintenance
	})(all, nodes)
	// A silent voter beside a maintained one whose etcd member is
	// stopped (the other members show it down): draining the silent one
	// leaves one healthy voter of three, blocked.
	if len(maintained) > 0 {
		for n := range silent {
			t.Drain[n] = Set{Undecide, Blocked}
		}
	}
	return t
}

// pageWatch polls the evaluators and their Alertmanagers.
type pageWatch struct {
	stack *monitoring.Stack
	mu    sync.Mutex
	phase string
	skip  map[string]bool
	seen  map[string]Page
	pages []Page
}

func alertKey(ev, where string, ls map[string]string) (string, string) {
	keys := make([]string, 0, len(ls))
	for k := range ls {
		if k != "alertname" && k != "severity" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+ls[k])
	}
	labels := strings.Join(parts, ",")
	return ev + "/" + where + "/" + ls["alertname"] + "{" + labels + "}", labels
}

// poll reads every evaluator once and records what is new.
func (w *pageWatch) poll(ctx context.Context) {
	now := time.Now()
	for _, ev := range w.stack.Evaluators {
		var firing []map[string]string
		if as, err := monitoring.PromAlerts(ctx, ev.Alerts); err == nil {
			for _, a := range as {
				if a.State == "firing" {
					firing = append(firing, a.Labels)
				}
			}
		}
		am, _ := monitoring.AMAlerts(ctx, ev.AM)
		w.mu.Lock()
		for _, src := range []struct {
			where string
			ls    []map[string]string
		}{{"evaluator", firing}, {"alertmanager", am}} {
			for _, ls := range src.ls {
				k, labels := alertKey(ev.Name, src.where, ls)
				if w.skip[k] {
					continue
				}
				if _, ok := w.seen[k]; ok {
					continue
				}
				p := Page{Evaluator: ev.Name, Where: src.where, Alert: ls["alertname"], Labels: labels, Phase: w.phase, At: now}
				w.seen[k] = p
				w.pages = append(w.pages, p)
			}
		}
		w.mu.Unlock()
	}
}

func (w *pageWatch) setPhase(p string) {
	w.mu.Lock()
	w.phase = p
	w.mu.Unlock()
}

// first is when alert with labels was first seen per evaluator in where,
// at or after from.
func (w *pageWatch) first(alert string, labels map[string]string, where string, from time.Time) map[string]time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]time.Duration{}
	for _, p := range w.pages {
		if p.Alert != alert || p.Where != where || p.At.Before(from) {
			continue
		}
		ok := true
		for k, v := range labels {
			ok = ok && strings.Contains(","+p.Labels+",", ","+k+"="+v+",")
		}
		if _, dup := out[p.Evaluator]; ok && !dup {
			out[p.Evaluator] = p.At.Sub(from)
		}
	}
	return out
}

// waitPage waits until alert fired in every evaluator and reached its
// Alertmanager, or bound passed.
func (w *pageWatch) waitPage(ctx context.Context, pt *PageTiming) error {
	deadline := pt.From.Add(pt.Bound + 5*time.Second)
	for {
		pt.Firing = w.first(pt.Alert, pt.Labels, "evaluator", pt.From)
		pt.InAM = w.first(pt.Alert, pt.Labels, "alertmanager", pt.From)
		if len(pt.Firing) == len(w.stack.Evaluators) && len(pt.InAM) == len(w.stack.Evaluators) {
			return nil
		}
		if time.Now().After(deadline) {
			for _, ev := range w.stack.Evaluators {
				for _, m := range []map[string]time.Duration{pt.Firing, pt.InAM} {
					if _, ok := m[ev.Name]; !ok {
						m[ev.Name] = -1
					}
				}
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// RunRollingMaintenance drives the lab in dir (started with
// lab.Options.MaintenanceWindow = o.Window, and o.Stack on it) through the
// scenario and returns its report.
func RunRollingMaintenance(ctx context.Context, dir string, o MaintenanceOptions) (*MaintenanceReport, error) {
	so := Options{Log: o.Log}
	d, err := newDriver(ctx, dir, &so)
	if err != nil {
		return nil, err
	}
	defer d.close()
	log := d.o.Log
	st := o.Stack
	if o.Dwell == 0 {
		for _, a := range HeldAlerts {
			o.Dwell = max(o.Dwell, st.For[a])
		}
		o.Dwell += 10 * time.Second
	}
	rep := &MaintenanceReport{Report: d.rep, Window: o.Window, Dwell: o.Dwell}
	if err := d.warmUp(ctx); err != nil {
		return rep, err
	}

	// Every evaluator scrapes every replica; what fires then is not the
	// scenario's.
	w := &pageWatch{stack: st, skip: map[string]bool{}, seen: map[string]Page{}, phase: "before"}
	for _, ev := range st.Evaluators {
		for !ev.Ready(ctx, 3) {
			select {
			case <-ctx.Done():
				return rep, ctx.Err()
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	time.Sleep(2*st.Eval + 2*o.Scrape + o.VMDelay)
	w.poll(ctx)
	for k, p := range w.seen {
		w.skip[k] = true
		rep.Preexisting = append(rep.Preexisting, fmt.Sprintf("%s %s %s{%s}", p.Evaluator, p.Where, p.Alert, p.Labels))
	}
	sort.Strings(rep.Preexisting)
	w.seen, w.pages = map[string]Page{}, nil
	if len(rep.Preexisting) > 0 {
		log("firing before the scenario (not counted): %s", strings.Join(rep.Preexisting, "; "))
	}
	wctx, wstop := context.WithCancel(ctx)
	wdone := make(chan struct{})
	go func() {
		defer close(wdone)
		for wctx.Err() == nil {
			w.poll(wctx)
			select {
			case <-wctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	defer func() { wstop(); <-wdone; rep.Pages = w.pages }()
	pageBound := func(forDur, detect time.Duration) time.Duration {
		// Detection, the `for`, then up to two evaluations and scrapes,
		// victoria-metrics' delays and the Alertmanager's group_wait (0).
		return detect + forDur + 2*st.Eval + 2*o.Scrape + 2*o.VMDelay + 2*time.Second
	}

	// 1. Every node in turn.
	w.setPhase(phaseRolling)
	for _, n := range d.nodes {
		apply, repair := maintain(n)
		var cordoned, uncordoned time.Time
		a := func(ctx context.Context, e *env) error { cordoned = time.Now(); return apply(ctx, e) }
		r := func(ctx context.Context, e *env) error { err := repair(ctx, e); uncordoned = time.Now(); return err }
		if _, err := d.step(ctx, "maintenance "+n, ClassMaintenance, maintenanceTruth(d.nodes, []string{n}, nil), a, r, o.Dwell); err != nil {
			return rep, err
		}
		took := uncordoned.Sub(cordoned)
		rep.Longest = max(rep.Longest, took)
		log("maintenance %s: cordoned to uncordoned %s (window %s)", n, took.Round(100*time.Millisecond), o.Window)
	}
	// The longest held `for` again: an alert pending at the last repair
	// would fire within it.
	var tail time.Duration
	for _, a := range HeldAlerts {
		tail = max(tail, st.For[a])
	}
	tail += 2*st.Eval + 2*o.Scrape + 2*o.VMDelay
	log("rolling maintenance done; watching %s more for a page", tail)
	time.Sleep(tail)
	rep.RollingEnd = time.Now()

	// 2. A real fault on another node during a maintenance, then the
	// maintenance outlasting its window.
	x, y := d.nodes[0], d.nodes[1]
	apply, repair := maintain(x)
	w.setPhase("maintenance " + x)
	var cordoned time.Time
	mt := maintenanceTruth(d.nodes, []string{x}, nil)
	mp, err := d.enter(ctx, mt, Baseline, Bounds[ClassMaintenance], func(ctx context.Context, e *env) error {
		cordoned = time.Now()
		return apply(ctx, e)
	})
	rep.Phases = append(rep.Phases, NamedPhase{"maintenance " + x, mp})
	if err != nil {
		return rep, fmt.Errorf("maintenance %s: %w", x, err)
	}
	if err := d.hold(ctx, mp, 2*time.Second); err != nil {
		return rep, err
	}
	faultName := "agent-stop " + y + " during maintenance of " + x
	w.setPhase(faultName)
	log("%s", faultName)
	ct := maintenanceTruth(d.nodes, []string{x}, map[string]string{y: ReasonAgentSilent})
	rep.OtherFault = PageTiming{What: faultName, Alert: "CozyHealthAgentSilent", Labels: map[string]string{"node": y},
		From: time.Now(), Bound: pageBound(st.For["CozyHealthAgentSilent"], Bounds[ClassSilent])}
	fp, err := d.enter(ctx, ct, mt, Bounds[ClassSilent], func(ctx context.Context, e *env) error { return e.lab(ctx, y, "agent-stop", "") })
	rep.Phases = append(rep.Phases, NamedPhase{faultName, fp})
	if err != nil {
		return rep, err
	}
	if err := w.waitPage(ctx, &rep.OtherFault); err != nil {
		return rep, err
	}
	log("%s: %s fired after %v, in the Alertmanagers after %v (bound %s)", faultName, rep.OtherFault.Alert, rep.OtherFault.Firing, rep.OtherFault.InAM, rep.OtherFault.Bound)
	w.setPhase("maintenance " + x + " after agent-start " + y)
	bp, err := d.enter(ctx, mt, ct, Bounds[ClassRecover], func(ctx context.Context, e *env) error { return e.lab(ctx, y, "agent-start", "") })
	rep.Phases = append(rep.Phases, NamedPhase{"agent-start " + y + " (" + x + " still maintained)", bp})
	if err != nil {
		return rep, err
	}
	if err := d.hold(ctx, bp, 2*time.Second); err != nil {
		return rep, err
	}
	windowEnd := cordoned.Add(o.Window)
	if time.Now().After(windowEnd) {
		log("the maintenance of %s outlasted its window before the overrun was measured", x)
	}
	w.setPhase("overrun " + x)
	rep.Overrun = PageTiming{What: "maintenance of " + x + " past its window", Alert: "CozyHealthNodeMaintenanceOverdue", Labels: map[string]string{"node": x},
		From: windowEnd, Bound: pageBound(st.For["CozyHealthNodeMaintenanceOverdue"], 2*time.Second)}
	if err := w.waitPage(ctx, &rep.Overrun); err != nil {
		return rep, err
	}
	log("overrun %s: %s fired %v after the window ended (%s after the cordon), in the Alertmanagers after %v (bound %s)",
		x, rep.Overrun.Alert, rep.Overrun.Firing, o.Window, rep.Overrun.InAM, rep.Overrun.Bound)
	w.setPhase("restored " + x)
	rp, err := d.enter(ctx, Baseline, mt, Bounds[ClassRecover], repair)
	rep.Phases = append(rep.Phases, NamedPhase{"maintenance " + x + " ended (past its window)", rp})
	if err != nil {
		return rep, err
	}
	if err := d.hold(ctx, rp, 5*time.Second); err != nil {
		return rep, err
	}
	return rep, nil
}

// RollingPages are the pages fired during the rolling maintenance.
func (r *MaintenanceReport) RollingPages() []Page {
	var out []Page
	for _, p := range r.Pages {
		if p.Phase == phaseRolling {
			out = append(out, p)
		}
	}
	return out
}

// Failures lists why the scenario fails; empty: it passed.
func (r *MaintenanceReport) Failures() []string {
	out := r.Report.Failures()
	for _, p := range r.RollingPages() {
		out = append(out, fmt.Sprintf("page during the rolling maintenance: %s %s %s{%s} at %s", p.Evaluator, p.Where, p.Alert, p.Labels, p.At.UTC().Format("15:04:05")))
	}
	for _, np := range r.Phases {
		if np.p.falseGreen > 0 {
			out = append(out, fmt.Sprintf("%s: %.0fs false green: %s", np.Name, np.p.falseGreen, detail(np.p.greens)))
		}
		if !np.p.met() {
			out = append(out, fmt.Sprintf("%s: truth not read within %s (%s; last read off the truth: %s)", np.Name, np.p.bound, fmtTTT(np.p), np.p.lastOff))
		}
	}
	for _, pt := range []PageTiming{r.OtherFault, r.Overrun} {
		if pt.Alert != "" && !pt.met() {
			out = append(out, fmt.Sprintf("%s: %s not fired within %s in every evaluator and Alertmanager (fired %v, received %v)", pt.What, pt.Alert, pt.Bound, pt.Firing, pt.InAM))
		}
	}
	// The maintained node's own alerts stay held within its window while
	// another node's fault pages.
	for _, p := range r.Pages {
		if strings.HasPrefix(p.Phase, "agent-stop ") && r.OtherFault.Labels["node"] != "" &&
			!strings.Contains(","+p.Labels+",", ",node="+r.OtherFault.Labels["node"]+",") && strings.Contains(p.Labels, "node=") {
			out = append(out, fmt.Sprintf("page for the maintained node while another node's fault was on: %s %s %s{%s}", p.Evaluator, p.Where, p.Alert, p.Labels))
		}
	}
	return out
}

// Print writes the rows, the phases, the pages and the verdict.
func (r *MaintenanceReport) Print(w io.Writer) {
	fmt.Fprintf(w, "rolling maintenance: %d samples over %s; window %s, dwell %s, longest cordon-to-uncordon %s\n\n",
		r.Samples, r.Duration.Round(time.Second), r.Window, r.Dwell, r.Longest.Round(100*time.Millisecond))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PHASE\tFALSE-GREEN\tFALSE-RED\tOFF-TRUTH\tTO-TRUTH\tBOUND\tTO-BASELINE\tBOUND")
	for _, row := range r.Rows {
		f, rc := row.Fault, row.Recovery
		fmt.Fprintf(tw, "%s\t%.0fs\t%.0fs\t%.0fs\t%s\t%s\t%s\t%s\n", row.Step, f.falseGreen+rc.falseGreen, f.falseRed+rc.falseRed, f.wrong+rc.wrong,
			fmtTTT(f), f.bound, fmtTTT(rc), rc.bound)
	}
	for _, np := range r.Phases {
		p := np.p
		fmt.Fprintf(tw, "%s\t%.0fs\t%.0fs\t%.0fs\t%s\t%s\t\t\n", np.Name, p.falseGreen, p.falseRed, p.wrong, fmtTTT(p), p.bound)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\npages during the rolling maintenance: %d\n", len(r.RollingPages()))
	for _, pt := range []PageTiming{r.OtherFault, r.Overrun} {
		if pt.Alert == "" {
			continue
		}
		fmt.Fprintf(w, "%s: %s{%s} fired after", pt.What, pt.Alert, labelString(pt.Labels))
		for _, ev := range sortedDur(pt.Firing) {
			fmt.Fprintf(w, " %s %.1fs (its Alertmanager %.1fs)", ev, pt.Firing[ev].Seconds(), pt.InAM[ev].Seconds())
		}
		fmt.Fprintf(w, "; bound %s\n", pt.Bound)
	}
	fmt.Fprintln(w, "\nevery page seen (evaluator, where, alert, phase, time):")
	for _, p := range r.Pages {
		fmt.Fprintf(w, "  %s %s %s{%s} in %q at %s\n", p.Evaluator, p.Where, p.Alert, p.Labels, p.Phase, p.At.UTC().Format("15:04:05"))
	}
	if len(r.Preexisting) > 0 {
		fmt.Fprintf(w, "firing before the scenario (not counted): %s\n", strings.Join(r.Preexisting, "; "))
	}
	if fails := r.Failures(); len(fails) > 0 {
		fmt.Fprintln(w, "\nFAILED:")
		for _, f := range fails {
			fmt.Fprintln(w, "  "+f)
		}
	} else {
		fmt.Fprintln(w, "\nPASS: no page during the rolling maintenance, no false-green second, the other node's fault and the overrun paged within their bounds")
	}
}

func labelString(m map[string]string) string {
	parts := make([]string, 0, len(m))
	for k, v := range m {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func sortedDur(m map[string]time.Duration) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
