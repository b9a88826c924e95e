package ciliumagent

import (
	"context"
	"net"
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

// socketPath keeps unix socket paths short (108-byte limit).
func socketPath(t *testing.T) string {
	d, err := os.MkdirTemp("", "cil")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return filepath.Join(d, "cilium.sock")
}

func run(t *testing.T, c *Check, d time.Duration) ([]report.Observation, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return c.Run(ctx)
}

func TestCiliumOverUnixSocket(t *testing.T) {
	sock := socketPath(t)
	srv, err := ciliumsrc.Start(sock)
	require.NoError(t, err)
	defer srv.Close()
	c := New(sock)

	obs, err := run(t, c, 5*time.Second)
	require.NoError(t, err)
	require.Len(t, obs, 1)
	assert.Equal(t, report.StatusHealthy, obs[0].Status)
	assert.Equal(t, "AgentOk", obs[0].Reason)
	assert.Contains(t, obs[0].Message, "1.19.5")

	srv.SetState("ciliumHealth", "Warning", "2 nodes unreachable")
	obs, err = run(t, c, 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, report.StatusDegraded, obs[0].Status)
	assert.Equal(t, "SubsystemNotOk", obs[0].Reason)
	assert.Contains(t, obs[0].Message, "2 nodes unreachable")
	srv.SetState("ciliumHealth", "Ok", "")

	srv.SetState("cilium", "Warning", "Stale status data")
	obs, err = run(t, c, 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, report.StatusDegraded, obs[0].Status)

	srv.Fail("connection refused")
	obs, err = run(t, c, 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, report.StatusDown, obs[0].Status)
	assert.Equal(t, "AgentFailure", obs[0].Reason)
	assert.Contains(t, obs[0].Message, "Container runtime is not ready")

	srv.Recover()
	obs, err = run(t, c, 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, report.StatusHealthy, obs[0].Status)

	srv.Fault.Set(fault.Garbage)
	_, err = run(t, c, 5*time.Second)
	require.ErrorContains(t, err, "decode cilium healthz")

	srv.Fault.Set(fault.Hang)
	start := time.Now()
	_, err = run(t, c, 300*time.Millisecond)
	require.Error(t, err)
	assert.Less(t, time.Since(start), 3*time.Second)

	srv.Fault.Set(fault.Normal)
	srv.Fault.SetDelay(100 * time.Millisecond)
	obs, err = run(t, c, 5*time.Second)
	require.NoError(t, err, "slow but within the deadline")
	assert.Equal(t, report.StatusHealthy, obs[0].Status)
}

func TestCiliumAbsentOrDead(t *testing.T) {
	_, err := New("").Run(context.Background())
	require.ErrorIs(t, err, checkkit.ErrNotApplicable)
	sock := socketPath(t)
	_, err = New(sock).Run(context.Background())
	var ie *checkkit.InputError
	require.ErrorAs(t, err, &ie, "no socket: the mount is missing or Cilium does not run here; Unknown, never omitted")
	assert.Equal(t, report.ReasonInputMissing, ie.Reason)
	assert.Contains(t, ie.Message, "Cilium agent socket "+sock+" not found: mount hostPath /var/run/cilium")

	// A socket file nobody accepts on: the agent is not running.
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	require.NoError(t, ln.Close())
	obs, err := New(sock).Run(context.Background())
	require.NoError(t, err)
	assert.Equal(t, report.StatusDown, obs[0].Status)
	assert.Equal(t, "AgentNotListening", obs[0].Reason)
}

func TestJudgeUnknownState(t *testing.T) {
	o := Judge(&StatusResponse{Cilium: &Status{State: "Disabled"}})
	assert.Equal(t, report.StatusUnknown, o.Status)
	_, err := Parse([]byte(`{"kvstore":{"state":"Ok"}}`))
	require.Error(t, err, "a response without cilium state is rejected")
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"cilium":{"state":"Ok","msg":"1.19.5"},"kvstore":{"state":"Disabled"},"cluster":{"ciliumHealth":{"state":"Warning","msg":"x"}},"kubernetes":{"state":"Ok","k8s-api-versions":["v1"]}}`))
	f.Add([]byte(`{"cilium":{"state":"Failure"}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		sr, err := Parse(b)
		if err != nil {
			return
		}
		o := Judge(sr)
		if o.Reason == "" {
			t.Fatal("empty reason")
		}
	})
}
