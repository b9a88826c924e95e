package uplink

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/cozystack/cozy-health/pkg/tlsutil"
	"github.com/cozystack/cozy-health/test/volume"
)

// TestCABundleReloadedForNewConnections: the agent's --ca-file is a mounted
// ConfigMap the kubelet updates by swapping a symlink. A replica that comes
// back serving a certificate of a new CA is refused while the bundle holds
// only the old CA, and accepted as soon as the bundle holds both, with no
// restart of the agent. An open stream is not touched by a bundle change:
// the bundle is read for handshakes only.
func TestCABundleReloadedForNewConnections(t *testing.T) {
	l := newLab(t) // CA 1 and its serving files
	ca2, err := tlsutil.NewCA("cozy-health CA 2", time.Hour)
	require.NoError(t, err)
	files2, err := ca2.WriteServing(t.TempDir(), time.Hour, "127.0.0.1")
	require.NoError(t, err)
	ca1, err := os.ReadFile(l.files.CAFile)
	require.NoError(t, err)

	caDir := filepath.Join(t.TempDir(), "aggregator-ca")
	require.NoError(t, volume.Write(caDir, map[string][]byte{"ca.crt": ca1}))
	r := startReplica(t, l.files, "--insecure-dev-keys-dir", l.keysDir)
	u, err := New(Config{
		Aggregators: []string{r.addr}, CAFile: filepath.Join(caDir, "ca.crt"), NodeName: "cp1", InsecureDevKeyFile: l.keyFile,
		BackoffInitial: 100 * time.Millisecond, BackoffMax: 300 * time.Millisecond, AckTimeout: 2 * time.Second,
		ResolveInterval: time.Second, Registerer: prometheus.NewRegistry(),
	}, zaptest.NewLogger(t))
	require.NoError(t, err)
	runUplink(t, u)
	publish(t, u, 100*time.Millisecond)
	require.Eventually(t, func() bool { return len(r.reports()) >= 3 }, 30*time.Second, 50*time.Millisecond)

	// The bundle now trusts only CA 2: the open stream keeps delivering.
	require.NoError(t, volume.Write(caDir, map[string][]byte{"ca.crt": ca2.CertPEM}))
	seq := r.maxSeq()
	require.Eventually(t, func() bool { return r.maxSeq() >= seq+5 }, 10*time.Second, 50*time.Millisecond, "the open stream is not torn down by a bundle change")

	// Back to CA 1 only; the replica restarts serving a CA 2 certificate:
	// every handshake fails (unknown authority).
	require.NoError(t, volume.Write(caDir, map[string][]byte{"ca.crt": ca1}))
	r.kill()
	r.args = []string{"--listen", r.addr, "--tls-cert", files2.CertFile, "--tls-key", files2.KeyFile, "--insecure-dev-keys-dir", l.keysDir}
	r.start()
	before := r.maxSeq()
	time.Sleep(2 * time.Second) // several reconnect attempts at a 300 ms backoff
	assert.Equal(t, before, r.maxSeq(), "a certificate of a CA outside the bundle is refused")
	assert.False(t, u.Streams()[r.addr].Connected)

	// The aggregator publishes old+new; the kubelet swaps the volume: the
	// next attempt verifies with the new bundle.
	require.NoError(t, volume.Write(caDir, map[string][]byte{"ca.crt": append(append([]byte{}, ca1...), ca2.CertPEM...)}))
	require.Eventually(t, func() bool { return r.maxSeq() > before }, 10*time.Second, 50*time.Millisecond, "connected with the reloaded bundle, no restart")
	assert.True(t, u.Streams()[r.addr].Connected)
}

// TestCABundleMissingAtStart: an agent whose CA ConfigMap is not there yet
// starts (New succeeds), fails its connections, and connects once it appears.
func TestCABundleMissingAtStart(t *testing.T) {
	l := newLab(t)
	r := l.replica(t)
	caDir := filepath.Join(t.TempDir(), "aggregator-ca")
	u, err := New(Config{
		Aggregators: []string{r.addr}, CAFile: filepath.Join(caDir, "ca.crt"), NodeName: "cp1", InsecureDevKeyFile: l.keyFile,
		BackoffInitial: 100 * time.Millisecond, BackoffMax: 300 * time.Millisecond, ResolveInterval: time.Second,
	}, zaptest.NewLogger(t))
	require.NoError(t, err)
	runUplink(t, u)
	publish(t, u, 100*time.Millisecond)
	time.Sleep(time.Second)
	assert.Empty(t, r.reports())
	ca, err := os.ReadFile(l.files.CAFile)
	require.NoError(t, err)
	require.NoError(t, volume.Write(caDir, map[string][]byte{"ca.crt": ca}))
	require.Eventually(t, func() bool { return len(r.reports()) > 0 }, 10*time.Second, 50*time.Millisecond)
}
