package machined

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"os"
	"time"

	cryptox509 "github.com/siderolabs/crypto/x509"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"

	"github.com/cozystack/cozy-health/pkg/tlsutil"
)

// PKI is a throwaway Talos OS CA with one server and one client certificate,
// like the apid certificate and a Talos ServiceAccount's talosconfig.
type PKI struct {
	CAPEM                       []byte
	ServerCert                  tls.Certificate
	ClientCertPEM, ClientKeyPEM []byte

	ca *tlsutil.CA
}

// NewPKI issues a CA, a server certificate for hosts (IPs or DNS names) and
// a client certificate carrying roles as its organizations (Talos reads the
// roles from there), valid for ttl.
func NewPKI(hosts []string, roles []string, ttl time.Duration) (*PKI, error) {
	ca, err := tlsutil.NewCA("talos-shim-ca", ttl)
	if err != nil {
		return nil, err
	}
	p := &PKI{CAPEM: ca.CertPEM, ca: ca}
	srvCrt, srvKey, err := ca.Issue(pkix.Name{CommonName: "apid"}, hosts, x509.ExtKeyUsageServerAuth, ttl)
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
	return p.ca.IssueClient("cozy-health-agent", roles, ttl)
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
