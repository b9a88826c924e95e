package uplink

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/cozystack/cozy-health/pkg/tlsutil"
	"github.com/cozystack/cozy-health/test/harness"
)

// writeToken replaces the token file the way the kubelet does: a new file
// renamed over the old one.
func writeToken(t *testing.T, path, token string) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(token+"\n"), 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

// TestTokenFileIsReReadOnReconnect runs the production path: a fresh
// in-memory key, a real pod-bound token checked by a real TokenReview, and a
// token file that changes under the agent.
func TestTokenFileIsReReadOnReconnect(t *testing.T) {
	cp := harness.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns, sa = "cozy-health", "cozy-health-agent"
	require.NoError(t, cp.CreateServiceAccount(ctx, ns, sa))
	require.NoError(t, cp.CreateServiceAccount(ctx, ns, "other"))
	_, err := cp.CreateNodeAndPod(ctx, "cp1", ns, "agent-cp1", sa)
	require.NoError(t, err)
	_, err = cp.CreateNodeAndPod(ctx, "cp1", ns, "other-cp1", "other")
	require.NoError(t, err)
	aud := []string{"health.cozystack.io"}
	good, err := cp.PodBoundToken(ctx, ns, sa, "agent-cp1", aud, 10*time.Minute)
	require.NoError(t, err)
	wrong, err := cp.PodBoundToken(ctx, ns, "other", "other-cp1", aud, 10*time.Minute)
	require.NoError(t, err)

	files, err := tlsutil.WriteServing(t.TempDir(), "127.0.0.1")
	require.NoError(t, err)
	r := startReplica(t, files, "--kubeconfig", cp.Kubeconfig)
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeToken(t, tokenFile, wrong)
	u, err := New(Config{
		Aggregators: []string{r.addr}, CAFile: files.CAFile, TokenFile: tokenFile, NodeName: "cp1",
		BackoffInitial: 100 * time.Millisecond, BackoffMax: 300 * time.Millisecond, AckTimeout: 2 * time.Second,
	}, zaptest.NewLogger(t))
	require.NoError(t, err)
	runUplink(t, u)
	publish(t, u, 100*time.Millisecond)

	time.Sleep(2 * time.Second)
	assert.Empty(t, r.reports(), "another ServiceAccount's token gets nothing in")
	assert.False(t, u.Streams()[r.addr].Connected)

	writeToken(t, tokenFile, good)
	require.Eventually(t, func() bool { return len(r.reports()) >= 3 }, 30*time.Second, 50*time.Millisecond,
		"the rotated token is read on the next attempt")
	assert.True(t, u.Streams()[r.addr].Connected)
	for _, a := range r.reports() {
		assert.Equal(t, "cp1", a.Node)
	}

	// Back to the wrong token: the open stream is not affected, but the next
	// connection reads the file again and is refused.
	writeToken(t, tokenFile, wrong)
	r.kill()
	before := len(r.reports())
	r.start()
	time.Sleep(3 * time.Second)
	assert.Len(t, r.reports(), before, "nothing accepted after the restart")
	assert.False(t, u.Streams()[r.addr].Connected)
}
