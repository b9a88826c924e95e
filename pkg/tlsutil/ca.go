package tlsutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// CA is a self-signed certificate authority: the aggregator's own CA in
// --tls-mode=self-signed (kept in its Secret), and throwaway CAs for tests
// and the local lab.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// CertPEM is the CA certificate, what agents pass as --ca-file.
	CertPEM []byte
}

// Backdate is how far before "now" certificates minted here start to be
// valid, to absorb clock skew between the issuer and whoever verifies.
const Backdate = time.Hour

// NewCA creates a CA valid for validity (from Backdate ago, to absorb clock
// skew).
func NewCA(commonName string, validity time.Duration) (*CA, error) {
	now := time.Now()
	return NewCAValid(commonName, now.Add(-Backdate), now.Add(validity))
}

// NewCAValid creates a CA valid from notBefore to notAfter with a fresh
// P-256 key. With permitted hosts (DNS names or IP addresses) it carries
// critical x509 name constraints: it can vouch only for those names (and
// names under them) and those addresses, so its key, if stolen, cannot
// impersonate anything else to a client that trusts it.
func NewCAValid(commonName string, notBefore, notAfter time.Time, permitted ...string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	for _, h := range permitted {
		if ip := net.ParseIP(h); ip != nil {
			bits := 8 * len(ip.To16())
			if ip4 := ip.To4(); ip4 != nil {
				ip, bits = ip4, 32
			}
			tmpl.PermittedIPRanges = append(tmpl.PermittedIPRanges, &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)})
			continue
		}
		tmpl.PermittedDNSDomains = append(tmpl.PermittedDNSDomains, h)
	}
	if len(permitted) > 0 {
		tmpl.PermittedDNSDomainsCritical = true
		if len(tmpl.PermittedDNSDomains) == 0 {
			// Only addresses: no DNS name at all (an empty constraint list
			// would permit every name).
			tmpl.ExcludedDNSDomains = []string{""}
		}
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

// Constrained reports whether c carries name constraints.
func Constrained(c *x509.Certificate) bool {
	return len(c.PermittedDNSDomains) > 0 || len(c.PermittedIPRanges) > 0 || len(c.ExcludedDNSDomains) > 0
}

// Permits reports whether a CA certificate's name constraints allow every
// host (DNS name or IP address); a CA without constraints permits all.
func Permits(c *x509.Certificate, hosts []string) bool {
	if !Constrained(c) {
		return true
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			if len(c.PermittedIPRanges) > 0 && !slices.ContainsFunc(c.PermittedIPRanges, func(n *net.IPNet) bool { return n.Contains(ip) }) {
				return false
			}
			continue
		}
		h = strings.ToLower(strings.TrimSuffix(h, "."))
		if !slices.ContainsFunc(c.PermittedDNSDomains, func(d string) bool {
			d = strings.ToLower(d)
			return d != "" && (h == d || strings.HasSuffix(h, "."+d))
		}) {
			return false
		}
	}
	return true
}

// LoadCA rebuilds a CA from its certificate and EC private key (PEM), as
// KeyPEM wrote it.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	certs, err := ParseCertificates(certPEM)
	if err != nil {
		return nil, err
	}
	if len(certs) != 1 {
		return nil, fmt.Errorf("load CA: want one certificate, got %d", len(certs))
	}
	key, err := ParseECKey(keyPEM)
	if err != nil {
		return nil, err
	}
	if !certs[0].IsCA || !key.PublicKey.Equal(certs[0].PublicKey) {
		return nil, errors.New("load CA: the key does not belong to a CA certificate")
	}
	return &CA{cert: certs[0], key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certs[0].Raw})}, nil
}

// Cert is the CA certificate.
func (ca *CA) Cert() *x509.Certificate { return ca.cert }

// KeyPEM is the CA's private key as an "EC PRIVATE KEY" PEM block.
func (ca *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(ca.key)
	if err != nil {
		return nil, fmt.Errorf("marshal CA key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// ParseCertificates decodes every CERTIFICATE block of a PEM bundle; other
// blocks are skipped. A bundle without any certificate is an error.
func ParseCertificates(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse certificate: %w", err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM certificate")
	}
	return out, nil
}

// EncodeCertificates is the PEM bundle of certs, in order.
func EncodeCertificates(certs []*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return out
}

// ParseECKey decodes an "EC PRIVATE KEY" (SEC 1) or "PRIVATE KEY" (PKCS #8)
// PEM block holding an ECDSA key.
func ParseECKey(b []byte) (*ecdsa.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("parse key: no PEM block")
	}
	if k, err := x509.ParseECPrivateKey(blk.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse key: %w", err)
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("parse key: want an ECDSA key, got %T", k)
	}
	return ek, nil
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
	now := time.Now()
	return ca.IssueValid(subject, hosts, usage, now.Add(-Backdate), now.Add(validity))
}

// IssueValid mints a certificate for subject and hosts (IP addresses become
// IP SANs, anything else DNS SANs) with one extended key usage, valid from
// notBefore to notAfter, and returns it and its fresh P-256 key as PEM.
func (ca *CA) IssueValid(subject pkix.Name, hosts []string, usage x509.ExtKeyUsage, notBefore, notAfter time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      subject,
		NotBefore:    notBefore,
		NotAfter:     notAfter,
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

// FindCA returns the CA of bundle whose public key is keyPEM's: the signing
// CA of a bundle that may hold older and newer CAs beside it.
func FindCA(bundle []*x509.Certificate, keyPEM []byte) (*CA, error) {
	key, err := ParseECKey(keyPEM)
	if err != nil {
		return nil, err
	}
	for _, c := range bundle {
		if c.IsCA && key.PublicKey.Equal(c.PublicKey) {
			return &CA{cert: c, key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})}, nil
		}
	}
	return nil, errors.New("no CA certificate in the bundle matches the key")
}
