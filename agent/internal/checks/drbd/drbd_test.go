package drbd

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/test/sources/drbdsetup"
)

func byName(obs []report.Observation) map[string]report.Observation {
	m := map[string]report.Observation{}
	for _, o := range obs {
		m[o.ResourceRef.Name] = o
	}
	return m
}

// TestLocalPeersCount: the kernel's view, with replica counts from the
// peers this node is connected to.
func TestLocalPeersCount(t *testing.T) {
	fake, err := drbdsetup.Install(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, fake.Set([]drbdsetup.Resource{{
		Name: "pvc-a", Role: "Secondary",
		Devices: []drbdsetup.Device{{Volume: 0, Minor: 1000, DiskState: "Inconsistent"}},
		Connections: []drbdsetup.Connection{
			{PeerNodeID: 1, Name: "node-1", ConnectionState: "Connected", PeerDevices: []drbdsetup.PeerDevice{{ReplicationState: "SyncTarget", PeerDiskState: "UpToDate"}}},
			{PeerNodeID: 2, Name: "node-2", ConnectionState: "Connecting"},
		},
	}}))
	obs, err := New(fake.Path, "node-0").Run(context.Background())
	require.NoError(t, err)
	a := byName(obs)["pvc-a"]
	assert.Equal(t, report.StatusDegraded, a.Status)
	assert.Equal(t, "DiskInconsistent", a.Reason)
	assert.Contains(t, a.Message, "drbdsetup")
	assert.Equal(t, 3.0, a.Attributes[report.AttrReplicas])
	assert.Equal(t, 1.0, a.Attributes[report.AttrUpToDateReplicas], "node-1 connected and UpToDate; node-2 not connected")
	assert.Equal(t, 0.0, a.Attributes[report.AttrUpToDate])
}

func TestDrbdsetupOnly(t *testing.T) {
	fake, err := drbdsetup.Install(t.TempDir())
	require.NoError(t, err)
	sample, err := os.ReadFile("testdata/drbdsetup-status.json")
	require.NoError(t, err)
	require.NoError(t, fake.SetRaw(sample))
	obs, err := New(fake.Path, "node-0").Run(context.Background())
	require.NoError(t, err)
	require.NotEmpty(t, obs)
	for _, o := range obs {
		assert.Equal(t, report.KindResource, o.ResourceRef.Kind)
		assert.Contains(t, o.Message, "DRBD peers")
	}

	require.NoError(t, fake.SetRaw([]byte("<html>not json")))
	_, err = New(fake.Path, "node-0").Run(context.Background())
	require.ErrorContains(t, err, "decode drbdsetup status")

	// No drbdsetup configured (the shipped image): the aggregator reads
	// the controller's view; nothing to read here.
	_, err = New("", "node-0").Run(context.Background())
	require.ErrorIs(t, err, checkkit.ErrNotApplicable)
}

// A configured drbdsetup that is not there reads Unknown with the fix,
// never "not applicable".
func TestMissingDrbdsetupIsUnknown(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-drbdsetup")
	_, err := New(missing, "node-0").Run(context.Background())
	var ie *checkkit.InputError
	require.ErrorAs(t, err, &ie)
	assert.Equal(t, report.ReasonInputMissing, ie.Reason)
	assert.Contains(t, ie.Message, missing)
	assert.Contains(t, ie.Message, "aggregator.linstor.url")
	assert.NotErrorIs(t, err, checkkit.ErrNotApplicable)
}

// TestDrbdsetupHangs: a stuck drbdsetup is killed at the deadline.
func TestDrbdsetupHangs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "drbdsetup")
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := New(path, "node-0").Run(ctx)
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
		for _, o := range Judge("n", rs) {
			if o.Attributes[report.AttrUpToDateReplicas] > o.Attributes[report.AttrReplicas] {
				t.Fatalf("more UpToDate replicas than replicas: %v", o.Attributes)
			}
		}
	})
}
