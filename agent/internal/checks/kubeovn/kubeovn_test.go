package kubeovn

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/test/sources/fault"
	kubeovnsrc "github.com/cozystack/cozy-health/test/sources/kubeovn"
)

func th() Thresholds { return Thresholds{PingLossDegraded: 0.05, PingLossDown: 0.5} }

func run(t *testing.T, c *Check) report.Observation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	obs, err := c.Run(ctx)
	require.NoError(t, err)
	require.Len(t, obs, 1)
	return obs[0]
}

func TestPingerMetrics(t *testing.T) {
	srv, err := kubeovnsrc.Start("", kubeovnsrc.Config{Node: "node-0", NodeIP: "10.0.0.10", Targets: map[string]string{"node-1": "10.0.0.11", "node-2": "10.0.0.12"}})
	require.NoError(t, err)
	defer srv.Close()
	c := New(srv.URL, "node-0", th())

	srv.Ping(10)
	o := run(t, c)
	assert.Equal(t, report.StatusHealthy, o.Status, o.Message)
	assert.Equal(t, 0.0, o.Attributes[report.AttrNodePingLossRatio])
	assert.Contains(t, o.Message, "ovs up")

	// 30% loss in this interval only: Degraded; the earlier clean pings do
	// not dilute it.
	srv.SetPingLoss(0.3)
	srv.Ping(10)
	o = run(t, c)
	assert.Equal(t, report.StatusDegraded, o.Status, o.Message)
	assert.Equal(t, "NodePingLoss", o.Reason)
	assert.InDelta(t, 0.3, o.Attributes[report.AttrNodePingLossRatio], 1e-9)

	srv.SetPingLoss(1)
	srv.Ping(10)
	o = run(t, c)
	assert.Equal(t, report.StatusDown, o.Status)

	srv.SetPingLoss(0)
	srv.Ping(10)
	srv.SetOVS(false)
	o = run(t, c)
	assert.Equal(t, report.StatusDown, o.Status)
	assert.Equal(t, "OVSDown", o.Reason)
	assert.Contains(t, o.Message, "ovs down")

	srv.SetOVS(true)
	srv.SetOVNController(false)
	o = run(t, c)
	assert.Equal(t, "OVNControllerDown", o.Reason)

	srv.SetOVNController(true)
	srv.SetInconsistentPortBindings(3)
	o = run(t, c)
	assert.Equal(t, report.StatusDegraded, o.Status)
	assert.Equal(t, 3.0, o.Attributes[report.AttrInconsistentPortBindings])

	srv.Fault.Set(fault.Garbage)
	_, err = c.Run(context.Background())
	require.Error(t, err)

	srv.Fault.Set(fault.Hang)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = c.Run(ctx)
	require.Error(t, err)
}

func TestPingerForAnotherNode(t *testing.T) {
	srv, err := kubeovnsrc.Start("", kubeovnsrc.Config{Node: "node-9"})
	require.NoError(t, err)
	defer srv.Close()
	_, err = New(srv.URL, "node-0", th()).Run(context.Background())
	require.ErrorContains(t, err, `no pinger metric for node "node-0"`)
	_, err = New("", "node-0", th()).Run(context.Background())
	require.ErrorIs(t, err, checkkit.ErrNotApplicable)
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("# TYPE pinger_ovs_up gauge\npinger_ovs_up{nodeName=\"n\"} 1\n# TYPE pinger_node_ping_count_total counter\npinger_node_ping_count_total{src_node_name=\"n\",target_node_name=\"m\"} 5\n"), "n")
	f.Add([]byte("pinger_ovs_down 1\n"), "")
	f.Fuzz(func(t *testing.T, b []byte, node string) {
		p, err := Parse(b, node)
		if err != nil {
			return
		}
		r, _ := LossRatio(p, p)
		if r < 0 || r > 1 {
			t.Fatalf("loss ratio %v", r)
		}
	})
}
