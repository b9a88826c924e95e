package lab

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sourcesState is a one-node lab state whose addresses are the given
// ones, with no etcd behind it: the sources start without contacting it.
func sourcesState(t *testing.T, linstor, talos, metrics string) *State {
	t.Helper()
	dir := t.TempDir()
	n := Node{
		Name: "node-1", Talos: talos, Talosconfig: filepath.Join(dir, "talosconfig"),
		EtcdMetrics: "http://" + metrics + "/metrics", LinstorURL: "http://" + linstor,
		CiliumSocket: filepath.Join(dir, "cilium.sock"), CiliumHealth: filepath.Join(dir, "health.sock"),
		OVSRun: filepath.Join(dir, "ovs"), OVNRun: filepath.Join(dir, "ovn"), OVNDBDir: filepath.Join(dir, "ovn-db"),
		EtcdClient: "http://127.0.0.1:1", EtcdRealMetrics: "http://127.0.0.1:1",
	}
	for _, d := range []string{n.OVSRun, n.OVNRun, n.OVNDBDir} {
		require.NoError(t, os.MkdirAll(d, 0o700))
	}
	return &State{Dir: dir, Nodes: []Node{n}}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// TestStartSourcesServesOnHandedListeners: every source serves on the
// listener up bound for its address; none is bound again.
func TestStartSourcesServesOnHandedListeners(t *testing.T) {
	ls := []net.Listener{listen(t), listen(t), listen(t)}
	s := sourcesState(t, ls[0].Addr().String(), ls[1].Addr().String(), ls[2].Addr().String())
	bound := map[string]net.Listener{}
	for _, l := range ls {
		bound[l.Addr().String()] = l
	}
	d, err := startSources(s, bound)
	require.NoError(t, err)
	defer d.stop()
	assert.Empty(t, bound, "every handed listener is used")

	resp, err := http.Get(s.Nodes[0].LinstorURL + "/v1/nodes")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	for _, addr := range []string{s.Nodes[0].Talos, ls[2].Addr().String()} {
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err, "%s accepts on its handed listener", addr)
		_ = conn.Close()
	}
}

// TestStartSourcesReportsTheRealError: a source that cannot start fails
// startSources with its own error (not a panic in the cleanup), and what
// started before it is stopped again.
func TestStartSourcesReportsTheRealError(t *testing.T) {
	taken := listen(t) // another process holds the etcd metrics proxy's port
	ls := []net.Listener{listen(t), listen(t)}
	s := sourcesState(t, ls[0].Addr().String(), ls[1].Addr().String(), taken.Addr().String())
	bound := map[string]net.Listener{}
	for _, l := range ls {
		bound[l.Addr().String()] = l
	}
	d, err := startSources(s, bound)
	require.Error(t, err)
	assert.Nil(t, d)
	assert.ErrorContains(t, err, "start etcd metrics proxy for node-1: listen on "+taken.Addr().String())
	assert.ErrorContains(t, err, "address already in use")

	for _, l := range ls {
		again, err := net.Listen("tcp", l.Addr().String())
		require.NoError(t, err, "a handed listener is closed when startSources fails")
		_ = again.Close()
	}
}
