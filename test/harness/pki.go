package harness

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/cozystack/cozy-health/pkg/tlsutil"
)

// writeServiceAccountKeys writes the RSA key pair the apiserver signs and
// verifies ServiceAccount tokens with, unless it exists.
func writeServiceAccountKeys(dir string) error {
	keyPath, pubPath := filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if _, err := os.Stat(keyPath); err == nil {
		return nil
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("generate service account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return fmt.Errorf("marshal service account public key: %w", err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return fmt.Errorf("write service account key: %w", err)
	}
	if err := os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		return fmt.Errorf("write service account public key: %w", err)
	}
	return nil
}

// loadOrCreateCA loads name.crt/name.key from dir (a control plane started
// again in the same directory keeps its client CA), or creates them.
func loadOrCreateCA(dir, name string) (*tlsutil.CA, error) {
	crtPath, keyPath := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if crtPEM, err := os.ReadFile(crtPath); err == nil {
		keyPEM, err := os.ReadFile(keyPath)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", keyPath, err)
		}
		ca, err := tlsutil.LoadCA(crtPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("CA %s: %w", name, err)
		}
		return ca, nil
	}
	ca, err := tlsutil.NewCA("cozy-health-harness-"+name, 10*365*24*time.Hour)
	if err != nil {
		return nil, err
	}
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(crtPath, ca.CertPEM, 0o600); err != nil {
		return nil, fmt.Errorf("write CA certificate: %w", err)
	}
	if err := os.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		return nil, fmt.Errorf("write CA key: %w", err)
	}
	return ca, nil
}

// issueClient issues a client certificate valid for a day: the apiserver
// reads the user from CN and the groups from O.
func issueClient(ca *tlsutil.CA, user string, groups []string) (certPEM, keyPEM []byte, err error) {
	if ca == nil {
		return nil, nil, errors.New("issue client certificate: control plane not started")
	}
	return ca.IssueClient(user, groups, 24*time.Hour)
}

// writeKubeconfig writes a one-context kubeconfig. auth keys: "token", or
// "client-certificate-data" and "client-key-data" (base64 PEM).
func writeKubeconfig(path, server string, caPEM []byte, user string, auth map[string]string) error {
	ai := clientcmdapi.NewAuthInfo()
	ai.Token = auth["token"]
	if v := auth["client-certificate-data"]; v != "" {
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return fmt.Errorf("decode client certificate: %w", err)
		}
		ai.ClientCertificateData = b
	}
	if v := auth["client-key-data"]; v != "" {
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return fmt.Errorf("decode client key: %w", err)
		}
		ai.ClientKeyData = b
	}
	cluster := clientcmdapi.NewCluster()
	cluster.Server = server
	cluster.CertificateAuthorityData = caPEM
	kctx := clientcmdapi.NewContext()
	kctx.Cluster = "cozy-health-harness"
	kctx.AuthInfo = user
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cozy-health-harness"] = cluster
	cfg.AuthInfos[user] = ai
	cfg.Contexts["cozy-health-harness"] = kctx
	cfg.CurrentContext = "cozy-health-harness"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
