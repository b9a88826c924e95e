package soak

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cozystack/cozy-health/test/lab"
)

// The upgrade scenario (issue 38): a rolling upgrade from the previous
// release and back, as a Deployment and a DaemonSet roll: the lab starts
// on the old release's binaries; every aggregator replica in turn is
// restarted on the new one (the old agents report to new aggregators), then
// every agent (all new), then the replicas roll back (new agents report to
// old aggregators), then the agents. In each mixed state real faults of the
// catalog are injected and scored as in the schedule; every restart is a
// step of its own whose truth is the baseline. A false green or a false
// red anywhere fails it. docs/soak.md describes it.

// UpgradeOptions configure RunUpgrade.
type UpgradeOptions struct {
	Options
	// Old and New are directories holding cozy-health-agent and
	// cozy-health-aggregator of the previous release and of this one.
	Old, New string
	// Faults are the catalog's faults run in every mixed state (default
	// UpgradeFaults), each on its first Targets nodes.
	Faults []string
}

// UpgradeFaults are the faults each mixed state runs by default: a
// quorum's member lost (etcd), a replica's disk detached (DRBD: the last
// copy on its partner), and a silent agent.
var UpgradeFaults = []string{"etcd-stop", "drbd-detached", "agent-stop"}

// RunUpgrade drives the lab in dir, started on o.Old's binaries, through
// the rolling upgrade and rollback, and returns the report.
func RunUpgrade(ctx context.Context, dir string, o UpgradeOptions) (*Report, error) {
	if o.Old == "" || o.New == "" {
		return nil, fmt.Errorf("soak: upgrade needs the old and the new release's binaries")
	}
	if len(o.Faults) == 0 {
		o.Faults = UpgradeFaults
	}
	var faults []*Fault
	for _, name := range o.Faults {
		f := faultNamed(name)
		if f == nil {
			return nil, fmt.Errorf("soak: upgrade: no fault %q in the catalog", name)
		}
		faults = append(faults, f)
	}
	// The previous release's guard judges only cordoned nodes, so the
	// sampler's dry-run evictions would read its "not cordoned" as let
	// through: the gate is not asked in this scenario (drain-check is).
	o.NoGate = true
	d, err := newDriver(ctx, dir, &o.Options)
	if err != nil {
		return nil, err
	}
	defer d.close()
	st, err := lab.LoadState(dir)
	if err != nil {
		return d.rep, err
	}
	var replicas []string
	for _, a := range st.Aggregators {
		replicas = append(replicas, a.Name)
	}
	if err := d.warmUp(ctx); err != nil {
		return d.rep, err
	}
	dwell := o.Dwell
	if dwell == 0 {
		dwell = 5 * time.Second
	}
	roll := func(targets []string, bin, to string) error {
		for _, t := range targets {
			apply := func(ctx context.Context, e *env) error {
				msg, err := lab.Upgrade(ctx, e.dir, t, bin)
				if err == nil {
					e.logf("%s", msg)
				}
				return err
			}
			if _, err := d.step(ctx, t+" -> "+to, ClassUpgrade, Baseline, apply, nil, dwell); err != nil {
				return err
			}
		}
		return nil
	}
	inject := func(state string) error {
		for _, f := range faults {
			targets := d.nodes[:min(max(f.Targets, 1), len(d.nodes))]
			apply := func(ctx context.Context, e *env) error { return f.Apply(ctx, e, targets) }
			repair := func(ctx context.Context, e *env) error { return f.Repair(ctx, e, targets) }
			name := fmt.Sprintf("%s %s (%s)", f.Name, strings.Join(targets, ","), state)
			if _, err := d.step(ctx, name, f.Class, f.Truth(d.nodes, targets), apply, repair, dwell); err != nil {
				return err
			}
		}
		return nil
	}
	for _, s := range []func() error{
		func() error { return roll(replicas, o.New, "new") },
		func() error { return inject("old agents, new aggregators") },
		func() error { return roll(d.nodes, o.New, "new") },
		func() error { return inject("all new") },
		func() error { return roll(replicas, o.Old, "old") },
		func() error { return inject("new agents, old aggregators") },
		func() error { return roll(d.nodes, o.Old, "old") },
	} {
		if err := s(); err != nil {
			return d.rep, err
		}
	}
	return d.rep, nil
}

// faultNamed returns the catalog's fault called name, or nil.
func faultNamed(name string) *Fault {
	for i := range Catalog {
		if Catalog[i].Name == name {
			return &Catalog[i]
		}
	}
	return nil
}
