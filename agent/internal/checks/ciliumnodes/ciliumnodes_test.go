package ciliumnodes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/pkg/report"
	ciliumsrc "github.com/cozystack/cozy-health/test/sources/cilium"
	"github.com/cozystack/cozy-health/test/sources/fault"
)

func run(t *testing.T, c *Check) []report.Observation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	obs, err := c.Run(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, obs)
	return obs
}

func TestNodeToNodeThroughCiliumHealth(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "health.sock")
	srv, err := ciliumsrc.StartHealth(sock, "node-1", map[string]string{"node-1": "10.0.0.11", "node-2": "10.0.0.12", "node-3": "10.0.0.13"})
	require.NoError(t, err)
	defer srv.Close()
	c := New(sock, "node-1")

	obs := run(t, c)
	require.Len(t, obs, 1)
	assert.Equal(t, report.StatusHealthy, obs[0].Status)
	assert.Equal(t, ReasonAllNodesReachable, obs[0].Reason)
	assert.Equal(t, 2.0, obs[0].Attributes[report.AttrNodesProbed], "the local node is not counted")
	assert.Nil(t, obs[0].ResourceRef, "the runner pins the summary to this node")

	// node-1 cannot reach node-2: a fact naming both nodes.
	srv.SetUnreachable("node-2", true)
	obs = run(t, c)
	require.Len(t, obs, 2)
	assert.Equal(t, report.StatusDegraded, obs[0].Status)
	assert.Equal(t, ReasonNodesUnreachable, obs[0].Reason)
	assert.Equal(t, 1.0, obs[0].Attributes[report.AttrNodesUnreachable])
	assert.Equal(t, report.ResourceRef{Kind: report.KindNode, Name: "node-2"}, *obs[1].ResourceRef)
	assert.Equal(t, ReasonNodeUnreachable, obs[1].Reason)
	assert.Contains(t, obs[1].Message, "node-1 cannot reach node node-2 (10.0.0.12)")
	assert.Contains(t, obs[1].Message, "4240")

	// Only the pod-network path to node-3 is broken.
	srv.SetEndpointUnreachable("node-3", true)
	obs = run(t, c)
	require.Len(t, obs, 3)
	assert.Equal(t, ReasonHealthEndpointUnreachable, obs[2].Reason)
	assert.Equal(t, "node-3", obs[2].ResourceRef.Name)

	// Reaching none: this node is isolated.
	srv.SetUnreachable("node-3", true)
	obs = run(t, c)
	assert.Equal(t, report.StatusDown, obs[0].Status)
	assert.Equal(t, ReasonNodeIsolated, obs[0].Reason)

	srv.Fault.Set(fault.Garbage)
	_, err = c.Run(context.Background())
	require.Error(t, err)
	srv.Fault.Set(fault.Hang)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = c.Run(ctx)
	require.Error(t, err)

	_, err = New(filepath.Join(t.TempDir(), "none.sock"), "node-1").Run(context.Background())
	require.ErrorIs(t, err, checkkit.ErrNotApplicable)
	_, err = New("", "node-1").Run(context.Background())
	require.ErrorIs(t, err, checkkit.ErrNotApplicable)
}

func TestJudgeEdges(t *testing.T) {
	obs := Judge(&HealthStatusResponse{}, "node-1")
	require.Len(t, obs, 1)
	assert.Equal(t, report.StatusUnknown, obs[0].Status, "no results yet is not a green")

	self := &NodeStatus{Name: "default/node-1", Host: &AddressStatus{PrimaryAddress: &PathStatus{IP: "10.0.0.11", ICMP: &ConnectivityStatus{Latency: 1}}}}
	obs = Judge(&HealthStatusResponse{Local: &SelfStatus{Name: "default/node-1"}, Nodes: []*NodeStatus{self}}, "node-1")
	assert.Equal(t, ReasonNoOtherNodes, obs[0].Reason)

	// Many unreachable nodes: the report stays small.
	st := &HealthStatusResponse{Local: &SelfStatus{Name: "c/node-0"}}
	for i := range 100 {
		st.Nodes = append(st.Nodes, &NodeStatus{Name: fmt.Sprintf("c/node-%03d", i+1),
			Host: &AddressStatus{PrimaryAddress: &PathStatus{IP: "10.0.0.1", HTTP: &ConnectivityStatus{Status: "timeout"}}}})
	}
	st.Nodes = append(st.Nodes, &NodeStatus{Name: "c/ok", Host: &AddressStatus{PrimaryAddress: &PathStatus{HTTP: &ConnectivityStatus{Latency: 5}}}})
	obs = Judge(st, "node-0")
	assert.Len(t, obs, 1+report.MaxUnreachableNodes)
	assert.Equal(t, 100.0, obs[0].Attributes[report.AttrNodesUnreachable])
	assert.Contains(t, obs[0].Message, "and 92 more")
	assert.Equal(t, "ok", NodeName("c/ok"))
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"timestamp":"2026-12-01T07:00:00Z","local":{"name":"default/node-1"},"nodes":[{"name":"default/node-2","host":{"primary-address":{"ip":"10.0.0.12","icmp":{"status":"Connection timed out"},"http":{"latency":1}}}}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := Parse(b)
		if err != nil {
			return
		}
		obs := Judge(st, "node-1")
		if len(obs) == 0 || len(obs) > 1+report.MaxUnreachableNodes {
			t.Fatalf("%d observations", len(obs))
		}
	})
}

// TestUpstreamFixtures is issue 22 item 5: after a cilium-agent restart or a
// node join, cilium-health lists peers it has not probed yet; that is no
// evidence of reachability (Unknown, NoProbeResults), and NoOtherNodes is
// only for a node that lists no other. The payloads come from Cilium's own
// types (testdata/README.md).
func TestUpstreamFixtures(t *testing.T) {
	for file, want := range map[string]struct {
		status          report.Status
		reason          string
		probed          float64
		messageContains string
	}{
		"health-unprobed.json":      {report.StatusUnknown, ReasonNoProbeResults, 0, "lists 2 other nodes but has probed none yet"},
		"health-partly-probed.json": {report.StatusHealthy, ReasonAllNodesReachable, 1, "not probed yet: node-3"},
		"health-alone.json":         {report.StatusHealthy, ReasonNoOtherNodes, 0, "lists no other node"},
		"health-all-probed.json":    {report.StatusHealthy, ReasonAllNodesReachable, 2, "all 2 other nodes reachable"},
	} {
		t.Run(file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", file))
			require.NoError(t, err)
			st, err := Parse(b)
			require.NoError(t, err)
			obs := Judge(st, "node-1")
			require.Len(t, obs, 1)
			assert.Equal(t, want.status, obs[0].Status, obs[0].Message)
			assert.Equal(t, want.reason, obs[0].Reason)
			assert.Equal(t, want.probed, obs[0].Attributes[report.AttrNodesProbed])
			assert.Contains(t, obs[0].Message, want.messageContains)
		})
	}
}
