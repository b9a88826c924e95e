package linstorapi

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/cozystack/cozy-health/pkg/linstorapi/diskstate"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Node connection statuses and replica flags read here (golinstor's
// apiconsts and the OpenAPI enum of LINSTOR 1.33).
const (
	ConnectionOnline  = "ONLINE"
	ConnectionOffline = "OFFLINE"
)

// DisklessFlags mark a replica that holds no data copy.
var DisklessFlags = []string{"DISKLESS", "DRBD_DISKLESS", "TIE_BREAKER", "NVME_INITIATOR", "EBS_INITIATOR"}

// GoneFlags mark a replica on its way out: it is not counted.
var GoneFlags = []string{"DELETE", "DRBD_DELETE", "INACTIVE"}

// HasAny tells whether flags holds one of want.
func HasAny(flags, want []string) bool {
	for _, f := range flags {
		if slices.Contains(want, f) {
			return true
		}
	}
	return false
}

// Rank and StatusOf are DRBD's disk-state vocabulary (diskstate).
var (
	Rank     = diskstate.Rank
	StatusOf = diskstate.StatusOf
)

// ReplicaState is a replica's worst volume disk state in the controller's
// view: "Diskless" for a diskless replica, "" when the controller holds no
// satellite state for some volume (its satellite is not connected).
func ReplicaState(r ResourceWithVolumes) string {
	diskless := HasAny(r.Flags, DisklessFlags)
	if len(r.Volumes) == 0 {
		if diskless {
			return "Diskless"
		}
		return ""
	}
	worst := "UpToDate"
	for _, v := range r.Volumes {
		s := v.State.DiskState
		if s == "" && diskless {
			s = "Diskless"
		}
		if s == "" {
			return ""
		}
		if Rank(s) > Rank(worst) {
			worst = s
		}
	}
	if worst == "UpToDate" && diskless {
		return "Diskless"
	}
	return worst
}

// JudgeNode turns a LINSTOR node into the linstor-satellite observation:
// the controller's connection to that node's satellite.
func JudgeNode(n Node) report.Observation {
	st := n.ConnectionStatus
	o := report.Observation{Check: report.CheckLinstorSatellite, Component: report.ComponentLinstor, Reason: "Satellite" + camel(st)}
	switch st {
	case ConnectionOnline:
		o.Status = report.StatusHealthy
	case ConnectionOffline:
		o.Status = report.StatusDown
	case "", "UNKNOWN":
		o.Status, o.Reason = report.StatusUnknown, "SatelliteStatusUnknown"
	default:
		o.Status = report.StatusDegraded
	}
	o.Message = fmt.Sprintf("LINSTOR satellite %s (%s) connection status %q", n.Name, n.Type, st)
	for _, f := range n.Flags {
		if f == "EVICTED" || f == "EVACUATE" || f == "DELETE" {
			o.Message += fmt.Sprintf("; node flagged %s", f)
			if o.Status == report.StatusHealthy {
				o.Status, o.Reason = report.StatusDegraded, "Satellite"+camel(f)
			}
		}
	}
	return o
}

// HasSatellite tells whether a LINSTOR node runs a satellite (the
// controller-only and auxiliary kinds do not).
func HasSatellite(n Node) bool {
	t := strings.ToUpper(n.Type)
	return t != "CONTROLLER" && t != "AUXILIARY"
}

// Replica is one node's replica of one resource as the controller sees it.
type Replica struct {
	Resource, Node string
	// State is ReplicaState: "UpToDate", "Diskless", another DRBD disk
	// state, or "" (no state from the satellite).
	State    string
	Diskless bool
}

// Replicas lists the replicas of view that count (GoneFlags dropped),
// sorted by resource, then node.
func Replicas(view []ResourceWithVolumes) []Replica {
	out := make([]Replica, 0, len(view))
	for _, r := range view {
		if r.Name == "" || r.NodeName == "" || HasAny(r.Flags, GoneFlags) {
			continue
		}
		out = append(out, Replica{Resource: r.Name, Node: r.NodeName, State: ReplicaState(r), Diskless: HasAny(r.Flags, DisklessFlags)})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Resource != out[j].Resource {
			return out[i].Resource < out[j].Resource
		}
		return out[i].Node < out[j].Node
	})
	return out
}

// Observations is the controller's view as per-node observations of the
// linstor component, the shape agents report: one linstor-satellite
// observation per node that runs a satellite, and one drbd-resource
// observation per replica on it (pinned to the resource, with the
// cluster-wide replica counts the drain rules read).
func Observations(nodes []Node, replicas []Replica) map[string][]report.Observation {
	out := map[string][]report.Observation{}
	for _, n := range nodes {
		if n.Name == "" || !HasSatellite(n) {
			continue
		}
		out[n.Name] = append(out[n.Name], JudgeNode(n))
	}
	type count struct{ all, upToDate int }
	counts := map[string]*count{}
	for _, r := range replicas {
		c := counts[r.Resource]
		if c == nil {
			c = &count{}
			counts[r.Resource] = c
		}
		c.all++
		if r.State == "UpToDate" {
			c.upToDate++
		}
	}
	for _, r := range replicas {
		c := counts[r.Resource]
		o := report.Observation{
			Check: report.CheckDRBDResource, Component: report.ComponentLinstor,
			ResourceRef: &report.ResourceRef{Kind: report.KindResource, Name: r.Resource},
			Status:      StatusOf(r.State),
			Attributes: map[string]float64{
				report.AttrUpToDate:         b2f(r.State == "UpToDate"),
				report.AttrDiskless:         b2f(r.State == "Diskless"),
				report.AttrReplicas:         float64(c.all),
				report.AttrUpToDateReplicas: float64(c.upToDate),
			},
		}
		shown := r.State
		if shown == "" {
			shown, o.Reason = "unknown (the controller holds no state from the satellite)", "DiskStateUnknown"
		} else {
			o.Reason = "Disk" + r.State
		}
		o.Message = fmt.Sprintf("resource %s on %s: disk %s; %d of %d replica(s) UpToDate, as the LINSTOR controller sees it",
			r.Resource, r.Node, shown, c.upToDate, c.all)
		out[r.Node] = append(out[r.Node], o)
	}
	return out
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// camel turns SCREAMING_SNAKE into CamelCase.
func camel(s string) string {
	var b strings.Builder
	for _, part := range strings.Split(strings.ToLower(s), "_") {
		if part == "" {
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}
