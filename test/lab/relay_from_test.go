package lab

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A per-replica cut (partition-from) swallows the bytes to that replica
// only; the path to the others passes; Heal repairs it and closes the
// connection that lived through it. The argument names a replica by index
// or by its lab name.
func TestUplinkRelayPartitionFrom(t *testing.T) {
	targets := []string{echoServer(t), echoServer(t)}
	var lns []net.Listener
	for range targets {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		lns = append(lns, ln)
	}
	r := startRelay("node-1", lns, func(i int) (string, error) { return targets[i], nil })
	t.Cleanup(r.Close)
	dial := func(i int) net.Conn {
		c, err := net.Dial("tcp", lns[i].Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	to0, to1 := dial(0), dial(1)
	for _, c := range []net.Conn{to0, to1} {
		got, err := roundTrip(c, "hello", 10*time.Second)
		require.NoError(t, err)
		assert.Equal(t, "hello\n", got)
	}
	i, err := replicaIndex("aggregator-1", len(lns))
	require.NoError(t, err)
	assert.Equal(t, 1, r.CutFrom(i), "the one connection to aggregator-1 went dark")
	_, err = roundTrip(to1, "lost", 500*time.Millisecond)
	assert.True(t, errors.Is(err, os.ErrDeadlineExceeded), "cut from replica 1: nothing comes back: %v", err)
	got, err := roundTrip(to0, "still", 10*time.Second)
	require.NoError(t, err, "replica 0 still hears the node")
	assert.Equal(t, "still\n", got)

	assert.Equal(t, 1, r.Heal())
	got, err = roundTrip(dial(1), "again", 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "again\n", got)

	for _, bad := range []string{"2", "aggregator-x", "-1"} {
		_, err := replicaIndex(bad, len(lns))
		assert.Error(t, err, bad)
	}
	i, err = replicaIndex("0", len(lns))
	require.NoError(t, err)
	assert.Zero(t, i)
}
