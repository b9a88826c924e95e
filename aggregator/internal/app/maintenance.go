package app

import (
	"context"
	"time"

	"github.com/cozystack/cozy-health/aggregator/internal/state"
)

// maintenanceTick is how often the maintenance series are recomputed: a
// window that ends, or a node cordoned or uncordoned, shows within it.
const maintenanceTick = time.Second

// maintenanceWindows maps every node in maintenance (cordoned) in nodes to
// whether its maintenance, begun when this replica first saw the cordon,
// is still within window at now.
func maintenanceWindows(nodes map[string]state.Entry, window time.Duration, now time.Time) map[string]bool {
	out := map[string]bool{}
	for name, e := range nodes {
		if e.Kube.InMaintenance() {
			out[name] = now.Sub(e.Kube.MaintenanceSince) < window
		}
	}
	return out
}

// runMaintenance keeps cozy_health_node_maintenance and
// cozy_health_component_maintenance current until ctx ends.
func (a *App) runMaintenance(ctx context.Context) {
	t := a.clock.NewTicker(maintenanceTick)
	defer t.Stop()
	for {
		var in map[string]bool
		var all []string
		a.state.Read(func(nodes map[string]state.Entry) {
			in = maintenanceWindows(nodes, a.cfg.MaintenanceWindow, a.clock.Now())
			all = make([]string, 0, len(nodes))
			for n := range nodes {
				all = append(all, n)
			}
		})
		a.metrics.SetMaintenance(all, in)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// stateObservers hands every state change to each observer in turn (the
// metrics, the drain budget). It is complete before the state is used.
type stateObservers []state.Observer

// Accepted implements state.Observer.
func (o *stateObservers) Accepted(node string, at time.Time) {
	for _, x := range *o {
		x.Accepted(node, at)
	}
}

// Removed implements state.Observer.
func (o *stateObservers) Removed(node string) {
	for _, x := range *o {
		x.Removed(node)
	}
}
