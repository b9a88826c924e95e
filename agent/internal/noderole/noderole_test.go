package noderole

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/test/sources/kubeapi"
)

func TestRole(t *testing.T) {
	srv, err := kubeapi.Start(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	srv.SetNode("cp-1", map[string]string{ControlPlaneLabel: "", "kubernetes.io/hostname": "cp-1"})
	srv.SetNode("worker-1", map[string]string{"kubernetes.io/hostname": "worker-1"})
	tok := filepath.Join(t.TempDir(), "token")
	require.NoError(t, kubeapi.WriteToken(tok))
	ctx := context.Background()
	read := func(node, tokenFile string) (Role, error) {
		r, err := New(Config{Server: srv.URL, TokenFile: tokenFile, CAFile: srv.CAFile, NodeName: node})
		require.NoError(t, err)
		return r.Role(ctx)
	}
	role, err := read("cp-1", tok)
	require.NoError(t, err)
	assert.Equal(t, ControlPlane, role)
	role, err = read("worker-1", tok)
	require.NoError(t, err)
	assert.Equal(t, Worker, role)

	role, err = read("other", tok)
	assert.Equal(t, Unknown, role)
	assert.ErrorContains(t, err, "HTTP 404")
	role, err = read("cp-1", filepath.Join(t.TempDir(), "absent"))
	assert.Equal(t, Unknown, role)
	assert.ErrorContains(t, err, "read token")

	var none *Reader
	role, err = none.Role(ctx)
	assert.Equal(t, Unknown, role)
	assert.Error(t, err)

	// An answer is reused for CacheFor, then read again.
	r, err := New(Config{Server: srv.URL, TokenFile: tok, CAFile: srv.CAFile, NodeName: "cp-1"})
	require.NoError(t, err)
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	before := srv.Gets.Load()
	for range 3 {
		role, err = r.Role(ctx)
		require.NoError(t, err)
		assert.Equal(t, ControlPlane, role)
	}
	assert.Equal(t, before+1, srv.Gets.Load())
	now = now.Add(CacheFor)
	_, err = r.Role(ctx)
	require.NoError(t, err)
	assert.Equal(t, before+2, srv.Gets.Load())
}

func TestServerFromEnv(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	assert.Equal(t, "https://[fd00::1]:443", ServerFromEnv())
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	assert.Equal(t, "", ServerFromEnv())
}
