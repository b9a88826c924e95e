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

	voied25519 "github.com/oasisprotocol/curve25519-voi/primitives/ed25519"
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
	// ErrBadPublicKey: the public key is not an ed25519 public key (32
	// bytes; for NewVerifyKey, also the encoding of a point on the curve).
	ErrBadPublicKey = errors.New("public key is not an ed25519 public key")
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
	vk    *VerifyKey
	keyID string
}

func newSigner(priv ed25519.PrivateKey, pub ed25519.PublicKey) (*Signer, error) {
	vk, err := NewVerifyKey(pub)
	if err != nil {
		return nil, fmt.Errorf("the key's public half: %w", err)
	}
	return &Signer{priv: priv, pub: pub, vk: vk, keyID: KeyID(pub)}, nil
}

// Generate returns a Signer with a fresh key from crypto/rand. The key lives
// only in memory.
func Generate() (*Signer, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate ed25519 key: %w", err)
	}
	return newSigner(priv, pub)
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
	return newSigner(priv, pub)
}

// PublicKey returns the public half of the key.
func (s *Signer) PublicKey() ed25519.PublicKey { return s.pub }

// KeyID returns the id of the key.
func (s *Signer) KeyID() string { return s.keyID }

// VerifyKey returns the public half of the key expanded for verifying.
func (s *Signer) VerifyKey() *VerifyKey { return s.vk }

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

// Verify checks sig over payload with pub (crypto/ed25519). It never panics
// on malformed input. A stream that verifies many reports with one key uses
// a VerifyKey instead; Verify is what VerifyKey is tested against.
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

// voiStdLib makes curve25519-voi accept exactly what crypto/ed25519
// accepts: cofactorless verification, small-order and non-canonical
// encodings of A allowed, a non-canonical R or S refused.
var voiStdLib = &voied25519.Options{Verify: voied25519.VerifyOptionsStdLib}

// VerifyKey is an ed25519 public key decompressed once, for verifying many
// signatures by it: an ingest stream verifies every report of its agent with
// the key its Hello carried. Each Verify skips the point decompression
// (and the negation) that crypto/ed25519.Verify repeats on every call:
// 29.6 against 39.0 microseconds for a 3 KB report on this project's bench
// machine. It accepts exactly the signatures Verify accepts
// (FuzzVerifyKeyMatchesStdlib). It is safe for concurrent use.
type VerifyKey struct {
	key      ed25519.PublicKey
	expanded *voied25519.ExpandedPublicKey
}

// NewVerifyKey checks that b is an ed25519 public key, a point on the
// curve, and expands it. It copies b. A 32-byte string that is no point
// is refused here (ErrBadPublicKey); crypto/ed25519 would refuse every
// signature by it.
func NewVerifyKey(b []byte) (*VerifyKey, error) {
	if len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%w: %d bytes, want %d", ErrBadPublicKey, len(b), ed25519.PublicKeySize)
	}
	key := ed25519.PublicKey(append([]byte(nil), b...))
	expanded, err := voied25519.NewExpandedPublicKey(voied25519.PublicKey(key))
	if err != nil {
		return nil, fmt.Errorf("%w: no point of the curve: %w", ErrBadPublicKey, err)
	}
	return &VerifyKey{key: key, expanded: expanded}, nil
}

// PublicKey returns the key's 32 bytes; the caller must not modify them.
func (k *VerifyKey) PublicKey() ed25519.PublicKey { return k.key }

// Verify checks sig over payload, with Verify's errors. It never panics
// on malformed input.
func (k *VerifyKey) Verify(payload, sig []byte) error {
	if len(sig) == 0 {
		return ErrMissingSignature
	}
	if len(sig) != ed25519.SignatureSize || !voied25519.VerifyExpandedWithOptions(k.expanded, payload, sig, voiStdLib) {
		return ErrBadSignature
	}
	return nil
}
