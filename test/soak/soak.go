package soak

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/cozystack/cozy-health/test/lab"
)

// Options configure Run.
type Options struct {
	// Duration is how long faults keep being scheduled; the fault running
	// when it ends is repaired and measured.
	Duration time.Duration
	// Seed makes the schedule: which faults, in which order, on which
	// nodes, held how long.
	Seed int64
	// Short draws only the faults marked Short (the make test variant).
	Short bool
	// Only, when not empty, draws only these faults (by name).
	Only []string
	// RealOVSNode is the lab node running real Open vSwitch daemons (""
	// when none does: the RealOVS faults are not drawn). Run sets it from
	// the lab state.
	RealOVSNode string
	// Dwell is how long a phase is held once its truth is read (default
	// drawn from 5-15 s by the seed).
	Dwell time.Duration
	// NoGate leaves the drain guard unasked (Sample.Gate empty).
	NoGate bool
	// Log receives progress lines.
	Log func(format string, args ...any)
}

// Step is one drawn entry of the schedule.
type Step struct {
	Fault *Fault
	Nodes []string
	Dwell time.Duration
}

// Name is the fault and its targets, as the table prints it.
func (s Step) Name() string {
	if len(s.Nodes) == 0 {
		return s.Fault.Name
	}
	return s.Fault.Name + " " + strings.Join(s.Nodes, ",")
}

// Schedule draws n steps from the catalog with seed: the eligible faults
// in a seeded permutation, again and again (so every fault comes before
// any repeats), each on seeded targets and with a seeded dwell.
func Schedule(seed int64, nodes []string, n int, o Options) []Step {
	r := rand.New(rand.NewSource(seed))
	var eligible []*Fault
	for i := range Catalog {
		f := &Catalog[i]
		if o.Short && !f.Short {
			continue
		}
		if len(o.Only) > 0 && !contains(o.Only, f.Name) {
			continue
		}
		if f.Targets > len(nodes) || (f.Targets >= 2 && len(nodes) < 3) {
			continue
		}
		if f.RealOVS && o.RealOVSNode == "" {
			continue
		}
		eligible = append(eligible, f)
	}
	var out []Step
	for len(out) < n && len(eligible) > 0 {
		for _, i := range r.Perm(len(eligible)) {
			f := eligible[i]
			k := f.Targets
			if k == 0 {
				k = (len(nodes) + 2) / 3
			}
			var targets []string
			if f.RealOVS {
				targets = []string{o.RealOVSNode}
			} else if k > 0 {
				// Quorum faults act on voting members (the first three).
				pool := nodes
				if strings.HasPrefix(f.Name, "etcd") || strings.HasPrefix(f.Name, "ovn") {
					pool = nodes[:min(3, len(nodes))]
				}
				for _, j := range r.Perm(len(pool))[:k] {
					targets = append(targets, pool[j])
				}
				sort.Strings(targets)
			}
			dwell := o.Dwell
			if dwell == 0 {
				dwell = time.Duration(5+r.Intn(11)) * time.Second
			}
			out = append(out, Step{Fault: f, Nodes: targets, Dwell: dwell})
			if len(out) == n {
				break
			}
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Row is one fault's result.
type Row struct {
	Step               string
	Class              string
	Fault, Recovery    *phase
	ApplyErr, RepairEr error
}

// Report is a whole run's result.
type Report struct {
	Seed     int64
	Started  time.Time
	Duration time.Duration
	Warmup   *phase
	Rows     []Row
	Samples  int
	// Gate counts the drain guard's answers to the sampler's dry-run
	// evictions (one per node per sample), by what they read.
	Gate GateCounts
}

// GateCounts are the drain guard's answers in a run.
type GateCounts struct {
	Asked, Allowed, Blocked, Unknown, NoAnswer int
}

// add counts one sample's answers.
func (g *GateCounts) add(answers map[string]string) {
	for _, a := range answers {
		g.Asked++
		switch a {
		case Safe:
			g.Allowed++
		case Blocked:
			g.Blocked++
		case Undecide:
			g.Unknown++
		default:
			g.NoAnswer++
		}
	}
}

// driver samples the lab once a second and scores every sample against
// the current phase.
type driver struct {
	o     Options
	e     *env
	nodes []string
	rep   *Report

	mu  sync.Mutex
	cur *phase // guarded by mu, as the phases' results are

	stop func()
	done chan struct{}
}

// newDriver loads the lab in dir and starts sampling it; close stops.
func newDriver(ctx context.Context, dir string, o *Options) (*driver, error) {
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	st, err := lab.LoadState(dir)
	if err != nil {
		return nil, err
	}
	nodes := make([]string, 0, len(st.Nodes))
	for _, n := range st.Nodes {
		nodes = append(nodes, n.Name)
		if n.RealOVS && o.RealOVSNode == "" {
			o.RealOVSNode = n.Name
		}
	}
	smp, err := newSampler(dir, nodes, !o.NoGate)
	if err != nil {
		return nil, err
	}
	d := &driver{o: *o, e: &env{dir: dir, logf: o.Log}, nodes: nodes, rep: &Report{Seed: o.Seed, Started: time.Now()}, done: make(chan struct{})}
	sctx, stop := context.WithCancel(ctx)
	d.stop = stop
	go func() {
		defer close(d.done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-tick.C:
			}
			s := smp.sample(sctx)
			if sctx.Err() != nil {
				return
			}
			d.mu.Lock()
			// A sample begun before the current phase started read the
			// phase before it: not this phase's (its time to truth would be
			// negative).
			if d.cur != nil && !s.At.Before(d.cur.start) {
				j := d.cur.record(s)
				for _, g := range j.greens {
					d.o.Log("FALSE GREEN: %s", g)
				}
			}
			d.rep.Samples++
			d.rep.Gate.add(s.Gate)
			d.mu.Unlock()
		}
	}()
	return d, nil
}

// close stops sampling and sets the report's duration.
func (d *driver) close() {
	d.stop()
	<-d.done
	d.rep.Duration = time.Since(d.rep.Started)
}

// enter starts a phase of truth (prev before it) with bound, runs action,
// and starts the detection window when action returns; an action's error
// is returned (the phase stays).
func (d *driver) enter(ctx context.Context, truth, prev Truth, bound time.Duration, action func(context.Context, *env) error) (*phase, error) {
	p := newPhase(truth, prev, time.Now(), bound)
	d.mu.Lock()
	d.cur = p
	d.mu.Unlock()
	var err error
	if action != nil {
		err = action(ctx, d.e)
	}
	d.mu.Lock()
	p.windowEnd = time.Now().Add(p.bound)
	d.mu.Unlock()
	return p, err
}

// hold waits until p's truth was read and dwell passed, or its bound
// plus dwell passed.
func (d *driver) hold(ctx context.Context, p *phase, dwell time.Duration) error {
	for {
		d.mu.Lock()
		reached, end := p.reachedAt, p.windowEnd
		d.mu.Unlock()
		now := time.Now()
		if (!reached.IsZero() && now.Sub(reached) >= dwell) || now.After(end.Add(dwell)) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// reached tells whether p's truth was read (and when).
func (d *driver) reached(p *phase) (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return p.reachedAt, !p.reachedAt.IsZero()
}

// warmUp waits for the baseline.
func (d *driver) warmUp(ctx context.Context) error {
	d.o.Log("warm-up: waiting for the baseline (every object Healthy, every node safe to drain)")
	p, _ := d.enter(ctx, Baseline, Baseline, Bounds[ClassRecover]*2, nil)
	d.rep.Warmup = p
	if err := d.hold(ctx, p, 3*time.Second); err != nil {
		return err
	}
	if !p.met() {
		return fmt.Errorf("soak: the lab did not reach its baseline within %s (last read off it: %s)", p.bound, p.lastOff)
	}
	return nil
}

// step applies a fault of class with truth, holds it dwell past its
// truth, repairs it and holds the baseline 5 s; the row is added to the
// report.
func (d *driver) step(ctx context.Context, name, class string, truth Truth, apply, repair func(context.Context, *env) error, dwell time.Duration) (Row, error) {
	row := Row{Step: name, Class: class}
	d.o.Log("fault %s (bound %s, dwell %s)", name, Bounds[class], dwell)
	fp, err := d.enter(ctx, truth, Baseline, Bounds[class], apply)
	row.Fault = fp
	if err != nil {
		row.ApplyErr = err
		d.o.Log("apply %s: %v", name, err)
	}
	if err := d.hold(ctx, fp, dwell); err != nil {
		return row, err
	}
	rp, err := d.enter(ctx, Baseline, truth, Bounds[ClassRecover], repair)
	row.Recovery = rp
	if err != nil {
		row.RepairEr = err
		d.o.Log("repair %s: %v", name, err)
	}
	if err := d.hold(ctx, rp, 5*time.Second); err != nil {
		return row, err
	}
	d.addRow(row)
	return row, nil
}

// addRow adds row to the report and logs its figures.
func (d *driver) addRow(row Row) {
	d.mu.Lock()
	d.rep.Rows = append(d.rep.Rows, row)
	fp, rp := row.Fault, row.Recovery
	d.o.Log("%s: truth after %s, baseline again after %s, false green %.0fs, false red %.0fs",
		row.Step, fmtTTT(fp), fmtTTT(rp), fp.falseGreen+rp.falseGreen, fp.falseRed+rp.falseRed)
	for _, p := range []*phase{fp, rp} {
		if !p.met() {
			d.o.Log("  bound %s missed; last read off the truth: %s", p.bound, p.lastOff)
		} else if t := p.timeToTruth(); t > 15*time.Second {
			// Slow but inside the bound: say what held it, for the
			// table's reader.
			d.o.Log("  truth read after %s; the last reading off it: %s", t.Round(100*time.Millisecond), p.lastOff)
		}
	}
	d.mu.Unlock()
}

// Run starts no lab: it drives the lab in dir (started by lab.Up) under
// the schedule for o.Duration and returns the report.
func Run(ctx context.Context, dir string, o Options) (*Report, error) {
	d, err := newDriver(ctx, dir, &o)
	if err != nil {
		return nil, err
	}
	defer d.close()
	if err := d.warmUp(ctx); err != nil {
		return d.rep, err
	}
	deadline := time.Now().Add(o.Duration)
	for _, step := range Schedule(o.Seed, d.nodes, 10000, d.o) {
		if time.Now().After(deadline) {
			break
		}
		f, targets := step.Fault, step.Nodes
		apply := func(ctx context.Context, e *env) error { return f.Apply(ctx, e, targets) }
		repair := func(ctx context.Context, e *env) error { return f.Repair(ctx, e, targets) }
		if _, err := d.step(ctx, step.Name(), f.Class, f.Truth(d.nodes, targets), apply, repair, step.Dwell); err != nil {
			return d.rep, err
		}
	}
	return d.rep, nil
}

func fmtTTT(p *phase) string {
	t := p.timeToTruth()
	if t < 0 {
		return "never"
	}
	return fmt.Sprintf("%.1fs", t.Seconds())
}

// Failures lists why the run fails: a false-green second, a bound missed,
// or a fault that could not be applied or repaired. Empty: it passed.
func (r *Report) Failures() []string {
	var out []string
	for _, row := range r.Rows {
		for _, p := range []struct {
			what string
			p    *phase
		}{{"fault", row.Fault}, {"recovery", row.Recovery}} {
			if p.p.falseGreen > 0 {
				out = append(out, fmt.Sprintf("%s (%s): %.0fs false green: %s", row.Step, p.what, p.p.falseGreen, detail(p.p.greens)))
			}
			if !p.p.met() {
				out = append(out, fmt.Sprintf("%s (%s): truth not read within %s (%s; last read off the truth: %s)", row.Step, p.what, p.p.bound, fmtTTT(p.p), p.p.lastOff))
			}
		}
		if row.ApplyErr != nil {
			out = append(out, fmt.Sprintf("%s: apply: %v", row.Step, row.ApplyErr))
		}
		if row.RepairEr != nil {
			out = append(out, fmt.Sprintf("%s: repair: %v", row.Step, row.RepairEr))
		}
	}
	return out
}

func detail(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s for %.0fs", k, m[k]))
	}
	return strings.Join(parts, "; ")
}

// Print writes the per-fault table and the totals.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "soak: seed %d, %d faults, %d samples over %s\n\n", r.Seed, len(r.Rows), r.Samples, r.Duration.Round(time.Second))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FAULT\tCLASS\tFALSE-GREEN\tFALSE-RED\tOFF-TRUTH\tTO-TRUTH\tBOUND\tTO-BASELINE\tBOUND\tOK")
	var fg, fr, off float64
	for _, row := range r.Rows {
		f, rc := row.Fault, row.Recovery
		ok := "ok"
		if f.falseGreen+rc.falseGreen > 0 || !f.met() || !rc.met() || row.ApplyErr != nil || row.RepairEr != nil {
			ok = "FAIL"
		}
		fg += f.falseGreen + rc.falseGreen
		fr += f.falseRed + rc.falseRed
		off += f.wrong + rc.wrong
		fmt.Fprintf(tw, "%s\t%s\t%.0fs\t%.0fs\t%.0fs\t%s\t%s\t%s\t%s\t%s\n", row.Step, row.Class,
			f.falseGreen+rc.falseGreen, f.falseRed+rc.falseRed, f.wrong+rc.wrong,
			fmtTTT(f), f.bound, fmtTTT(rc), rc.bound, ok)
	}
	fmt.Fprintf(tw, "TOTAL\t\t%.0fs\t%.0fs\t%.0fs\t\t\t\t\t\n", fg, fr, off)
	_ = tw.Flush()
	var gg, gr float64
	for _, row := range r.Rows {
		gg += row.Fault.gateGreen + row.Recovery.gateGreen
		gr += row.Fault.gateRed + row.Recovery.gateRed
	}
	g := r.Gate
	if g.Asked == 0 {
		fmt.Fprintln(w, "\ndrain guard: not asked in this scenario")
	} else {
		fmt.Fprintf(w, "\ndrain guard (dry-run evictions, kubectl drain --dry-run=server): %d asked, %d let through, %d refused as blocked, %d unknown, %d no answer; false green %.0fs, false red %.0fs (in the totals above)\n",
			g.Asked, g.Allowed, g.Blocked, g.Unknown, g.NoAnswer, gg, gr)
	}
	for _, row := range r.Rows {
		for _, p := range []*phase{row.Fault, row.Recovery} {
			if len(p.reds) > 0 {
				fmt.Fprintf(w, "false red in %s: %s\n", row.Step, detail(p.reds))
			}
		}
	}
	if fails := r.Failures(); len(fails) > 0 {
		fmt.Fprintln(w, "\nFAILED:")
		for _, f := range fails {
			fmt.Fprintln(w, "  "+f)
		}
	} else {
		fmt.Fprintln(w, "\nPASS: no false-green second, every bound met")
	}
}
