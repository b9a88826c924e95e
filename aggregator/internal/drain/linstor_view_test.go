package drain

import (
	"encoding/json"
	"errors"
	"testing"

	lapi "github.com/LINBIT/golinstor/client"
	"github.com/LINBIT/golinstor/devicelayerkind"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/pkg/linstorapi"
)

// The cases of issue 34 on the controller's view, from the source's real
// shape: golinstor v0.63.0's types, marshalled as the controller fills them
// (Json.apiToResourceWithVolumes of linstor-server v1.33.3: connections
// and volume states only with the satellite's state), decoded and judged
// as the aggregator does (linstorapi.ParseResources, Replicas). Disk
// states: DiskState.java; connection messages: DrbdConnection in
// docs/rest_v1_openapi.yaml; satellite statuses: Node.connection_status
// there (all linstor-server v1.33.3).

type viewReplica struct {
	node  string
	flags []string
	disks []string
	peers map[string]string
	// storage: no DRBD layer.
	storage bool
}

// controllerView renders replicas of one resource as golinstor values,
// then reads them back as the aggregator does, with every satellite in
// sats (ONLINE when not named).
func controllerViewOf(t *testing.T, res string, sats map[string]string, reps ...viewReplica) []linstorapi.Replica {
	t.Helper()
	var out []lapi.ResourceWithVolumes
	var nodes []lapi.Node
	for _, r := range reps {
		st, ok := sats[r.node]
		if !ok {
			st = "ONLINE"
		}
		nodes = append(nodes, lapi.Node{Name: r.node, Type: "SATELLITE", ConnectionStatus: st})
		layer := &lapi.ResourceLayer{Type: devicelayerkind.Drbd, Drbd: &lapi.DrbdResource{},
			Children: []lapi.ResourceLayer{{Type: devicelayerkind.Storage, Storage: &lapi.StorageResource{}}}}
		if r.storage {
			layer = &lapi.ResourceLayer{Type: devicelayerkind.Storage, Storage: &lapi.StorageResource{}}
		}
		rw := lapi.ResourceWithVolumes{Resource: lapi.Resource{Name: res, NodeName: r.node, Flags: r.flags, LayerObject: layer}}
		if st == "ONLINE" && !r.storage {
			layer.Drbd.Connections = map[string]lapi.DrbdConnection{}
			for p, m := range r.peers {
				layer.Drbd.Connections[p] = lapi.DrbdConnection{Connected: m == "Connected", Message: m}
			}
		}
		for i, d := range r.disks {
			v := lapi.Volume{VolumeNumber: int32(i), StoragePoolName: "thinpool"}
			if st == "ONLINE" {
				v.State.DiskState = d
			}
			rw.Volumes = append(rw.Volumes, v)
		}
		out = append(out, rw)
	}
	b, err := json.Marshal(out)
	require.NoError(t, err)
	view, err := linstorapi.ParseResources(b)
	require.NoError(t, err)
	return linstorapi.Replicas(view, nodes)
}

var tieBreaker = []string{"DRBD_DISKLESS", "TIE_BREAKER"}

func all3(except ...string) map[string]string {
	m := map[string]string{}
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		m[n] = "Connected"
	}
	for _, e := range except {
		delete(m, e)
	}
	return m
}

func TestDrainOnControllerViewIssue34(t *testing.T) {
	nodes := map[string]NodeInfo{"node-1": fresh("node-1"), "node-2": fresh("node-2"), "node-3": fresh("node-3")}
	cases := []struct {
		name     string
		sats     map[string]string
		reps     []viewReplica
		target   string
		last     Verdict
		quorum   Verdict
		contains string
	}{
		// Case 1: node-2's disk detached (on-io-error detach): node-1
		// holds the only real copy. It used to read safe: the detached
		// replica counted as an UpToDate copy (two volumes, one
		// detached, read "UpToDate").
		{name: "1: the other diskful replica detached (second volume): the target holds the last copy",
			reps: []viewReplica{
				{node: "node-1", disks: []string{"UpToDate", "UpToDate"}, peers: all3("node-1")},
				{node: "node-2", disks: []string{"UpToDate", "Diskless"}, peers: all3("node-2")},
				{node: "node-3", flags: tieBreaker, disks: []string{"Diskless", "Diskless"}, peers: all3("node-3")}},
			target: "node-1", last: Blocked, quorum: Safe, contains: "node-2 detached"},
		{name: "1: the detached replica's own node drains safely",
			reps: []viewReplica{
				{node: "node-1", disks: []string{"UpToDate"}, peers: all3("node-1")},
				{node: "node-2", disks: []string{"Diskless"}, peers: all3("node-2")},
				{node: "node-3", flags: tieBreaker, disks: []string{"Diskless"}, peers: all3("node-3")}},
			target: "node-2", last: Safe, quorum: Safe},
		// Case 2: node-1 and node-2 StandAlone toward each other, both
		// UpToDate (split brain); the tie-breaker connected to both. It
		// used to read safe both ways: each counted as a good copy.
		{name: "2: split brain: draining one side is blocked",
			reps: []viewReplica{
				{node: "node-1", disks: []string{"UpToDate"}, peers: map[string]string{"node-2": "StandAlone", "node-3": "Connected"}},
				{node: "node-2", disks: []string{"UpToDate"}, peers: map[string]string{"node-1": "StandAlone", "node-3": "Connected"}},
				{node: "node-3", flags: tieBreaker, disks: []string{"Diskless"}, peers: all3("node-3")}},
			target: "node-1", last: Blocked, quorum: Safe, contains: "split brain with node-2"},
		{name: "2: split brain: draining the other side is blocked",
			reps: []viewReplica{
				{node: "node-1", disks: []string{"UpToDate"}, peers: map[string]string{"node-2": "StandAlone", "node-3": "Connected"}},
				{node: "node-2", disks: []string{"UpToDate"}, peers: map[string]string{"node-1": "StandAlone", "node-3": "Connected"}},
				{node: "node-3", flags: tieBreaker, disks: []string{"Diskless"}, peers: all3("node-3")}},
			target: "node-2", last: Blocked, quorum: Safe, contains: "split brain with node-1"},
		// Case 2: the copy that stays is StandAlone from every peer: it
		// cannot reach DRBD quorum (2 of 3) without the target.
		{name: "2: the staying copy StandAlone from its peers: draining the tie-breaker leaves no quorum",
			reps: []viewReplica{
				{node: "node-1", disks: []string{"UpToDate"}, peers: map[string]string{"node-2": "StandAlone", "node-3": "StandAlone"}},
				{node: "node-2", disks: []string{"Outdated"}, peers: map[string]string{"node-1": "Connecting", "node-3": "Connected"}},
				{node: "node-3", flags: tieBreaker, disks: []string{"Diskless"}, peers: map[string]string{"node-1": "Connecting", "node-2": "Connected"}}},
			target: "node-3", last: Safe, quorum: Blocked, contains: "1 of 3 replicas connected around an UpToDate copy"},
		{name: "2: a connection neither side reports: unknown, never safe",
			reps: []viewReplica{
				{node: "node-1", disks: []string{"UpToDate"}, peers: map[string]string{"node-3": "Connected"}},
				{node: "node-2", disks: []string{"UpToDate"}, peers: map[string]string{"node-3": "Connected"}},
				{node: "node-3", flags: tieBreaker, disks: []string{"Diskless"}, peers: all3("node-3")}},
			target: "node-3", last: Safe, quorum: Unknown, contains: "(2 if the uncertain are)"},
		// Case 3: a storage-only volume: never a disk state, used to
		// read unknown for good.
		{name: "3: storage-only: safe, saying the data lives only there",
			reps:   []viewReplica{{node: "node-1", storage: true, disks: []string{""}}},
			target: "node-1", last: Safe, quorum: Safe, contains: "its data lives only on node-1"},
		// Case 4: the other copy's satellite still connecting after a
		// controller restart: its state is not current.
		{name: "4: the other copy's satellite AUTHENTICATED: unknown",
			sats: map[string]string{"node-2": "AUTHENTICATED"},
			reps: []viewReplica{
				{node: "node-1", disks: []string{"UpToDate"}, peers: all3("node-1")},
				{node: "node-2", disks: []string{"UpToDate"}, peers: all3("node-2")},
				{node: "node-3", flags: tieBreaker, disks: []string{"Diskless"}, peers: all3("node-3")}},
			target: "node-1", last: Unknown, quorum: Unknown, contains: `node-2 satellite "AUTHENTICATED"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSnapshot(nodes, t0).WithControllerView(controllerViewOf(t, "pvc-a", tc.sats, tc.reps...), "")
			res := Evaluate(tc.target, s, t0)
			last, q := reasonsOf(res, RuleLinstorLastReplica), reasonsOf(res, RuleLinstorQuorum)
			assert.Equal(t, tc.last, worst(last), "%+v", last)
			assert.Equal(t, tc.quorum, worst(q), "%+v", q)
			var msgs string
			for _, r := range append(last, q...) {
				msgs += r.Message + "\n"
			}
			if tc.contains != "" {
				assert.Contains(t, msgs, tc.contains)
			}
		})
	}
}

// TestDrainUnknownOnceTheLatestReadFailed (case 5): the reader hands the
// drain rules no replicas once its latest read failed; the rules then
// answer unknown, naming why.
func TestDrainUnknownOnceTheLatestReadFailed(t *testing.T) {
	nodes := map[string]NodeInfo{"node-1": fresh("node-1"), "node-2": fresh("node-2")}
	why := "the latest read of the LINSTOR controller's view failed: " + errors.New("connection refused").Error()
	s := NewSnapshot(nodes, t0).WithControllerView(nil, why)
	res := Evaluate("node-1", s, t0)
	for _, rule := range []string{RuleLinstorLastReplica, RuleLinstorQuorum} {
		rs := reasonsOf(res, rule)
		require.Len(t, rs, 1)
		assert.Equal(t, Unknown, rs[0].Verdict)
		assert.Contains(t, rs[0].Message, "connection refused")
	}
}
