package tlsutil

import (
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// serve serves sc on loopback, handshaking every connection.
func serve(t *testing.T, sc *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", sc)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
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
	return ln.Addr().String()
}

// TestExpiredCertificateIsNotServed: a serving certificate past its
// NotAfter fails the handshake on the server, whatever the client would
// accept. Before, it was served.
func TestExpiredCertificateIsNotServed(t *testing.T) {
	ca, err := NewCA("test", time.Hour)
	require.NoError(t, err)
	dir := t.TempDir()
	f, err := ca.WriteServing(dir, time.Hour, "127.0.0.1")
	require.NoError(t, err)
	sc, err := ServerConfig(f.CertFile, f.KeyFile)
	require.NoError(t, err)
	// The clock of the server moved past the certificate's NotAfter.
	pair, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	require.NoError(t, err)
	sc.GetCertificate = RefuseExpired(func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &pair, nil },
		func() time.Time { return time.Now().Add(2 * time.Hour) })
	addr := serve(t, sc)
	cc, err := ClientConfig(f.CAFile, "127.0.0.1")
	require.NoError(t, err)
	cc.InsecureSkipVerify = true // the client would take anything: the server must refuse
	_, err = tls.Dial("tcp", addr, cc)
	require.Error(t, err)

	// Within its validity it is served.
	sc2, err := ServerConfig(f.CertFile, f.KeyFile)
	require.NoError(t, err)
	c, err := tls.Dial("tcp", serve(t, sc2), cc)
	require.NoError(t, err)
	_ = c.Close()
}

// TestOnlyTLS13: both ends are ours; a TLS 1.2 client is refused.
func TestOnlyTLS13(t *testing.T) {
	f, err := WriteServing(t.TempDir(), "127.0.0.1")
	require.NoError(t, err)
	sc, err := ServerConfig(f.CertFile, f.KeyFile)
	require.NoError(t, err)
	addr := serve(t, sc)
	cc, err := ClientConfig(f.CAFile, "127.0.0.1")
	require.NoError(t, err)
	assert.Equal(t, uint16(tls.VersionTLS13), cc.MinVersion)
	old := cc.Clone()
	old.MinVersion, old.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
	_, err = tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, old)
	require.Error(t, err)
	c, err := tls.Dial("tcp", addr, cc)
	require.NoError(t, err)
	assert.Equal(t, uint16(tls.VersionTLS13), c.ConnectionState().Version)
	_ = c.Close()
}
