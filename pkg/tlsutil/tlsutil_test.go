package tlsutil

import (
	"crypto/tls"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestServingCertificateVerifiesOnlyWithItsCA(t *testing.T) {
	f, err := WriteServing(t.TempDir(), "127.0.0.1", "aggregator.cozy-health.svc")
	require.NoError(t, err)
	sc, err := ServerConfig(f.CertFile, f.KeyFile)
	require.NoError(t, err)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", sc)
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			_ = c.Close()
		}
	}()
	dial := func(caFile, name string) error {
		cc, err := ClientConfig(caFile, name)
		require.NoError(t, err)
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), cc)
		if err == nil {
			_ = c.Close()
		}
		return err
	}
	require.NoError(t, dial(f.CAFile, "127.0.0.1"))
	require.NoError(t, dial(f.CAFile, "aggregator.cozy-health.svc"))
	assert.Error(t, dial(f.CAFile, "other.example"))

	other, err := WriteServing(t.TempDir(), "127.0.0.1")
	require.NoError(t, err)
	assert.Error(t, dial(other.CAFile, "127.0.0.1"))
}

func TestServerConfigReloadsRotatedPair(t *testing.T) {
	dir := t.TempDir()
	f, err := WriteServing(dir, "127.0.0.1")
	require.NoError(t, err)
	sc, err := serverConfig(f.CertFile, f.KeyFile, 0)
	require.NoError(t, err)
	c1, err := sc.GetCertificate(nil)
	require.NoError(t, err)

	f2, err := WriteServing(t.TempDir(), "127.0.0.1")
	require.NoError(t, err)
	for _, p := range [][2]string{{f2.CertFile, f.CertFile}, {f2.KeyFile, f.KeyFile}} {
		b, err := os.ReadFile(p[0])
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(p[1], b, 0o600))
	}
	// Force the next handshake to look at the files again.
	future := time.Now().Add(time.Minute)
	require.NoError(t, os.Chtimes(f.CertFile, future, future))
	c2, err := sc.GetCertificate(nil)
	require.NoError(t, err)
	assert.NotEqual(t, c1.Certificate[0], c2.Certificate[0])

	_, err = ServerConfig(f.CertFile, "")
	assert.Error(t, err)
}

func TestCAFileFollowsContentsAndKeepsTheLastGoodBundle(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/ca.crt"
	c := NewCAFile(path)
	p, changed, err := c.Pool()
	assert.Nil(t, p)
	assert.False(t, changed)
	require.ErrorContains(t, err, "read CA file")

	ca1, err := NewCA("one", time.Hour)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, ca1.CertPEM, 0o600))
	p1, changed, err := c.Pool()
	require.NoError(t, err)
	assert.True(t, changed)
	_, changed, err = c.Pool()
	require.NoError(t, err)
	assert.False(t, changed, "same contents: same pool")

	require.NoError(t, os.WriteFile(path, []byte("garbage"), 0o600))
	p, _, err = c.Pool()
	require.ErrorContains(t, err, "holds no PEM certificate")
	assert.Same(t, p1, p, "a broken update keeps the last good bundle")

	ca2, err := NewCA("two", time.Hour)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, append(append([]byte{}, ca1.CertPEM...), ca2.CertPEM...), 0o600))
	p2, changed, err := c.Pool()
	require.NoError(t, err)
	assert.True(t, changed)
	assert.NotSame(t, p1, p2)
}
