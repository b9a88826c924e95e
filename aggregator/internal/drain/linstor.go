package drain

import (
	"github.com/cozystack/cozy-health/pkg/linstorapi"
	"github.com/cozystack/cozy-health/pkg/report"
)

// ControllerView returns the LINSTOR controller's view as the aggregator
// read it itself (every replica), or why it is not current at now.
type ControllerView func() (replicas []linstorapi.Replica, why string)

// controllerView indexes the controller's view for the LINSTOR rules.
// When the aggregator reads the controller (Config.Linstor), the
// placement and states of replicas come from it, not from the agents'
// reports: it is the aggregator's own read, so no replica claim needs
// another holder to corroborate it (each replica carries the true
// cluster-wide counts), and which resources a node holds is known even
// when its agent is silent (its liveness still comes from its agent and
// its Node).
type controllerView struct {
	// why is non-empty when the view is not current: which resources a
	// node holds is then unknown.
	why    string
	byNode map[string][]drbdFact
	byRes  map[string][]replica
}

func newControllerView(reps []linstorapi.Replica, why string) *controllerView {
	v := &controllerView{why: why, byNode: map[string][]drbdFact{}, byRes: map[string][]replica{}}
	if why != "" {
		return v
	}
	all, up := map[string]int{}, map[string]int{}
	for _, r := range reps {
		all[r.Resource]++
		if r.State == "UpToDate" {
			up[r.Resource]++
		}
	}
	// reps is sorted by resource, then node: byNode comes out sorted by
	// resource, as the rules' lookups expect.
	for _, r := range reps {
		rp := replica{node: r.Node, upToDate: r.State == "UpToDate", diskless: r.Diskless || r.State == "Diskless",
			status: linstorapi.StatusOf(r.State), replicas: all[r.Resource], upToDateReplicas: up[r.Resource]}
		if r.State == "" {
			rp.status = report.StatusUnknown
		}
		v.byRes[r.Resource] = append(v.byRes[r.Resource], rp)
		v.byNode[r.Node] = append(v.byNode[r.Node], drbdFact{resource: r.Resource, rep: rp})
	}
	return v
}
