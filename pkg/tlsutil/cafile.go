package tlsutil

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
)

// CAFile is a CA bundle file that is read again each time it is used, for
// a client whose trust rotates: the kubelet updates a mounted ConfigMap by
// swapping a symlink, so the path resolves to new contents without the file
// ever changing in place, and a process that read it once would keep the
// old bundle forever. Reading a few KiB per TLS handshake (connections are
// long-lived) costs nothing next to the handshake itself.
type CAFile struct {
	path string

	// mu guards the fields below: the last bundle that parsed, as read.
	mu   sync.Mutex
	raw  []byte
	pool *x509.CertPool
}

// NewCAFile returns a CAFile for path; nothing is read yet.
func NewCAFile(path string) *CAFile { return &CAFile{path: path} }

// Path is the file's path.
func (c *CAFile) Path() string { return c.path }

// Pool reads the file and returns its certificates as a pool. changed is
// true when the contents differ from the last bundle that parsed (and on
// the first success). When the file cannot be read or holds no certificate,
// err says why and pool is the last good bundle (nil if there never was
// one): a broken update does not throw away a trust that worked.
func (c *CAFile) Pool() (pool *x509.CertPool, changed bool, err error) {
	b, rerr := os.ReadFile(c.path)
	c.mu.Lock()
	defer c.mu.Unlock()
	if rerr != nil {
		return c.pool, false, fmt.Errorf("read CA file: %w", rerr)
	}
	if c.pool != nil && bytes.Equal(b, c.raw) {
		return c.pool, false, nil
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return c.pool, false, fmt.Errorf("CA file %s holds no PEM certificate", c.path)
	}
	c.raw, c.pool = b, p
	return p, true, nil
}
