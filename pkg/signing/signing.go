// Package signing holds the ed25519 keys agents sign node reports with: key
// generation (in memory, a fresh key per agent start), key ids, signing and
// verifying the exact payload bytes, and the PEM key files of the insecure
// development mode.
//
// A signature always covers the serialized NodeReport exactly as it travels in
// SignedReport.payload; the aggregator verifies those bytes before it decodes
// them, so nothing is ever re-serialized between signing and verifying.
package signing

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/wire"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// KeyIDLen is the length of a key id: hex of the first 8 bytes of the
// SHA-256 of the public key.
const KeyIDLen = 16

// Errors returned by Verify; callers map them onto rejection reasons.
var (
	// ErrMissingSignature: the signature is empty.
	ErrMissingSignature = errors.New("signature is missing")
	// ErrBadSignature: the signature does not verify over the payload.
	ErrBadSignature = errors.New("signature does not verify")
	// ErrBadPublicKey: the public key is not an ed25519 public key.
	ErrBadPublicKey = errors.New("public key is not a 32-byte ed25519 key")
)

// KeyID returns the id of a public key: hex of the first 8 bytes of its
// SHA-256.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// Signer signs payloads with one ed25519 private key. It is safe for
// concurrent use.
type Signer struct {
	priv  ed25519.PrivateKey
	pub   ed25519.PublicKey
	keyID string
}

// Generate returns a Signer with a fresh key from crypto/rand. The key lives
// only in memory.
func Generate() (*Signer, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate ed25519 key: %w", err)
	}
	return &Signer{priv: priv, pub: pub, keyID: KeyID(pub)}, nil
}

// NewSigner wraps an existing private key.
func NewSigner(priv ed25519.PrivateKey) (*Signer, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("private key is %d bytes, want %d", len(priv), ed25519.PrivateKeySize)
	}
	pub, ok := priv.Public().(ed25519.PublicKey)
	if !ok {
		return nil, errors.New("private key has no ed25519 public key")
	}
	return &Signer{priv: priv, pub: pub, keyID: KeyID(pub)}, nil
}

// PublicKey returns the public half of the key.
func (s *Signer) PublicKey() ed25519.PublicKey { return s.pub }

// KeyID returns the id of the key.
func (s *Signer) KeyID() string { return s.keyID }

// Sign signs payload as is.
func (s *Signer) Sign(payload []byte) []byte { return ed25519.Sign(s.priv, payload) }

// SignReport serializes r (deterministically) and signs the bytes.
func (s *Signer) SignReport(r *report.NodeReport) (*pb.SignedReport, error) {
	payload, err := proto.MarshalOptions{Deterministic: true}.Marshal(wire.ReportToProto(r))
	if err != nil {
		return nil, fmt.Errorf("marshal report: %w", err)
	}
	return &pb.SignedReport{Payload: payload, KeyId: s.keyID, Signature: s.Sign(payload)}, nil
}

// ParsePublicKey checks that b is an ed25519 public key.
func ParsePublicKey(b []byte) (ed25519.PublicKey, error) {
	if len(b) != ed25519.PublicKeySize {
		return nil, ErrBadPublicKey
	}
	return ed25519.PublicKey(b), nil
}

// Verify checks sig over payload with pub. It never panics on malformed
// input.
func Verify(pub ed25519.PublicKey, payload, sig []byte) error {
	if len(pub) != ed25519.PublicKeySize {
		return ErrBadPublicKey
	}
	if len(sig) == 0 {
		return ErrMissingSignature
	}
	if len(sig) != ed25519.SignatureSize || !ed25519.Verify(pub, payload, sig) {
		return ErrBadSignature
	}
	return nil
}
