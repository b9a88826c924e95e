package linstor

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/agent/internal/check"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/test/sources/fault"
	linstorsrc "github.com/cozystack/cozy-health/test/sources/linstor"
	"github.com/cozystack/cozy-health/test/sources/talos"
)

func TestSatellite(t *testing.T) {
	srv, err := linstorsrc.Start("", nil)
	require.NoError(t, err)
	defer srv.Close()
	srv.SetNode("node-0", "ONLINE")
	srv.SetNode("node-1", "ONLINE")
	c, err := NewClient(ClientConfig{URL: srv.URL})
	require.NoError(t, err)
	chk := NewSatellite(c, "node-0")

	obs, err := chk.Run(context.Background())
	require.NoError(t, err)
	require.Len(t, obs, 1)
	assert.Equal(t, report.StatusHealthy, obs[0].Status)
	assert.Equal(t, "SatelliteOnline", obs[0].Reason)

	srv.SetNode("node-0", "OFFLINE")
	obs, err = chk.Run(context.Background())
	require.NoError(t, err)
	assert.Equal(t, report.StatusDown, obs[0].Status)
	assert.Equal(t, "SatelliteOffline", obs[0].Reason)

	srv.SetNode("node-0", "VERSION_MISMATCH")
	obs, err = chk.Run(context.Background())
	require.NoError(t, err)
	assert.Equal(t, report.StatusDegraded, obs[0].Status)
	assert.Equal(t, "SatelliteVersionMismatch", obs[0].Reason)

	_, err = NewSatellite(c, "node-7").Run(context.Background())
	require.ErrorIs(t, err, check.ErrNotApplicable, "a node LINSTOR does not know has no satellite")
	_, err = NewSatellite(nil, "node-0").Run(context.Background())
	require.ErrorIs(t, err, check.ErrNotApplicable)

	srv.Fault.Set(fault.Garbage)
	_, err = chk.Run(context.Background())
	require.ErrorContains(t, err, "decode linstor")
	assert.NotErrorIs(t, err, check.ErrNotApplicable)
	srv.Fault.Set(fault.Hang)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = chk.Run(ctx)
	require.Error(t, err)
}

// TestMutualTLS: the controller behind HTTPS with client certificates.
func TestMutualTLS(t *testing.T) {
	pki, err := talos.NewPKI([]string{"127.0.0.1"}, []string{"linstor-client"}, time.Hour)
	require.NoError(t, err)
	srv, err := linstorsrc.Start("", pki.ServerTLS())
	require.NoError(t, err)
	defer srv.Close()
	srv.SetNode("node-0", "ONLINE")
	dir := t.TempDir()
	ca, crt, key := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	require.NoError(t, os.WriteFile(ca, pki.CAPEM, 0o600))
	require.NoError(t, os.WriteFile(crt, pki.ClientCertPEM, 0o600))
	require.NoError(t, os.WriteFile(key, pki.ClientKeyPEM, 0o600))

	c, err := NewClient(ClientConfig{URL: srv.URL, CAFile: ca, CertFile: crt, KeyFile: key})
	require.NoError(t, err)
	obs, err := NewSatellite(c, "node-0").Run(context.Background())
	require.NoError(t, err)
	assert.Equal(t, report.StatusHealthy, obs[0].Status)

	// Without a client certificate the handshake fails: Unknown, not absent.
	noCert, err := NewClient(ClientConfig{URL: srv.URL, CAFile: ca})
	require.NoError(t, err)
	_, err = NewSatellite(noCert, "node-0").Run(context.Background())
	require.Error(t, err)
	assert.NotErrorIs(t, err, check.ErrNotApplicable)

	// A CA file that is not mounted: the client is built (the agent runs),
	// the check reads Unknown and says what to mount.
	noCA, err := NewClient(ClientConfig{URL: srv.URL, CAFile: filepath.Join(dir, "missing")})
	require.NoError(t, err)
	_, err = NewSatellite(noCA, "node-0").Run(context.Background())
	var ie *check.InputError
	require.ErrorAs(t, err, &ie)
	assert.Equal(t, report.ReasonInputMissing, ie.Reason)
	assert.Equal(t, "LINSTOR CA "+filepath.Join(dir, "missing")+" not found: "+InputFix, ie.Message)
	// A CA file that holds no certificate is unreadable.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "missing"), []byte("not PEM"), 0o600))
	_, err = NewSatellite(noCA, "node-0").Run(context.Background())
	require.ErrorAs(t, err, &ie)
	assert.Equal(t, report.ReasonInputUnreadable, ie.Reason)

	_, err = NewClient(ClientConfig{URL: srv.URL, CAFile: ca, CertFile: crt})
	require.Error(t, err, "a certificate without its key")
}

func TestParseRealSample(t *testing.T) {
	b, err := os.ReadFile("testdata/linstor-resource-with-volumes.json")
	require.NoError(t, err)
	rs, err := ParseResources(append(append([]byte("["), b...), ']'))
	require.NoError(t, err)
	require.Len(t, rs, 1)
	assert.Equal(t, "pvc-b5be6893-9892-4278-b2da-51a060fc4624", rs[0].Name)
	assert.Equal(t, "demo1.linstor-days.at.linbit.com", rs[0].NodeName)
	require.NotNil(t, rs[0].Volumes[0].State)
	assert.Equal(t, "UpToDate", rs[0].Volumes[0].State.DiskState)
}

func FuzzParseResources(f *testing.F) {
	b, err := os.ReadFile("testdata/linstor-resource-with-volumes.json")
	require.NoError(f, err)
	f.Add(append(append([]byte("["), b...), ']'))
	f.Add([]byte(`[{"name":"r","node_name":"n","flags":["DISKLESS"],"volumes":[{"volume_number":0}]}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := ParseResources(data)
		if err != nil {
			return
		}
		for _, r := range rs {
			for _, v := range r.Volumes {
				if v.State != nil {
					_ = v.State.DiskState
				}
			}
		}
	})
}

func FuzzParseNodes(f *testing.F) {
	f.Add([]byte(`[{"name":"node-0","type":"SATELLITE","connection_status":"ONLINE","flags":[]}]`))
	f.Add([]byte(`[{"name":"node-0","connection_status":"OFFLINE","flags":["EVICTED"]}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ns, err := ParseNodes(data)
		if err != nil {
			return
		}
		for _, n := range ns {
			if o := JudgeNode(n); o.Reason == "" {
				t.Fatal("empty reason")
			}
		}
	})
}
