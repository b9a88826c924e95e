package signing

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The insecure development mode: instead of a fresh in-memory key and a
// pod-bound token, an agent signs with a static key from a PEM file
// (--insecure-dev-key-file), and the aggregator accepts a stream without a
// token when its key is listed in a directory (--insecure-dev-keys-dir) as
// <node>.pub. The file name binds the key to the node. Nothing here is used
// unless one of those flags is given.

// DevPublicKeySuffix is the file suffix of public keys in a dev keys
// directory; the part before it is the node name.
const DevPublicKeySuffix = ".pub"

// DevPrivateKeySuffix is the file suffix WriteDevKeyPair gives private keys.
const DevPrivateKeySuffix = ".key"

// LoadKeyFile reads a PKCS#8 PEM ("PRIVATE KEY") ed25519 private key.
func LoadKeyFile(path string) (*Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read key file: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("key file %s: no PEM PRIVATE KEY block", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse key file %s: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("key file %s: %T is not an ed25519 key", path, k)
	}
	return NewSigner(priv)
}

// LoadPublicKeyFile reads a PKIX PEM ("PUBLIC KEY") ed25519 public key.
func LoadPublicKeyFile(path string) (ed25519.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read public key file: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PUBLIC KEY" {
		return nil, fmt.Errorf("public key file %s: no PEM PUBLIC KEY block", path)
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse public key file %s: %w", path, err)
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("public key file %s: %T is not an ed25519 key", path, k)
	}
	return pub, nil
}

// WriteKeyFile writes s's private key as PKCS#8 PEM with mode 0600.
func WriteKeyFile(path string, s *Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(s.priv)
	if err != nil {
		return fmt.Errorf("marshal private key: %w", err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("write key file: %w", err)
	}
	return nil
}

// WritePublicKeyFile writes pub as PKIX PEM.
func WritePublicKeyFile(path string, pub ed25519.PublicKey) error {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return fmt.Errorf("marshal public key: %w", err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
		return fmt.Errorf("write public key file: %w", err)
	}
	return nil
}

// WriteDevKeyPair generates a key for node and writes dir/<node>.key (for the
// agent's --insecure-dev-key-file) and dir/<node>.pub (read by the
// aggregator's --insecure-dev-keys-dir). It returns the private key's path.
func WriteDevKeyPair(dir, node string) (string, error) {
	if err := validDevNode(node); err != nil {
		return "", err
	}
	s, err := Generate()
	if err != nil {
		return "", err
	}
	priv := filepath.Join(dir, node+DevPrivateKeySuffix)
	if err := WriteKeyFile(priv, s); err != nil {
		return "", err
	}
	if err := WritePublicKeyFile(filepath.Join(dir, node+DevPublicKeySuffix), s.PublicKey()); err != nil {
		return "", err
	}
	return priv, nil
}

// DevKey is a public key listed in a dev keys directory, bound to a node.
type DevKey struct {
	Node      string
	PublicKey ed25519.PublicKey
}

// LoadDevKeysDir reads every <node>.pub in dir and returns them by key id.
// Other files are ignored. A key listed twice is an error.
func LoadDevKeysDir(dir string) (map[string]DevKey, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read dev keys dir: %w", err)
	}
	out := map[string]DevKey{}
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, DevPublicKeySuffix) {
			continue
		}
		node := strings.TrimSuffix(name, DevPublicKeySuffix)
		if err := validDevNode(node); err != nil {
			return nil, err
		}
		pub, err := LoadPublicKeyFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		id := KeyID(pub)
		if prev, dup := out[id]; dup {
			return nil, fmt.Errorf("dev key %s is listed for both %s and %s", id, prev.Node, node)
		}
		out[id] = DevKey{Node: node, PublicKey: pub}
	}
	return out, nil
}

func validDevNode(node string) error {
	if node == "" || strings.ContainsAny(node, `/\`) || node == "." || node == ".." {
		return errors.New("dev key node name must be a non-empty file name")
	}
	return nil
}
