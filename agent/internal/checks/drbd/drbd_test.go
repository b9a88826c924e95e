package drbd

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/agent/internal/check"
	"github.com/cozystack/cozy-health/agent/internal/checks/linstor"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/test/sources/drbdsetup"
	linstorsrc "github.com/cozystack/cozy-health/test/sources/linstor"
)

func byName(obs []report.Observation) map[string]report.Observation {
	m := map[string]report.Observation{}
	for _, o := range obs {
		m[o.ResourceRef.Name] = o
	}
	return m
}

func cluster(t *testing.T) (*linstorsrc.Server, *linstor.Client) {
	srv, err := linstorsrc.Start("", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	for _, n := range []string{"node-0", "node-1", "node-2"} {
		srv.SetNode(n, "ONLINE")
	}
	for _, n := range []string{"node-0", "node-1", "node-2"} {
		srv.SetReplica(linstorsrc.Replica{Resource: "pvc-a", Node: n, DiskState: "UpToDate"})
	}
	srv.SetReplica(linstorsrc.Replica{Resource: "pvc-b", Node: "node-0", DiskState: "UpToDate"})
	srv.SetReplica(linstorsrc.Replica{Resource: "pvc-b", Node: "node-1", DiskState: "Diskless", Diskless: true})
	srv.SetReplica(linstorsrc.Replica{Resource: "pvc-c", Node: "node-1", DiskState: "UpToDate"})
	c, err := linstor.NewClient(linstor.ClientConfig{URL: srv.URL})
	require.NoError(t, err)
	return srv, c
}

func TestLinstorView(t *testing.T) {
	srv, c := cluster(t)
	obs, err := New(c, "", "node-0").Run(context.Background())
	require.NoError(t, err)
	m := byName(obs)
	require.Len(t, m, 2, "only resources on node-0")
	a := m["pvc-a"]
	assert.Equal(t, report.KindResource, a.ResourceRef.Kind)
	assert.Equal(t, report.StatusHealthy, a.Status)
	assert.Equal(t, 1.0, a.Attributes[report.AttrUpToDate])
	assert.Equal(t, 3.0, a.Attributes[report.AttrReplicas])
	assert.Equal(t, 3.0, a.Attributes[report.AttrUpToDateReplicas])
	b := m["pvc-b"]
	assert.Equal(t, 2.0, b.Attributes[report.AttrReplicas], "diskful and diskless replicas")
	assert.Equal(t, 1.0, b.Attributes[report.AttrUpToDateReplicas], "node-0 holds the last UpToDate copy")

	// The diskless side is Healthy with diskless=1.
	obs, err = New(c, "", "node-1").Run(context.Background())
	require.NoError(t, err)
	m = byName(obs)
	assert.Equal(t, report.StatusHealthy, m["pvc-b"].Status)
	assert.Equal(t, 1.0, m["pvc-b"].Attributes[report.AttrDiskless])
	assert.Equal(t, 0.0, m["pvc-b"].Attributes[report.AttrUpToDate])

	// drbd-outdated pvc-a on node-0.
	srv.SetDiskState("pvc-a", "node-0", "Outdated")
	obs, err = New(c, "", "node-0").Run(context.Background())
	require.NoError(t, err)
	a = byName(obs)["pvc-a"]
	assert.Equal(t, report.StatusDegraded, a.Status)
	assert.Equal(t, "DiskOutdated", a.Reason)
	assert.Equal(t, 0.0, a.Attributes[report.AttrUpToDate])
	assert.Equal(t, 2.0, a.Attributes[report.AttrUpToDateReplicas])

	// Satellite state unknown to the controller: Unknown, never Healthy.
	srv.SetDiskState("pvc-a", "node-0", "")
	obs, err = New(c, "", "node-0").Run(context.Background())
	require.NoError(t, err)
	a = byName(obs)["pvc-a"]
	assert.Equal(t, report.StatusUnknown, a.Status)
	assert.Equal(t, "DiskStateUnknown", a.Reason)

	srv.SetDiskState("pvc-a", "node-0", "Failed")
	obs, err = New(c, "", "node-0").Run(context.Background())
	require.NoError(t, err)
	assert.Equal(t, report.StatusDown, byName(obs)["pvc-a"].Status)

	// A node without resources: nothing to say.
	obs, err = New(c, "", "node-9").Run(context.Background())
	require.NoError(t, err)
	assert.Empty(t, obs)
}

func TestLocalDrbdsetupWins(t *testing.T) {
	_, c := cluster(t)
	fake, err := drbdsetup.Install(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, fake.Set([]drbdsetup.Resource{{
		Name: "pvc-a", Role: "Secondary",
		Devices: []drbdsetup.Device{{Volume: 0, Minor: 1000, DiskState: "Inconsistent"}},
		Connections: []drbdsetup.Connection{
			{PeerNodeID: 1, Name: "node-1", ConnectionState: "Connected", PeerDevices: []drbdsetup.PeerDevice{{ReplicationState: "SyncTarget", PeerDiskState: "UpToDate"}}},
		},
	}}))
	obs, err := New(c, fake.Path, "node-0").Run(context.Background())
	require.NoError(t, err)
	a := byName(obs)["pvc-a"]
	assert.Equal(t, report.StatusDegraded, a.Status)
	assert.Equal(t, "DiskInconsistent", a.Reason)
	assert.Contains(t, a.Message, "drbdsetup")
	assert.Equal(t, 2.0, a.Attributes[report.AttrUpToDateReplicas], "LINSTOR's 3 minus the local copy the kernel says is not UpToDate")
	assert.Equal(t, 3.0, a.Attributes[report.AttrReplicas])
}

func TestDrbdsetupOnly(t *testing.T) {
	fake, err := drbdsetup.Install(t.TempDir())
	require.NoError(t, err)
	sample, err := os.ReadFile("testdata/drbdsetup-status.json")
	require.NoError(t, err)
	require.NoError(t, fake.SetRaw(sample))
	obs, err := New(nil, fake.Path, "node-0").Run(context.Background())
	require.NoError(t, err)
	require.NotEmpty(t, obs)
	for _, o := range obs {
		assert.Equal(t, report.KindResource, o.ResourceRef.Kind)
		assert.Contains(t, o.Message, "DRBD peers")
	}

	require.NoError(t, fake.SetRaw([]byte("<html>not json")))
	_, err = New(nil, fake.Path, "node-0").Run(context.Background())
	require.ErrorContains(t, err, "decode drbdsetup status")

	// Neither LINSTOR nor drbdsetup, and DRBD not loaded: not applicable.
	_, err = New(nil, "", "node-0").Run(context.Background())
	require.ErrorIs(t, err, check.ErrNotApplicable)
	_, err = New(nil, "", "node-0").WithProcRoot(t.TempDir()).Run(context.Background())
	require.ErrorIs(t, err, check.ErrNotApplicable)
}

// A missing tool never hides DRBD state: a configured drbdsetup that is not
// there, or a loaded DRBD module with no source of its state, reads Unknown
// with the fix, never "not applicable".
func TestNoSourceOfDRBDStateIsUnknown(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-drbdsetup")
	_, err := New(nil, missing, "node-0").Run(context.Background())
	var ie *check.InputError
	require.ErrorAs(t, err, &ie)
	assert.Equal(t, report.ReasonInputMissing, ie.Reason)
	assert.Contains(t, ie.Message, missing)
	assert.Contains(t, ie.Message, "--linstor-url")
	assert.NotErrorIs(t, err, check.ErrNotApplicable)

	proc := t.TempDir()
	// DRBD 9's /proc/drbd: the version only, no resources.
	require.NoError(t, os.WriteFile(filepath.Join(proc, "drbd"), []byte("version: 9.2.12 (api:2/proto:86-122)\nGIT-hash: 0000 build by builder, 2024-11-01 00:00:00\nTransports (api:21): tcp (9.2.12)\n"), 0o444))
	_, err = New(nil, "", "node-0").WithProcRoot(proc).Run(context.Background())
	require.ErrorAs(t, err, &ie)
	assert.Equal(t, report.ReasonInputMissing, ie.Reason)
	assert.Contains(t, ie.Message, "DRBD is loaded on this node")
	assert.Contains(t, ie.Message, "agent.sources.linstor.url")

	// With LINSTOR, a missing drbdsetup still leaves LINSTOR's view.
	_, c := cluster(t)
	obs, err := New(c, missing, "node-0").WithProcRoot(proc).Run(context.Background())
	require.NoError(t, err)
	require.NotEmpty(t, obs)
	for _, o := range obs {
		assert.Contains(t, o.Message, "from LINSTOR")
	}
}

// TestDrbdsetupHangs: a stuck drbdsetup is killed at the deadline.
func TestDrbdsetupHangs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "drbdsetup")
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := New(nil, path, "node-0").Run(ctx)
	require.Error(t, err)
	assert.Less(t, time.Since(start), 5*time.Second)
}

func TestParseSample(t *testing.T) {
	b, err := os.ReadFile("testdata/drbdsetup-status.json")
	require.NoError(t, err)
	rs, err := ParseStatus(b)
	require.NoError(t, err)
	require.NotEmpty(t, rs)
	assert.Equal(t, "1-single-0", rs[0].Name)
	assert.Equal(t, "UpToDate", rs[0].Devices[0].DiskState)
	assert.Equal(t, "Connected", rs[0].Connections[0].ConnectionState)
	assert.Equal(t, "UpToDate", rs[0].Connections[0].PeerDevices[0].PeerDiskState)
}

func FuzzParseStatus(f *testing.F) {
	b, err := os.ReadFile("testdata/drbdsetup-status.json")
	require.NoError(f, err)
	f.Add(b)
	f.Add([]byte(`[{"name":"r","devices":[{"disk-state":"Outdated","client":false}],"connections":[]}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := ParseStatus(data)
		if err != nil {
			return
		}
		for _, o := range Judge("n", nil, rs, false) {
			if o.Attributes[report.AttrUpToDateReplicas] > o.Attributes[report.AttrReplicas] {
				t.Fatalf("more UpToDate replicas than replicas: %v", o.Attributes)
			}
		}
	})
}
