package linstorapi

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	lapi "github.com/LINBIT/golinstor/client"
	"github.com/LINBIT/golinstor/devicelayerkind"

	"github.com/cozystack/cozy-health/pkg/linstorapi/diskstate"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Node connection statuses (the connection_status enum of Node in
// linstor-server v1.33.3 docs/rest_v1_openapi.yaml, and golinstor
// v0.63.0's connectionstatus package, which adds MISSING_EXT_TOOLS and
// DUPLICATE_UNAME: ApiConsts.ConnectionStatus, set by
// IntFullSyncResponse.java and CtrlAuthResponseApiCallHandler.java).
const (
	ConnectionOffline             = "OFFLINE"
	ConnectionConnected           = "CONNECTED"
	ConnectionOnline              = "ONLINE"
	ConnectionVersionMismatch     = "VERSION_MISMATCH"
	ConnectionFullSyncFailed      = "FULL_SYNC_FAILED"
	ConnectionAuthenticationError = "AUTHENTICATION_ERROR"
	ConnectionUnknown             = "UNKNOWN"
	ConnectionHostnameMismatch    = "HOSTNAME_MISMATCH"
	ConnectionOtherController     = "OTHER_CONTROLLER"
	ConnectionAuthenticated       = "AUTHENTICATED"
	ConnectionNoStltConn          = "NO_STLT_CONN"
	ConnectionMissingExtTools     = "MISSING_EXT_TOOLS"
	ConnectionDuplicateUname      = "DUPLICATE_UNAME"
)

// ConnectionStatuses is every satellite connection status LINSTOR 1.33
// sends, in golinstor's ordinal order.
var ConnectionStatuses = []string{
	ConnectionOffline, ConnectionConnected, ConnectionOnline, ConnectionVersionMismatch, ConnectionFullSyncFailed,
	ConnectionAuthenticationError, ConnectionUnknown, ConnectionHostnameMismatch, ConnectionOtherController,
	ConnectionAuthenticated, ConnectionNoStltConn, ConnectionMissingExtTools, ConnectionDuplicateUname,
}

// SatelliteConnectingBound is how long a satellite may stay CONNECTED or
// AUTHENTICATED (what every satellite passes through after a controller
// restart or a reconnect, before its full sync makes it ONLINE) and read
// Unknown; past it, it reads Degraded: stuck connecting.
const SatelliteConnectingBound = 2 * time.Minute

// DRBD connection states a replica reports toward a peer
// (layer_object.drbd.connections[peer].message: the DrbdConnection enum
// of linstor-server v1.33.3 docs/rest_v1_openapi.yaml; "connected" is
// message == "Connected", Json.apiToResourceWithVolumes).
const (
	DRBDConnected  = "Connected"
	DRBDStandAlone = "StandAlone"
	DRBDUnknown    = "Unknown"
)

// DRBDConnectionStates is every DrbdConnection message of the OpenAPI enum.
var DRBDConnectionStates = []string{"StandAlone", "Disconnecting", "Unconnected", "Timeout", "BrokenPipe",
	"NetworkFailure", "ProtocolError", "Connecting", "TearDown", "Connected", "Unknown"}

// DRBD disk states (DiskState.java of linstor-server v1.33.3, the same
// labels as DRBD's own).
var DiskStates = []string{"Diskless", "Attaching", "Detaching", "Failed", "Negotiating", "Inconsistent",
	"Outdated", "DUnknown", "Consistent", "UpToDate"}

// Replication states (ReplState.java of linstor-server v1.33.3).
const ReplicationOff = "Off"

// PropSkipDisk is the resource property the controller sets when a
// diskful replica's disk goes Failed -> Diskless (DRBD's on-io-error
// detach; StateSequenceDetector.java of linstor-server v1.33.3):
// DrbdOptions/SkipDisk = True.
const PropSkipDisk = "DrbdOptions/SkipDisk"

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
// view: "Diskless" for a diskless replica, and for a diskful one whose
// disk detached (a volume Diskless without a diskless flag: worse than
// any other state of a diskful replica); "" when the controller holds no
// satellite state for some volume (its satellite is not connected),
// diskless replicas included: whether they are connected is not known.
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
		if s == "" {
			return ""
		}
		if s == "Diskless" && !diskless {
			return "Diskless" // detached
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

// HasDRBD tells whether a resource's layer stack has a DRBD layer; false
// with known=true for a storage-only resource (its data lives only on its
// node), known=false when the view carries no layer object.
func HasDRBD(r ResourceWithVolumes) (drbd, known bool) {
	if r.LayerObject == nil || r.LayerObject.Type == "" {
		return false, false
	}
	var walk func(l *lapi.ResourceLayer) bool
	walk = func(l *lapi.ResourceLayer) bool {
		if l.Type == devicelayerkind.Drbd {
			return true
		}
		for i := range l.Children {
			if walk(&l.Children[i]) {
				return true
			}
		}
		return false
	}
	return walk(r.LayerObject), true
}

// SatelliteClass is how a satellite's connection status counts.
type SatelliteClass int

const (
	// SatelliteServing: ONLINE.
	SatelliteServing SatelliteClass = iota
	// SatelliteConnecting: CONNECTED or AUTHENTICATED, on the way to
	// ONLINE (Unknown for SatelliteConnectingBound).
	SatelliteConnecting
	// SatelliteOffline: OFFLINE, the controller cannot reach it.
	SatelliteOffline
	// SatelliteRefused: connected, but the controller cannot manage it
	// (version, hostname, authentication, full sync, external tools,
	// duplicate uname, another controller, no satellite connection).
	SatelliteRefused
	// SatelliteStatusUnknown: UNKNOWN, empty, or a value LINSTOR 1.33
	// does not send.
	SatelliteStatusUnknown
)

// ClassOf classifies a satellite connection status.
func ClassOf(status string) SatelliteClass {
	switch status {
	case ConnectionOnline:
		return SatelliteServing
	case ConnectionConnected, ConnectionAuthenticated:
		return SatelliteConnecting
	case ConnectionOffline:
		return SatelliteOffline
	case ConnectionVersionMismatch, ConnectionFullSyncFailed, ConnectionAuthenticationError, ConnectionHostnameMismatch,
		ConnectionOtherController, ConnectionNoStltConn, ConnectionMissingExtTools, ConnectionDuplicateUname:
		return SatelliteRefused
	}
	return SatelliteStatusUnknown
}

// JudgeNode turns a LINSTOR node into the linstor-satellite observation:
// the controller's connection to that node's satellite. connecting is how
// long the satellite has been CONNECTED or AUTHENTICATED (as the caller
// has seen it across reads; 0 for the first read).
func JudgeNode(n Node, connecting time.Duration) report.Observation {
	st := n.ConnectionStatus
	o := report.Observation{Check: report.CheckLinstorSatellite, Component: report.ComponentLinstor, Reason: "Satellite" + camel(st)}
	o.Message = fmt.Sprintf("LINSTOR satellite %s (%s) connection status %q", n.Name, n.Type, st)
	switch ClassOf(st) {
	case SatelliteServing:
		o.Status = report.StatusHealthy
	case SatelliteOffline:
		o.Status = report.StatusDown
	case SatelliteConnecting:
		o.Status = report.StatusUnknown
		o.Message += fmt.Sprintf(" for %s: connecting to the controller (full sync pending)", connecting.Round(time.Second))
		if connecting > SatelliteConnectingBound {
			o.Status = report.StatusDegraded
			o.Message += fmt.Sprintf(", longer than %s: stuck", SatelliteConnectingBound)
		}
	case SatelliteRefused:
		o.Status = report.StatusDegraded
		o.Message += ": the controller cannot manage it (its DRBD devices run on, unmanaged)"
	default:
		o.Status, o.Reason = report.StatusUnknown, "SatelliteStatusUnknown"
	}
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
	State string
	// Diskless: flagged diskless (DisklessFlags: a DRBD client or a
	// tie-breaker): it never holds a data copy.
	Diskless bool
	// Detached: diskful by its flags, but a volume's disk state is
	// Diskless (DRBD's on-io-error detach after a disk failure): it holds
	// no data copy until re-attached.
	Detached bool
	// StorageOnly: the layer stack has no DRBD layer: the data lives only
	// on this node, in Pool.
	StorageOnly bool
	Pool        string
	// SizeKiB is what the replica's volumes take in their storage pool,
	// summed (VolumeSizeKiB); 0 when some volume's size is not in the view.
	SizeKiB int64
	// Satellite is the connection status of the node's satellite ("" when
	// /v1/nodes does not list the node).
	Satellite string
	// Peers is the DRBD connection state toward each peer node as this
	// replica's satellite reports it (layer_object.drbd.connections); nil
	// when the controller holds none (satellite not connected).
	Peers map[string]string
	// ReplicationOff lists the peers toward which some volume's
	// replication state is Off (volumes' state.replication_states).
	ReplicationOff []string
}

// Copy tells whether the replica holds a data copy by its kind (diskful,
// attached, with a DRBD layer), whatever its disk state.
func (r Replica) Copy() bool { return !r.Diskless && !r.Detached && !r.StorageOnly }

// Connection is what two replicas of one resource say of the DRBD
// connection between them.
type Connection int

const (
	// ConnectionNotKnown: neither side says, or they contradict each other.
	ConnectionNotKnown Connection = iota
	// ConnectionUp: a side says Connected, and no side says otherwise.
	ConnectionUp
	// ConnectionDown: a side says it is not connected, and no side says
	// Connected.
	ConnectionDown
)

// side is one replica's word on its connection to peer.
func (r Replica) side(peer string) Connection {
	msg, ok := r.Peers[peer]
	switch {
	case !ok || msg == "" || msg == DRBDUnknown:
		return ConnectionNotKnown
	case msg == DRBDConnected:
		if slices.Contains(r.ReplicationOff, peer) {
			return ConnectionNotKnown // connected, yet a volume does not replicate: the view is mid-change
		}
		return ConnectionUp
	}
	return ConnectionDown
}

// Connected is the DRBD connection between a and b as both report it.
func Connected(a, b Replica) Connection {
	x, y := a.side(b.Node), b.side(a.Node)
	switch {
	case x == ConnectionNotKnown:
		return y
	case y == ConnectionNotKnown, x == y:
		return x
	}
	return ConnectionNotKnown
}

// SplitBrain tells whether a and b are both attached UpToDate copies of
// which one is StandAlone toward the other, and the connection is not
// known up: DRBD disconnects and stays StandAlone after it detects a split
// brain (after-sb policies "disconnect"), until an operator resolves it;
// each side may hold writes the other lacks. A side that still says
// Connected contradicts, and does not clear it.
func SplitBrain(a, b Replica) bool {
	if !a.Copy() || !b.Copy() || a.State != "UpToDate" || b.State != "UpToDate" || Connected(a, b) == ConnectionUp {
		return false
	}
	return a.Peers[b.Node] == DRBDStandAlone || b.Peers[a.Node] == DRBDStandAlone
}

// Replicas lists the replicas of view that count (GoneFlags dropped),
// with their satellites' connection status from nodes, sorted by
// resource, then node.
func Replicas(view []Resource, nodes []Node) []Replica {
	sat := make(map[string]string, len(nodes))
	for _, n := range nodes {
		sat[n.Name] = n.ConnectionStatus
	}
	out := make([]Replica, 0, len(view))
	for _, r := range view {
		if r.Name == "" || r.NodeName == "" || HasAny(r.Flags, GoneFlags) {
			continue
		}
		rp := Replica{Resource: r.Name, Node: r.NodeName, State: ReplicaState(r.ResourceWithVolumes),
			Diskless: HasAny(r.Flags, DisklessFlags), Satellite: sat[r.NodeName]}
		rp.Detached = !rp.Diskless && rp.State == "Diskless"
		if drbd, known := HasDRBD(r.ResourceWithVolumes); known && !drbd {
			rp.StorageOnly = true
		}
		if len(r.Volumes) > 0 {
			rp.Pool = r.Volumes[0].StoragePoolName
		}
		if !rp.Diskless {
			rp.SizeKiB = replicaSizeKiB(r.ResourceWithVolumes)
		}
		if l := r.LayerObject; l != nil && l.Drbd != nil && l.Drbd.Connections != nil {
			rp.Peers = make(map[string]string, len(l.Drbd.Connections))
			for peer, c := range l.Drbd.Connections {
				msg := c.Message
				if msg == "" && c.Connected {
					msg = DRBDConnected
				}
				rp.Peers[peer] = msg
			}
		}
		for _, vol := range r.Replication {
			for peer, st := range vol {
				if st.ReplicationState == ReplicationOff && !slices.Contains(rp.ReplicationOff, peer) {
					rp.ReplicationOff = append(rp.ReplicationOff, peer)
				}
			}
		}
		slices.Sort(rp.ReplicationOff)
		out = append(out, rp)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Resource != out[j].Resource {
			return out[i].Resource < out[j].Resource
		}
		return out[i].Node < out[j].Node
	})
	return out
}

// Replica reasons beyond "Disk" + the DRBD disk state.
const (
	// ReasonDiskDetached: a diskful replica whose disk detached.
	ReasonDiskDetached = "DiskDetached"
	// ReasonSplitBrain: two UpToDate copies StandAlone toward each other.
	ReasonSplitBrain = "SplitBrain"
	// ReasonConnectionStandAlone: the replica gave up connecting to a peer
	// (StandAlone stays until an operator reconnects it).
	ReasonConnectionStandAlone = "ConnectionStandAlone"
	// ReasonStorageOnly: a volume without a DRBD layer: one copy, on this
	// node only.
	ReasonStorageOnly = "StorageOnly"
	// ReasonDiskStateUnknown: the controller holds no state from the
	// satellite.
	ReasonDiskStateUnknown = "DiskStateUnknown"
)

// Observations is the controller's view as per-node observations of the
// linstor component, the shape agents report: one linstor-satellite
// observation per node that runs a satellite, and one drbd-resource
// observation per replica on it (pinned to the resource, with the
// cluster-wide replica counts the drain rules read). connecting is how
// long each satellite has been connecting (JudgeNode); nil for none.
func Observations(nodes []Node, replicas []Replica, connecting map[string]time.Duration) map[string][]report.Observation {
	out := map[string][]report.Observation{}
	for _, n := range nodes {
		if n.Name == "" || !HasSatellite(n) {
			continue
		}
		out[n.Name] = append(out[n.Name], JudgeNode(n, connecting[n.Name]))
	}
	type count struct{ all, upToDate int }
	counts := map[string]*count{}
	byRes := map[string][]Replica{}
	for _, r := range replicas {
		c := counts[r.Resource]
		if c == nil {
			c = &count{}
			counts[r.Resource] = c
		}
		c.all++
		if r.State == "UpToDate" && r.Copy() {
			c.upToDate++
		}
		byRes[r.Resource] = append(byRes[r.Resource], r)
	}
	for _, r := range replicas {
		c := counts[r.Resource]
		o := report.Observation{
			Check: report.CheckDRBDResource, Component: report.ComponentLinstor,
			ResourceRef: &report.ResourceRef{Kind: report.KindResource, Name: r.Resource},
			Status:      StatusOf(r.State),
			Attributes: map[string]float64{
				report.AttrUpToDate:         b2f(r.State == "UpToDate" && r.Copy()),
				report.AttrDiskless:         b2f(r.Diskless),
				report.AttrReplicas:         float64(c.all),
				report.AttrUpToDateReplicas: float64(c.upToDate),
			},
		}
		shown := r.State
		switch {
		case r.StorageOnly:
			shown, o.Reason = fmt.Sprintf("storage-only (no DRBD layer) in storage pool %q: its data lives only on %s", r.Pool, r.Node), ReasonStorageOnly
			o.Status = report.StatusHealthy
			if ClassOf(r.Satellite) != SatelliteServing {
				o.Status = report.StatusUnknown
				shown += fmt.Sprintf(", whose satellite is %q", r.Satellite)
			}
		case r.State == "":
			shown, o.Reason = "unknown (the controller holds no state from the satellite)", ReasonDiskStateUnknown
		case r.Detached:
			shown, o.Reason, o.Status = "Diskless, detached from its backing disk (a diskful replica: no data copy until re-attached)", ReasonDiskDetached, report.StatusDegraded
		default:
			o.Reason = "Disk" + r.State
		}
		if !r.StorageOnly && o.Status != report.StatusDown && o.Status != report.StatusUnknown {
			for _, p := range byRes[r.Resource] {
				if p.Node == r.Node {
					continue
				}
				if SplitBrain(r, p) {
					o.Status, o.Reason = report.StatusDegraded, ReasonSplitBrain
					shown += fmt.Sprintf("; split brain with %s (both UpToDate, StandAlone toward each other: resolve by hand)", p.Node)
					break
				}
				if r.Peers[p.Node] == DRBDStandAlone && o.Reason != ReasonSplitBrain {
					o.Status, o.Reason = report.StatusDegraded, ReasonConnectionStandAlone
					shown += fmt.Sprintf("; StandAlone toward %s (reconnect by hand)", p.Node)
				}
			}
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
