package signing

import (
	"crypto/ed25519"
	"encoding/hex"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Encodings of points (little-endian y, x's sign in the top bit).
var (
	// The base point B.
	encBase = mustHex("5866666666666666666666666666666666666666666666666666666666666666")
	// The identity (0, 1): a small-order A that crypto/ed25519 accepts.
	encIdentity = mustHex("0100000000000000000000000000000000000000000000000000000000000000")
	// The identity again, with y = p+1: a non-canonical encoding.
	encIdentityNonCanonical = mustHex("eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f")
	// y = 2 is on no point of the curve.
	encNotOnCurve = mustHex("0200000000000000000000000000000000000000000000000000000000000000")
	// The order of the base point, little-endian.
	groupOrder, _ = new(big.Int).SetString("7237005577332262213973186563042994240857116359379907606001950938285454250989", 10)
)

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// scalarLE encodes n as 32 little-endian bytes.
func scalarLE(n *big.Int) []byte {
	be := n.FillBytes(make([]byte, 32))
	for i, j := 0, len(be)-1; i < j; i, j = i+1, j-1 {
		be[i], be[j] = be[j], be[i]
	}
	return be
}

// withNonCanonicalS returns sig with S replaced by S + l: the same scalar,
// encoded out of range, which crypto/ed25519 refuses.
func withNonCanonicalS(sig []byte) []byte {
	le := append([]byte(nil), sig[32:]...)
	for i, j := 0, len(le)-1; i < j; i, j = i+1, j-1 {
		le[i], le[j] = le[j], le[i]
	}
	s := new(big.Int).SetBytes(le)
	out := append([]byte(nil), sig[:32]...)
	return append(out, scalarLE(s.Add(s, groupOrder))...)
}

// checkSameAsStdlib fails t unless a VerifyKey made from pub accepts sig
// over msg exactly when crypto/ed25519 does.
func checkSameAsStdlib(t *testing.T, pub, msg, sig []byte) bool {
	t.Helper()
	want := len(pub) == ed25519.PublicKeySize && len(sig) == ed25519.SignatureSize && ed25519.Verify(pub, msg, sig)
	k, err := NewVerifyKey(pub)
	if err != nil {
		require.ErrorIs(t, err, ErrBadPublicKey)
		require.False(t, want, "crypto/ed25519 accepts a signature by public key %x, which NewVerifyKey refuses: %v", pub, err)
		return false
	}
	got := k.Verify(msg, sig) == nil
	require.Equal(t, want, got, "public key %x, signature %x, message %x: crypto/ed25519 says %v", pub, sig, msg, want)
	return got
}

// The edge cases where ed25519 implementations disagree (small-order and
// non-canonical A, non-canonical R and S): each must be decided as
// crypto/ed25519 decides it, and the vectors must cover both outcomes.
func TestVerifyKeyEdgeCasesMatchStdlib(t *testing.T) {
	s, err := Generate()
	require.NoError(t, err)
	msg := []byte("a node report")
	sig := s.Sign(msg)
	one := scalarLE(big.NewInt(1))
	zero := make([]byte, 32)
	cat := func(a, b []byte) []byte { return append(append([]byte(nil), a...), b...) }

	for _, c := range []struct {
		name    string
		pub     []byte
		sig     []byte
		accepts bool
	}{
		{"a genuine signature", s.PublicKey(), sig, true},
		{"S + l", s.PublicKey(), withNonCanonicalS(sig), false},
		{"a bit of R flipped", s.PublicKey(), append([]byte{sig[0] ^ 1}, sig[1:]...), false},
		// A = identity: [S]B - [k]A = B for S = 1 and any message.
		{"small-order A, R = B, S = 1", encIdentity, cat(encBase, one), true},
		{"non-canonical small-order A", encIdentityNonCanonical, cat(encBase, one), true},
		{"small-order A, R = identity, S = 0", encIdentity, cat(encIdentity, zero), true},
		{"non-canonical R", encIdentity, cat(encIdentityNonCanonical, zero), false},
		{"A not on the curve", encNotOnCurve, cat(encBase, one), false},
		{"a 31-byte key", s.PublicKey()[:31], sig, false},
		{"a 63-byte signature", s.PublicKey(), sig[:63], false},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.accepts, checkSameAsStdlib(t, c.pub, msg, c.sig))
		})
	}
}

// Random keys, messages and single-bit or byte edits of genuine
// signatures, decided as crypto/ed25519 decides them.
func TestVerifyKeyRandomMatchesStdlib(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	accepted := 0
	for i := range 500 {
		seed := make([]byte, ed25519.SeedSize)
		for j := range seed {
			seed[j] = byte(r.Uint32())
		}
		priv := ed25519.NewKeyFromSeed(seed)
		msg := make([]byte, r.IntN(4096))
		for j := range msg {
			msg[j] = byte(r.Uint32())
		}
		sig := ed25519.Sign(priv, msg)
		pub := priv.Public().(ed25519.PublicKey)
		switch i % 4 {
		case 1:
			sig[r.IntN(len(sig))] ^= 1 << r.IntN(8)
		case 2:
			sig = withNonCanonicalS(sig)
		case 3:
			msg = append(msg, 0)
		}
		if checkSameAsStdlib(t, pub, msg, sig) {
			accepted++
		}
	}
	assert.Equal(t, 125, accepted, "every unedited signature, and no edited one, verifies")
}

// FuzzVerifyKeyMatchesStdlib: a VerifyKey accepts exactly what
// crypto/ed25519 accepts. With signed set, sig is XORed into a genuine
// signature of msg by the key from seed (an all-zero sig keeps it genuine);
// otherwise sig is used as is. A 32-byte pub replaces the key's public half.
//
//	go test -run '^$' -fuzz FuzzVerifyKeyMatchesStdlib -fuzztime 60s ./pkg/signing/
func FuzzVerifyKeyMatchesStdlib(f *testing.F) {
	seed := make([]byte, ed25519.SeedSize)
	f.Add(seed, []byte("a node report"), []byte(nil), make([]byte, 64), true)
	f.Add(seed, []byte("a node report"), []byte(nil), append(make([]byte, 63), 0x10), true)
	f.Add(seed, []byte{}, encIdentity, append(append([]byte(nil), encBase...), scalarLE(big.NewInt(1))...), false)
	f.Add(seed, []byte{}, encIdentityNonCanonical, append(append([]byte(nil), encIdentityNonCanonical...), make([]byte, 32)...), false)
	f.Add(seed, []byte{}, encNotOnCurve, make([]byte, 64), false)
	f.Fuzz(func(t *testing.T, seed, msg, pub, sig []byte, signed bool) {
		seed = append(seed, make([]byte, ed25519.SeedSize)...)[:ed25519.SeedSize]
		priv := ed25519.NewKeyFromSeed(seed)
		if signed {
			genuine := ed25519.Sign(priv, msg)
			for i := range min(len(sig), len(genuine)) {
				genuine[i] ^= sig[i]
			}
			sig = genuine
		}
		if len(pub) != ed25519.PublicKeySize {
			pub = priv.Public().(ed25519.PublicKey)
		}
		checkSameAsStdlib(t, pub, msg, sig)
	})
}

// NewVerifyKey copies its input: the caller's buffer (a decoded Hello) may
// be reused.
func TestNewVerifyKeyCopies(t *testing.T) {
	s, err := Generate()
	require.NoError(t, err)
	b := append([]byte(nil), s.PublicKey()...)
	k, err := NewVerifyKey(b)
	require.NoError(t, err)
	clear(b)
	assert.Equal(t, s.PublicKey(), k.PublicKey())
	assert.NoError(t, k.Verify([]byte("m"), s.Sign([]byte("m"))))
	assert.ErrorIs(t, k.Verify([]byte("m"), nil), ErrMissingSignature)
}

// BenchmarkVerify compares one report-sized verification by
// crypto/ed25519 with one by a VerifyKey.
//
//	go test -run '^$' -bench Verify ./pkg/signing/
func BenchmarkVerify(b *testing.B) {
	s, err := Generate()
	require.NoError(b, err)
	msg := make([]byte, 3000)
	sig := s.Sign(msg)
	b.Run("crypto-ed25519", func(b *testing.B) {
		for b.Loop() {
			if Verify(s.PublicKey(), msg, sig) != nil {
				b.Fatal("does not verify")
			}
		}
	})
	b.Run("verify-key", func(b *testing.B) {
		k := s.VerifyKey()
		for b.Loop() {
			if k.Verify(msg, sig) != nil {
				b.Fatal("does not verify")
			}
		}
	})
}
