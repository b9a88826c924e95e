package tlsutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a self-signed certificate authority for tests and the local lab. It
// is never used in a real cluster, where cert-manager or the chart provides
// the serving certificate.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// CertPEM is the CA certificate, what agents pass as --ca-file.
	CertPEM []byte
}

// NewCA creates a CA valid for validity (from one hour ago, to absorb clock
// skew).
func NewCA(commonName string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	return &CA{cert: cert, key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// IssueServing mints a serving certificate for hosts (IP addresses become IP
// SANs, anything else DNS SANs) and returns it and its key as PEM.
func (ca *CA) IssueServing(validity time.Duration, hosts ...string) (certPEM, keyPEM []byte, err error) {
	if len(hosts) == 0 {
		return nil, nil, fmt.Errorf("issue serving certificate: no hosts")
	}
	return ca.Issue(pkix.Name{CommonName: hosts[0]}, hosts, x509.ExtKeyUsageServerAuth, validity)
}

// IssueClient mints a client certificate for commonName with organizations
// (Kubernetes and Talos read groups or roles from them).
func (ca *CA) IssueClient(commonName string, organizations []string, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	return ca.Issue(pkix.Name{CommonName: commonName, Organization: organizations}, nil, x509.ExtKeyUsageClientAuth, validity)
}

// Issue mints a certificate for subject and hosts with one extended key
// usage, valid from one hour ago for validity, and returns it and its key as
// PEM.
func (ca *CA) Issue(subject pkix.Name, hosts []string, usage x509.ExtKeyUsage, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      subject,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("create certificate for %s: %w", subject.CommonName, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("marshal key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// Files are the paths WriteServing wrote.
type Files struct {
	// CAFile is the CA certificate (the agent's --ca-file).
	CAFile string
	// CertFile and KeyFile are the serving pair (the aggregator's --tls-cert
	// and --tls-key).
	CertFile, KeyFile string
}

// WriteServing creates a fresh CA and one serving certificate for hosts
// (for example "127.0.0.1", "localhost") valid for a year, and writes
// ca.crt, tls.crt and tls.key into dir.
func WriteServing(dir string, hosts ...string) (Files, error) {
	ca, err := NewCA("cozy-health dev CA", 365*24*time.Hour)
	if err != nil {
		return Files{}, err
	}
	return ca.WriteServing(dir, 365*24*time.Hour, hosts...)
}

// WriteServing mints a serving certificate for hosts and writes ca.crt,
// tls.crt and tls.key into dir.
func (ca *CA) WriteServing(dir string, validity time.Duration, hosts ...string) (Files, error) {
	certPEM, keyPEM, err := ca.IssueServing(validity, hosts...)
	if err != nil {
		return Files{}, err
	}
	f := Files{CAFile: filepath.Join(dir, "ca.crt"), CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Files{}, fmt.Errorf("create cert dir: %w", err)
	}
	for _, w := range []struct {
		path string
		b    []byte
		mode os.FileMode
	}{{f.CAFile, ca.CertPEM, 0o644}, {f.CertFile, certPEM, 0o644}, {f.KeyFile, keyPEM, 0o600}} {
		if err := os.WriteFile(w.path, w.b, w.mode); err != nil {
			return Files{}, fmt.Errorf("write %s: %w", w.path, err)
		}
	}
	return f, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		// crypto/rand does not fail on supported platforms.
		panic(fmt.Sprintf("read random serial: %v", err))
	}
	return n
}
