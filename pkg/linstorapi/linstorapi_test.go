package linstorapi

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/test/sources/fault"
	linstorsrc "github.com/cozystack/cozy-health/test/sources/linstor"
	"github.com/cozystack/cozy-health/test/sources/machined"
)

func TestPlainHTTP(t *testing.T) {
	srv, err := linstorsrc.Start("", nil)
	require.NoError(t, err)
	defer srv.Close()
	srv.SetNode("node-0", "ONLINE")
	srv.SetNode("node-1", "OFFLINE")
	srv.SetReplica(linstorsrc.Replica{Resource: "pvc-a", Node: "node-0", DiskState: "UpToDate"})
	srv.SetReplica(linstorsrc.Replica{Resource: "pvc-a", Node: "node-1", DiskState: "UpToDate"})
	srv.SetReplica(linstorsrc.Replica{Resource: "pvc-b", Node: "node-0", DiskState: "Diskless", Diskless: true})
	c, err := New(Config{URL: srv.URL})
	require.NoError(t, err)

	nodes, err := c.Nodes(context.Background())
	require.NoError(t, err)
	require.Len(t, nodes, 2)
	assert.Equal(t, "ONLINE", nodes[0].ConnectionStatus)
	view, err := c.ResourceView(context.Background())
	require.NoError(t, err)
	require.Len(t, view, 3)
	reps := Replicas(view, nodes)
	assert.Equal(t, []Replica{
		// node-1's satellite is OFFLINE: the controller holds no state of
		// node-1, and node-0 keeps trying to connect to it.
		{Resource: "pvc-a", Node: "node-0", State: "UpToDate", Pool: "thinpool", SizeKiB: linstorsrc.ReplicaSizeKiB, Satellite: "ONLINE",
			Peers: map[string]string{"node-1": "Connecting"}, ReplicationOff: []string{"node-1"}},
		{Resource: "pvc-a", Node: "node-1", State: "", Pool: "thinpool", SizeKiB: linstorsrc.ReplicaSizeKiB, Satellite: "OFFLINE"},
		{Resource: "pvc-b", Node: "node-0", State: "Diskless", Diskless: true, Pool: "DfltDisklessStorPool", Satellite: "ONLINE"}, // no peers: an empty map is omitted
	}, reps)
	assert.Equal(t, map[string]int{"/v1/nodes": 1, "/v1/view/resources": 1}, srv.Requests())
	pools, err := c.StoragePools(context.Background())
	require.NoError(t, err)
	rooms := Rooms(pools)
	require.Len(t, rooms, 4)
	assert.Equal(t, PoolRoom{Node: "node-0", Pool: "thinpool", Kind: "LVM_THIN", Class: PoolThin, FreeKiB: linstorsrc.DefaultFreeKiB, TotalKiB: linstorsrc.PoolTotalKiB}, rooms[1])
	assert.Equal(t, PoolRoom{Node: "node-1", Pool: "thinpool", Kind: "LVM_THIN", Class: PoolThin, FreeKiB: -1, TotalKiB: -1}, rooms[3],
		"an OFFLINE satellite's pool: capacities not sent, a warning is no error")

	obs := Observations(nodes, reps, nil)
	require.Len(t, obs["node-1"], 2)
	assert.Equal(t, report.StatusDown, obs["node-1"][0].Status)
	assert.Equal(t, "SatelliteOffline", obs["node-1"][0].Reason)
	assert.Equal(t, report.StatusUnknown, obs["node-1"][1].Status)
	assert.Equal(t, "DiskStateUnknown", obs["node-1"][1].Reason)
	a0 := obs["node-0"][1]
	assert.Equal(t, "pvc-a", a0.ResourceRef.Name)
	assert.Equal(t, 2.0, a0.Attributes[report.AttrReplicas])
	assert.Equal(t, 1.0, a0.Attributes[report.AttrUpToDateReplicas], "the replica without state is not counted UpToDate")

	srv.Fault.Set(fault.Garbage)
	_, err = c.Nodes(context.Background())
	require.ErrorContains(t, err, "decode linstor /v1/nodes")
	srv.Fault.Set(fault.Hang)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = c.ResourceView(ctx)
	require.Error(t, err)
	srv.Fault.Set(fault.Normal)

	small, err := New(Config{URL: srv.URL, MaxBody: 64})
	require.NoError(t, err)
	_, err = small.ResourceView(context.Background())
	require.ErrorContains(t, err, "body larger than 64 bytes")
	_, err = small.StoragePools(context.Background())
	require.ErrorContains(t, err, "read linstor /v1/view/storage-pools: body larger than 64 bytes")

	_, err = New(Config{URL: "ftp://x"})
	require.Error(t, err)
	_, err = New(Config{URL: "http://"})
	require.Error(t, err)
}

// TestCredentialsRenewed: the controller behind mutual TLS; the
// credentials are asked at every request, so a renewed certificate is
// used without a new client, and missing credentials fail the request.
func TestCredentialsRenewed(t *testing.T) {
	pki, err := machined.NewPKI([]string{"127.0.0.1"}, []string{"linstor-client"}, time.Hour)
	require.NoError(t, err)
	srv, err := linstorsrc.Start("", pki.ServerTLS())
	require.NoError(t, err)
	defer srv.Close()
	srv.SetNode("node-0", "ONLINE")

	var mu sync.Mutex
	var cur TLSMaterial
	var curErr = errors.New("secret cozy-linstor/linstor-client-tls not found")
	set := func(m TLSMaterial, err error) { mu.Lock(); cur, curErr = m, err; mu.Unlock() }
	c, err := New(Config{URL: srv.URL, Credentials: func() (TLSMaterial, error) { mu.Lock(); defer mu.Unlock(); return cur, curErr }})
	require.NoError(t, err)

	_, err = c.Nodes(context.Background())
	require.ErrorContains(t, err, "linstor-client-tls not found")

	set(TLSMaterial{CA: pki.CAPEM, Cert: pki.ClientCertPEM, Key: pki.ClientKeyPEM}, nil)
	_, err = c.Nodes(context.Background())
	require.NoError(t, err)

	// A certificate without a client certificate: the handshake fails.
	set(TLSMaterial{CA: pki.CAPEM}, nil)
	_, err = c.Nodes(context.Background())
	require.Error(t, err)

	// Renewed (a new key pair from the same CA): used at once.
	crt, key, err := pki.IssueClient([]string{"linstor-client"}, time.Hour)
	require.NoError(t, err)
	set(TLSMaterial{CA: pki.CAPEM, Cert: crt, Key: key}, nil)
	_, err = c.Nodes(context.Background())
	require.NoError(t, err)

	// A mismatched pair is named.
	set(TLSMaterial{CA: pki.CAPEM, Cert: crt, Key: pki.ClientKeyPEM}, nil)
	_, err = c.Nodes(context.Background())
	require.ErrorContains(t, err, "tls.crt and tls.key")
	set(TLSMaterial{CA: []byte("not PEM")}, nil)
	_, err = c.Nodes(context.Background())
	require.ErrorContains(t, err, "ca.crt holds no PEM certificate")
}

func TestParseRealSample(t *testing.T) {
	b, err := os.ReadFile("testdata/linstor-resource-with-volumes.json")
	require.NoError(t, err)
	rs, err := ParseResources(append(append([]byte("["), b...), ']'))
	require.NoError(t, err)
	require.Len(t, rs, 1)
	assert.Equal(t, "pvc-b5be6893-9892-4278-b2da-51a060fc4624", rs[0].Name)
	assert.Equal(t, "demo1.linstor-days.at.linbit.com", rs[0].NodeName)
	assert.Equal(t, "UpToDate", rs[0].Volumes[0].State.DiskState)
	assert.Equal(t, "UpToDate", ReplicaState(rs[0].ResourceWithVolumes))
	reps := Replicas(rs, nil)
	require.Len(t, reps, 1)
	assert.Equal(t, map[string]string{"demo2.linstor-days.at.linbit.com": "Connected", "demo3.linstor-days.at.linbit.com": "Connecting"}, reps[0].Peers,
		"layer_object.drbd.connections as the sample has them")
	assert.True(t, reps[0].Copy())
	assert.Equal(t, int64(516096), reps[0].SizeKiB, "the STORAGE layer's size, not the volume's allocated_size_kib (206: what a thin volume has written)")
}

func TestJudgeNode(t *testing.T) {
	for _, tc := range []struct {
		status string
		flags  []string
		want   report.Status
		reason string
	}{
		{"ONLINE", nil, report.StatusHealthy, "SatelliteOnline"},
		{"OFFLINE", nil, report.StatusDown, "SatelliteOffline"},
		{"VERSION_MISMATCH", nil, report.StatusDegraded, "SatelliteVersionMismatch"},
		{"", nil, report.StatusUnknown, "SatelliteStatusUnknown"},
		{"ONLINE", []string{"EVACUATE"}, report.StatusDegraded, "SatelliteEvacuate"},
	} {
		o := JudgeNode(Node{Name: "n", Type: "SATELLITE", ConnectionStatus: tc.status, Flags: tc.flags}, 0)
		assert.Equal(t, tc.want, o.Status, tc.status)
		assert.Equal(t, tc.reason, o.Reason, tc.status)
	}
	assert.False(t, HasSatellite(Node{Type: "CONTROLLER"}))
	assert.True(t, HasSatellite(Node{Type: "COMBINED"}))
}

func FuzzParseResources(f *testing.F) {
	b, err := os.ReadFile("testdata/linstor-resource-with-volumes.json")
	require.NoError(f, err)
	f.Add(append(append([]byte("["), b...), ']'))
	f.Add([]byte(`[{"name":"r","node_name":"n","flags":["DISKLESS"],"volumes":[{"volume_number":0}]}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := ParseResources(data)
		if err != nil {
			return
		}
		for n, obs := range Observations(nil, Replicas(rs, nil), nil) {
			for _, o := range obs {
				if o.Reason == "" || n == "" {
					t.Fatal("empty reason or node")
				}
			}
		}
	})
}

// TestStandInFaults: the lab's drbd-detached and drbd-standalone faults,
// as the controller stand-in renders them, read as a detached replica and
// a split brain, and their repairs as neither.
func TestStandInFaults(t *testing.T) {
	srv, err := linstorsrc.Start("", nil)
	require.NoError(t, err)
	defer srv.Close()
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		srv.SetNode(n, "ONLINE")
	}
	srv.SetReplica(linstorsrc.Replica{Resource: "pvc-lab-1", Node: "node-1", DiskState: "UpToDate"})
	srv.SetReplica(linstorsrc.Replica{Resource: "pvc-lab-1", Node: "node-2", DiskState: "UpToDate"})
	srv.SetReplica(linstorsrc.Replica{Resource: "pvc-lab-1", Node: "node-3", DiskState: "Diskless", Diskless: true})
	c, err := New(Config{URL: srv.URL})
	require.NoError(t, err)
	read := func() []Replica {
		nodes, err := c.Nodes(context.Background())
		require.NoError(t, err)
		view, err := c.ResourceView(context.Background())
		require.NoError(t, err)
		return Replicas(view, nodes)
	}
	reps := read()
	require.Len(t, reps, 3)
	assert.Equal(t, ConnectionUp, Connected(reps[0], reps[1]))
	assert.False(t, SplitBrain(reps[0], reps[1]))

	srv.SetDiskState("pvc-lab-1", "node-1", "Diskless") // drbd-detached
	reps = read()
	assert.True(t, reps[0].Detached)
	assert.False(t, reps[2].Detached, "the tie-breaker is diskless by its flags")
	srv.SetDiskState("pvc-lab-1", "node-1", "UpToDate") // drbd-attached
	assert.False(t, read()[0].Detached)

	srv.SetStandAlone("pvc-lab-1", "node-1", true) // drbd-standalone
	reps = read()
	assert.Equal(t, ConnectionDown, Connected(reps[0], reps[1]))
	assert.Equal(t, ConnectionDown, Connected(reps[0], reps[2]))
	assert.Equal(t, ConnectionUp, Connected(reps[1], reps[2]))
	assert.True(t, SplitBrain(reps[0], reps[1]))
	assert.Equal(t, []string{"node-2", "node-3"}, reps[0].ReplicationOff, "replication_states Off toward the StandAlone peers")
	srv.SetStandAlone("pvc-lab-1", "node-1", false) // drbd-connected
	reps = read()
	assert.Equal(t, ConnectionUp, Connected(reps[0], reps[1]))
	assert.False(t, SplitBrain(reps[0], reps[1]))
}
