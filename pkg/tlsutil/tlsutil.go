// Package tlsutil holds the TLS plumbing shared by the agent and the
// aggregator: a serving certificate that is re-read when its files change
// (cert-manager rotates them in place), a client config that verifies against
// one CA file, and a small CA that mints serving certificates for tests and
// the local lab.
package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// reloadCheckEvery bounds how often the cert files are stat'ed.
const reloadCheckEvery = 10 * time.Second

// certReloader serves a key pair and re-reads it when either file's mtime or
// size changes.
type certReloader struct {
	certFile, keyFile string
	// every bounds how often the files are stat'ed.
	every time.Duration

	mu sync.Mutex // guards the fields below
	// cert is the last successfully loaded pair.
	cert *tls.Certificate
	// stamp identifies the files cert was loaded from.
	stamp     string
	checkedAt time.Time
}

func fileStamp(paths ...string) (string, error) {
	s := ""
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("stat %s: %w", p, err)
		}
		s += fmt.Sprintf("%s:%d:%d;", p, fi.ModTime().UnixNano(), fi.Size())
	}
	return s, nil
}

func (r *certReloader) load() error {
	stamp, err := fileStamp(r.certFile, r.keyFile)
	if err != nil {
		return err
	}
	if stamp == r.stamp && r.cert != nil {
		return nil
	}
	c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("load serving key pair: %w", err)
	}
	r.cert, r.stamp = &c, stamp
	return nil
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.checkedAt) >= r.every {
		r.checkedAt = now
		// A half-written rotation keeps serving the previous pair.
		if err := r.load(); err != nil && r.cert == nil {
			return nil, err
		}
	}
	return r.cert, nil
}

// ServerConfig returns a TLS 1.3 server config serving certFile/keyFile,
// re-read when they change on disk, and never once expired (RefuseExpired).
// Both ends of every connection it serves are ours, so nothing older is
// needed. The files must load now.
func ServerConfig(certFile, keyFile string) (*tls.Config, error) {
	return serverConfig(certFile, keyFile, reloadCheckEvery)
}

func serverConfig(certFile, keyFile string, every time.Duration) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("serving certificate and key files are required")
	}
	r := &certReloader{certFile: certFile, keyFile: keyFile, every: every}
	if err := r.load(); err != nil {
		return nil, err
	}
	r.checkedAt = time.Now()
	return &tls.Config{MinVersion: tls.VersionTLS13, GetCertificate: RefuseExpired(r.get, time.Now)}, nil
}

// ErrCertificateExpired is returned by a RefuseExpired GetCertificate when
// the certificate it would serve is outside its validity: the handshake
// fails on the server, with this error in its log, instead of on every
// client.
var ErrCertificateExpired = errors.New("serving certificate is not valid now")

// RefuseExpired wraps get so that a certificate past its NotAfter (or
// before its NotBefore) is never served: the handshake fails with
// ErrCertificateExpired. The leaf is parsed once per certificate.
func RefuseExpired(get func(*tls.ClientHelloInfo) (*tls.Certificate, error), now func() time.Time) func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		c, err := get(hello)
		if err != nil || c == nil {
			return c, err
		}
		leaf := c.Leaf
		if leaf == nil && len(c.Certificate) > 0 {
			if leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
				return nil, fmt.Errorf("parse serving certificate: %w", err)
			}
		}
		if leaf == nil {
			return nil, errors.New("serving certificate has no leaf")
		}
		if t := now(); t.After(leaf.NotAfter) || t.Before(leaf.NotBefore) {
			return nil, fmt.Errorf("%w: valid %s to %s", ErrCertificateExpired,
				leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339))
		}
		return c, nil
	}
}

// ClientConfig returns a TLS 1.3 client config that trusts only the CAs in
// caFile and checks the server's certificate for serverName.
func ClientConfig(caFile, serverName string) (*tls.Config, error) {
	pool, err := LoadCAPool(caFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool, ServerName: serverName}, nil
}

// LoadCAPool reads a PEM bundle into a cert pool.
func LoadCAPool(caFile string) (*x509.CertPool, error) {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", caFile)
	}
	return pool, nil
}
