package linstorapi

import (
	"encoding/json"
	"testing"
	"time"

	lapi "github.com/LINBIT/golinstor/client"
	"github.com/LINBIT/golinstor/devicelayerkind"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/pkg/report"
)

// The states below are upstream's, at the versions Cozystack ships:
// disk states from DiskState.java, replication states from ReplState.java,
// connection messages from the DrbdConnection enum of
// docs/rest_v1_openapi.yaml and satellite statuses from its Node enum, all
// of linstor-server v1.33.3; MISSING_EXT_TOOLS and DUPLICATE_UNAME from
// golinstor v0.63.0's connectionstatus package. The fixtures are golinstor
// v0.63.0's own types, marshalled, as the controller's Json.java fills
// them (connections only with satellite state; DrbdOptions/SkipDisk after
// Failed -> Diskless, StateSequenceDetector.java).

// drbdResource is one replica as the controller renders it.
func drbdResource(name, node string, flags []string, peers map[string]string, disks ...string) lapi.ResourceWithVolumes {
	conns := map[string]lapi.DrbdConnection{}
	for p, m := range peers {
		conns[p] = lapi.DrbdConnection{Connected: m == "Connected", Message: m}
	}
	r := lapi.ResourceWithVolumes{Resource: lapi.Resource{Name: name, NodeName: node, Flags: flags, Props: map[string]string{},
		LayerObject: &lapi.ResourceLayer{Type: devicelayerkind.Drbd, Drbd: &lapi.DrbdResource{Connections: conns},
			Children: []lapi.ResourceLayer{{Type: devicelayerkind.Storage, Storage: &lapi.StorageResource{}}}}}}
	for i, d := range disks {
		r.Volumes = append(r.Volumes, lapi.Volume{VolumeNumber: int32(i), StoragePoolName: "thinpool", State: lapi.VolumeState{DiskState: d}})
	}
	return r
}

// parse marshals golinstor values and decodes them as the client does.
func parse(t *testing.T, rs ...lapi.ResourceWithVolumes) []Resource {
	t.Helper()
	b, err := json.Marshal(rs)
	require.NoError(t, err)
	out, err := ParseResources(b)
	require.NoError(t, err)
	return out
}

func online(names ...string) []Node {
	var out []Node
	for _, n := range names {
		out = append(out, Node{Name: n, Type: "SATELLITE", ConnectionStatus: ConnectionOnline})
	}
	return out
}

// entry is node's drbd-resource observation of res.
func entry(t *testing.T, obs map[string][]report.Observation, node, res string) report.Observation {
	t.Helper()
	for _, o := range obs[node] {
		if o.Check == report.CheckDRBDResource && o.ResourceRef != nil && o.ResourceRef.Name == res {
			return o
		}
	}
	t.Fatalf("no drbd-resource observation of %s on %s: %+v", res, node, obs[node])
	return report.Observation{}
}

// TestDetachedDiskIsNoCopy (issue 34, case 1): with LINSTOR's default
// on-io-error detach, a failing disk goes Failed -> Diskless while the
// resource keeps no DISKLESS flag. It used to rank with UpToDate (and a
// two-volume resource with one volume detached read "UpToDate"): the
// node with the failed disk read Healthy and counted as a copy.
func TestDetachedDiskIsNoCopy(t *testing.T) {
	up := map[string]string{"node-1": "Connected", "node-2": "Connected", "node-3": "Connected"}
	for _, tc := range []struct {
		name  string
		disks []string
	}{
		{"one volume detached", []string{"Diskless"}},
		{"second of two volumes detached", []string{"UpToDate", "Diskless"}},
		{"first of two volumes detached", []string{"Diskless", "UpToDate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			view := parse(t,
				drbdResource("pvc-a", "node-1", nil, up, tc.disks...),
				drbdResource("pvc-a", "node-2", nil, up, "UpToDate", "UpToDate"),
				drbdResource("pvc-a", "node-3", []string{"DRBD_DISKLESS", "TIE_BREAKER"}, up, "Diskless", "Diskless"))
			reps := Replicas(view, online("node-1", "node-2", "node-3"))
			require.Len(t, reps, 3)
			assert.True(t, reps[0].Detached, "diskful by its flags, a volume Diskless: detached")
			assert.False(t, reps[0].Copy())
			assert.False(t, reps[2].Detached, "a tie-breaker is diskless by its flags, not detached")
			obs := Observations(online("node-1", "node-2", "node-3"), reps, nil)
			o := entry(t, obs, "node-1", "pvc-a")
			assert.Equal(t, report.StatusDegraded, o.Status)
			assert.Equal(t, ReasonDiskDetached, o.Reason)
			assert.Equal(t, 0.0, o.Attributes[report.AttrUpToDate])
			assert.Equal(t, 1.0, entry(t, obs, "node-2", "pvc-a").Attributes[report.AttrUpToDateReplicas], "one UpToDate copy, not two")
		})
	}
}

// TestConnectionsAndReplicationStates (issue 34, case 2): the DRBD
// connections of /v1/view/resources and the volumes' replication states
// (which golinstor's VolumeState drops) are read.
func TestConnectionsAndReplicationStates(t *testing.T) {
	a := drbdResource("pvc-a", "node-1", nil, map[string]string{"node-2": "StandAlone", "node-3": "Connected"}, "UpToDate")
	b := drbdResource("pvc-a", "node-2", nil, map[string]string{"node-1": "StandAlone", "node-3": "Connected"}, "UpToDate")
	c := drbdResource("pvc-a", "node-3", []string{"DRBD_DISKLESS", "TIE_BREAKER"}, map[string]string{"node-1": "Connected", "node-2": "Connected"}, "Diskless")
	raw, err := json.Marshal([]lapi.ResourceWithVolumes{a, b, c})
	require.NoError(t, err)
	// The controller's replication_states (Json.apiToVolumeState), as the
	// OpenAPI ReplicationStates map: node-1 does not replicate to node-2.
	var generic []map[string]any
	require.NoError(t, json.Unmarshal(raw, &generic))
	vol := generic[0]["volumes"].([]any)[0].(map[string]any)
	vol["state"].(map[string]any)["replication_states"] = map[string]any{
		"node-2": map[string]any{"replication_state": "Off"}, "node-3": map[string]any{"replication_state": "SyncSource", "done_percentage": 42.5}}
	raw, err = json.Marshal(generic)
	require.NoError(t, err)
	view, err := ParseResources(raw)
	require.NoError(t, err)
	require.NotNil(t, view[0].Replication)
	assert.Equal(t, "SyncSource", view[0].Replication[0]["node-3"].ReplicationState)
	require.NotNil(t, view[0].Replication[0]["node-3"].DonePercentage)
	assert.InDelta(t, 42.5, *view[0].Replication[0]["node-3"].DonePercentage, 1e-9)
	assert.Nil(t, view[1].Replication, "no replication_states: none decoded")

	reps := Replicas(view, online("node-1", "node-2", "node-3"))
	assert.Equal(t, []string{"node-2"}, reps[0].ReplicationOff)
	assert.Equal(t, ConnectionDown, Connected(reps[0], reps[1]))
	assert.Equal(t, ConnectionUp, Connected(reps[0], reps[2]))
	assert.True(t, SplitBrain(reps[0], reps[1]), "two UpToDate copies StandAlone toward each other")
	assert.False(t, SplitBrain(reps[0], reps[2]), "a tie-breaker holds no copy")
	obs := Observations(online("node-1", "node-2", "node-3"), reps, nil)
	for _, n := range []string{"node-1", "node-2"} {
		o := entry(t, obs, n, "pvc-a")
		assert.Equal(t, report.StatusDegraded, o.Status, n)
		assert.Equal(t, ReasonSplitBrain, o.Reason, n)
	}
	assert.Equal(t, report.StatusHealthy, entry(t, obs, "node-3", "pvc-a").Status)

	// One side StandAlone, the other still trying: not a split brain, but
	// the StandAlone side says so.
	b.LayerObject.Drbd.Connections["node-1"] = lapi.DrbdConnection{Message: "Connecting"}
	reps = Replicas(parse(t, a, b, c), online("node-1", "node-2", "node-3"))
	assert.Equal(t, ConnectionDown, Connected(reps[0], reps[1]))
	assert.True(t, SplitBrain(reps[0], reps[1]), "StandAlone on one side, not connected on the other, both UpToDate")
	// A side that contradicts the other: the connection is not known, and
	// a StandAlone between two UpToDate copies not known up stays a split
	// brain (the drain model found this one).
	b.LayerObject.Drbd.Connections["node-1"] = lapi.DrbdConnection{Connected: true, Message: "Connected"}
	reps = Replicas(parse(t, a, b, c), online("node-1", "node-2", "node-3"))
	assert.Equal(t, ConnectionNotKnown, Connected(reps[0], reps[1]))
	assert.True(t, SplitBrain(reps[0], reps[1]))
	// StandAlone toward an Outdated peer: no split brain, the StandAlone
	// side says so.
	b.Volumes[0].State.DiskState = "Outdated"
	reps = Replicas(parse(t, a, b, c), online("node-1", "node-2", "node-3"))
	obs = Observations(online("node-1", "node-2", "node-3"), reps, nil)
	assert.Equal(t, ReasonConnectionStandAlone, entry(t, obs, "node-1", "pvc-a").Reason)
	assert.Equal(t, "DiskOutdated", entry(t, obs, "node-2", "pvc-a").Reason)
	// Every enum value but Connected (and Unknown, which says nothing) is
	// not connected.
	for _, m := range DRBDConnectionStates {
		x := Replica{Node: "x", Peers: map[string]string{"y": m}}
		want := ConnectionDown
		switch m {
		case DRBDConnected:
			want = ConnectionUp
		case DRBDUnknown:
			want = ConnectionNotKnown
		}
		assert.Equal(t, want, Connected(x, Replica{Node: "y"}), m)
	}
}

// TestStorageOnly (issue 34, case 3): a volume without a DRBD layer has
// no disk state in the controller's view, ever; it used to read Unknown
// for good. It is judged by its satellite, and says where its data is.
func TestStorageOnly(t *testing.T) {
	r := lapi.ResourceWithVolumes{Resource: lapi.Resource{Name: "pvc-local", NodeName: "node-1",
		LayerObject: &lapi.ResourceLayer{Type: devicelayerkind.Storage, Storage: &lapi.StorageResource{}}},
		Volumes: []lapi.Volume{{StoragePoolName: "local", ProviderKind: lapi.LVM_THIN}}}
	reps := Replicas(parse(t, r), online("node-1"))
	require.Len(t, reps, 1)
	assert.True(t, reps[0].StorageOnly)
	assert.False(t, reps[0].Copy())
	o := entry(t, Observations(online("node-1"), reps, nil), "node-1", "pvc-local")
	assert.Equal(t, report.StatusHealthy, o.Status)
	assert.Equal(t, ReasonStorageOnly, o.Reason)
	assert.Contains(t, o.Message, "its data lives only on node-1")

	off := []Node{{Name: "node-1", Type: "SATELLITE", ConnectionStatus: ConnectionOffline}}
	o = entry(t, Observations(off, Replicas(parse(t, r), off), nil), "node-1", "pvc-local")
	assert.Equal(t, report.StatusUnknown, o.Status, "its satellite OFFLINE: not known")

	// No layer object at all: not known to be storage-only.
	r.LayerObject = nil
	assert.False(t, Replicas(parse(t, r), nil)[0].StorageOnly)
}

// TestEverySatelliteStatus (issue 34, case 4): every value of the enum,
// the transitional ones Unknown for a bounded time.
func TestEverySatelliteStatus(t *testing.T) {
	want := map[string]report.Status{
		ConnectionOffline: report.StatusDown, ConnectionConnected: report.StatusUnknown, ConnectionOnline: report.StatusHealthy,
		ConnectionVersionMismatch: report.StatusDegraded, ConnectionFullSyncFailed: report.StatusDegraded,
		ConnectionAuthenticationError: report.StatusDegraded, ConnectionUnknown: report.StatusUnknown,
		ConnectionHostnameMismatch: report.StatusDegraded, ConnectionOtherController: report.StatusDegraded,
		ConnectionAuthenticated: report.StatusUnknown, ConnectionNoStltConn: report.StatusDegraded,
		ConnectionMissingExtTools: report.StatusDegraded, ConnectionDuplicateUname: report.StatusDegraded,
	}
	require.Len(t, ConnectionStatuses, 13, "golinstor v0.63.0 connectionstatus: ordinals 0..12")
	for _, st := range ConnectionStatuses {
		o := JudgeNode(Node{Name: "n", Type: "SATELLITE", ConnectionStatus: st}, 10*time.Second)
		assert.Equal(t, want[st], o.Status, st)
		assert.NotEmpty(t, o.Reason, st)
	}
	for _, st := range []string{ConnectionConnected, ConnectionAuthenticated} {
		o := JudgeNode(Node{Name: "n", Type: "SATELLITE", ConnectionStatus: st}, SatelliteConnectingBound+time.Second)
		assert.Equal(t, report.StatusDegraded, o.Status, "%s past the bound: stuck", st)
		assert.Contains(t, o.Message, "stuck")
	}
	o := JudgeNode(Node{Name: "n", Type: "SATELLITE", ConnectionStatus: "SOMETHING_NEW"}, 0)
	assert.Equal(t, report.StatusUnknown, o.Status, "a value LINSTOR 1.33 does not send is not known")
}
