package ingest

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/pkg/signing"
)

// TestLatestKeepsTheVerifiedReport: a replica keeps, per node, the key its
// agent's Hello presented and the latest report it accepted, exactly as
// signed; a rejected report (bad signature) never replaces it.
func TestLatestKeepsTheVerifiedReport(t *testing.T) {
	dir, keys := devKeys(t, "cp1")
	ts := startServer(t, Config{InsecureDevKeysDir: dir}, Deps{})
	_, ok := ts.srv.Latest("cp1")
	assert.False(t, ok, "nothing before a hello")
	a, ack, err := connect(t, ts, keys["cp1"], "cp1", "")
	require.NoError(t, err)
	require.True(t, ack.GetAccepted())
	l, ok := ts.srv.Latest("cp1")
	require.True(t, ok)
	assert.Nil(t, l.Report)
	assert.Equal(t, a.instance, l.Instance)
	assert.Equal(t, []byte(keys["cp1"].PublicKey()), l.PublicKey)

	sr1 := a.next(nil)
	require.True(t, a.send(sr1).GetAccepted())
	sr2 := a.next(nil)
	require.True(t, a.send(sr2).GetAccepted())
	bad := a.next(nil)
	bad.Signature[3] ^= 1
	require.False(t, a.send(bad).GetAccepted())

	l, _ = ts.srv.Latest("cp1")
	require.NotNil(t, l.Report)
	assert.Equal(t, uint64(2), l.Sequence)
	assert.Equal(t, sr2.GetPayload(), l.Report.GetPayload())
	require.NoError(t, signing.Verify(l.PublicKey, l.Report.GetPayload(), l.Report.GetSignature()))
}

// TestLatestBytesPerNode measures what the peer table retains per node at
// 5,000 nodes, each with a 20-observation report (about the lab agent's)
// and a pod-bound token of 1 KiB.
func TestLatestBytesPerNode(t *testing.T) {
	const nodes = 5000
	signer, err := signing.Generate()
	require.NoError(t, err)
	token := strings.Repeat("t", 1024)
	var tab latestTable
	var payload int
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	now := time.Now()
	for i := range nodes {
		node := fmt.Sprintf("node-%05d", i)
		sr, err := signer.SignReport(sampleReport(node, "inst", 1, now, 20))
		require.NoError(t, err)
		payload += len(sr.GetPayload())
		// Every agent has its own token.
		tab.hello(node, "inst", signer.KeyID(), signer.PublicKey(), token[:len(token)-len(node)]+node)
		tab.report(node, "inst", signer.KeyID(), sr, 1, now)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / nodes
	t.Logf("latest table at %d nodes: %d bytes retained per node (payload %d bytes, token %d bytes)", nodes, per, payload/nodes, len(token))
	runtime.KeepAlive(&tab)
	assert.Less(t, per, int64(payload/nodes+len(token)+2048), "per-node overhead beyond the signed bytes and the token stays under 2 KiB")
}
