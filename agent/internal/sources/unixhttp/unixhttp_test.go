package unixhttp

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGetOverTheSocket: a request goes to the socket whatever the URL's
// host; a socket nobody accepts on is ECONNREFUSED (the checks' "daemon
// not listening"), a missing one ENOENT.
func TestGetOverTheSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "uh") // short: sun_path is 108 bytes
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "api.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Method+" "+r.URL.Path)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	c := New(sock)
	assert.Equal(t, sock, c.Socket())
	body, err := c.Get(context.Background(), "http://anything/v1/healthz")
	require.NoError(t, err)
	assert.Equal(t, "GET /v1/healthz", string(body))

	// A socket file nobody accepts on.
	dead := filepath.Join(dir, "dead.sock")
	l2, err := net.Listen("unix", dead)
	require.NoError(t, err)
	l2.(*net.UnixListener).SetUnlinkOnClose(false)
	require.NoError(t, l2.Close())
	_, err = New(dead).Get(context.Background(), "http://x/")
	assert.True(t, errors.Is(err, syscall.ECONNREFUSED), "%v", err)

	_, err = New(filepath.Join(dir, "missing.sock")).Get(context.Background(), "http://x/")
	assert.True(t, errors.Is(err, syscall.ENOENT), "%v", err)
}
