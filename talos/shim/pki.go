package shim

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"

	cryptox509 "github.com/siderolabs/crypto/x509"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
)

// PKI is a throwaway Talos OS CA with one server and one client certificate,
// like the apid certificate and a Talos ServiceAccount's talosconfig.
type PKI struct {
	CAPEM                       []byte
	ServerCert                  tls.Certificate
	ClientCertPEM, ClientKeyPEM []byte

	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
}

// NewPKI issues a CA, a server certificate for hosts (IPs or DNS names) and
// a client certificate carrying roles as its organizations (Talos reads the
// roles from there), valid for ttl.
func NewPKI(hosts []string, roles []string, ttl time.Duration) (*PKI, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "talos-shim-ca"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(ttl),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create CA: %w", err)
	}
	caCert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA: %w", err)
	}
	p := &PKI{CAPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), caCert: caCert, caKey: caKey}

	srvCrt, srvKey, err := p.issue(pkix.Name{CommonName: "apid"}, hosts, x509.ExtKeyUsageServerAuth, ttl)
	if err != nil {
		return nil, err
	}
	if p.ServerCert, err = tls.X509KeyPair(srvCrt, srvKey); err != nil {
		return nil, fmt.Errorf("load server certificate: %w", err)
	}
	if p.ClientCertPEM, p.ClientKeyPEM, err = p.IssueClient(roles, ttl); err != nil {
		return nil, err
	}
	return p, nil
}

// IssueClient issues another client certificate (a rotated one).
func (p *PKI) IssueClient(roles []string, ttl time.Duration) (crtPEM, keyPEM []byte, err error) {
	return p.issue(pkix.Name{CommonName: "cozy-health-agent", Organization: roles}, nil, x509.ExtKeyUsageClientAuth, ttl)
}

func (p *PKI) issue(subject pkix.Name, hosts []string, usage x509.ExtKeyUsage, ttl time.Duration) (crtPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, fmt.Errorf("generate serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      subject,
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(ttl),
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
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("issue certificate: %w", err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("marshal key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), nil
}

// ServerTLS is the server side: the server certificate, client certificates
// required and verified against the CA.
func (p *PKI) ServerTLS() *tls.Config {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.CAPEM)
	return &tls.Config{
		Certificates: []tls.Certificate{p.ServerCert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS12,
	}
}

// Talosconfig renders a talosconfig (context "default", like the Talos
// ServiceAccount's Secret) for endpoints with the given client certificate.
func (p *PKI) Talosconfig(endpoints []string, crtPEM, keyPEM []byte) ([]byte, error) {
	cfg := clientconfig.NewConfig("default", endpoints, p.CAPEM, &cryptox509.PEMEncodedCertificateAndKey{Crt: crtPEM, Key: keyPEM})
	b, err := cfg.Bytes()
	if err != nil {
		return nil, fmt.Errorf("render talosconfig: %w", err)
	}
	return b, nil
}

// WriteTalosconfig writes the talosconfig with the PKI's client certificate.
func (p *PKI) WriteTalosconfig(path string, endpoints []string) error {
	b, err := p.Talosconfig(endpoints, p.ClientCertPEM, p.ClientKeyPEM)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("write talosconfig: %w", err)
	}
	return nil
}
