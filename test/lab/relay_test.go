package lab

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// echoServer answers every line with itself, on loopback.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, msg string, wait time.Duration) (string, error) {
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	return bufio.NewReader(c).ReadString('\n')
}

// The relay passes bytes; cut, it swallows them in both directions
// without closing anything (open and new connections alike); healed, the
// connections that lived through the cut are closed and new ones pass.
func TestUplinkRelayPartition(t *testing.T) {
	target := echoServer(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := startRelay("node-1", []net.Listener{ln}, func(int) (string, error) { return target, nil })
	t.Cleanup(r.Close)
	addr := ln.Addr().String()

	before, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer before.Close()
	got, err := roundTrip(before, "hello", 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "hello\n", got)

	assert.Equal(t, 1, r.Cut(), "one open connection went dark")
	_, err = roundTrip(before, "lost", 500*time.Millisecond)
	assert.True(t, errors.Is(err, os.ErrDeadlineExceeded), "cut: nothing comes back and nothing closes: %v", err)
	during, err := net.Dial("tcp", addr)
	require.NoError(t, err, "a dial into the wall is accepted by the kernel")
	defer during.Close()
	_, err = roundTrip(during, "into the wall", 500*time.Millisecond)
	assert.True(t, errors.Is(err, os.ErrDeadlineExceeded), "cut: a new connection passes nothing: %v", err)

	assert.Equal(t, 2, r.Heal(), "both connections that lived through the cut are closed")
	_, err = roundTrip(before, "after", 10*time.Second)
	assert.Error(t, err)
	assert.False(t, errors.Is(err, os.ErrDeadlineExceeded), "closed, not silent: %v", err)
	after, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer after.Close()
	got, err = roundTrip(after, "again", 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "again\n", got)
}
