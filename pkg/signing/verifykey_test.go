package signing

import (
	"compress/gzip"
	"crypto/ed25519"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"math/big"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/oasisprotocol/curve25519-voi/curve"
	"github.com/oasisprotocol/curve25519-voi/curve/scalar"
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
	// A point of order 8.
	encOrder8 = mustHex("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a")
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

// zip215Oracle decides (pub, msg, sig) by ZIP-215 written out from the
// spec (https://zips.z.cash/zip-0215) on voi's curve arithmetic, not its
// ed25519 package: A and R decode from any encoding of a point (canonical
// or not), S must be below l, k = SHA-512(R || A || msg) mod l, and
// [8]([S]B - [k]A - R) must be the identity.
func zip215Oracle(pub, msg, sig []byte) bool {
	if len(pub) != 32 || len(sig) != 64 {
		return false
	}
	var aEnc, rEnc curve.CompressedEdwardsY
	var A, R curve.EdwardsPoint
	if _, err := aEnc.SetBytes(pub); err != nil {
		return false
	}
	if _, err := A.SetCompressedY(&aEnc); err != nil {
		return false
	}
	if _, err := rEnc.SetBytes(sig[:32]); err != nil {
		return false
	}
	if _, err := R.SetCompressedY(&rEnc); err != nil {
		return false
	}
	var S, k scalar.Scalar
	if _, err := S.SetCanonicalBytes(sig[32:]); err != nil {
		return false
	}
	h := sha512.New()
	h.Write(sig[:32])
	h.Write(pub)
	h.Write(msg)
	if _, err := k.SetBytesModOrderWide(h.Sum(nil)); err != nil {
		panic(err)
	}
	var sB, kA, d curve.EdwardsPoint
	sB.MulBasepoint(curve.ED25519_BASEPOINT_TABLE, &S)
	kA.Mul(&A, &k)
	d.Sub(&sB, &kA)
	d.Sub(&d, &R)
	d.MulByCofactor(&d)
	return d.IsIdentity()
}

// smallOrderPart reports whether pub or sig's R has a component of small
// order or R is encoded non-canonically: the only ways a signature can
// pass ZIP-215 and fail crypto/ed25519 (zip215's comment).
func smallOrderPart(pub, sig []byte) bool {
	var aEnc, rEnc curve.CompressedEdwardsY
	var A, R curve.EdwardsPoint
	if _, err := aEnc.SetBytes(pub); err != nil {
		return false
	}
	if _, err := A.SetCompressedY(&aEnc); err != nil {
		return false
	}
	if _, err := rEnc.SetBytes(sig[:32]); err != nil {
		return false
	}
	if _, err := R.SetCompressedY(&rEnc); err != nil {
		return false
	}
	return !rEnc.IsCanonicalVartime() || !A.IsTorsionFree() || !R.IsTorsionFree()
}

// checkZIP215 fails t unless Verify and a VerifyKey made from pub decide
// sig over msg as ZIP-215 does (zip215Oracle), and that decision relates to
// crypto/ed25519's as zip215's comment states: everything crypto/ed25519
// accepts is accepted, and what it refuses and ZIP-215 accepts has a
// small-order component or a non-canonical R. It returns the decision.
func checkZIP215(t testing.TB, pub, msg, sig []byte) bool {
	t.Helper()
	want := zip215Oracle(pub, msg, sig)
	std := len(pub) == ed25519.PublicKeySize && len(sig) == ed25519.SignatureSize && ed25519.Verify(pub, msg, sig)
	if std && !want {
		t.Fatalf("crypto/ed25519 accepts what ZIP-215 refuses: public key %x, signature %x, message %x", pub, sig, msg)
	}
	if want && !std && !smallOrderPart(pub, sig) {
		t.Fatalf("ZIP-215 accepts without a small-order part what crypto/ed25519 refuses: public key %x, signature %x, message %x", pub, sig, msg)
	}
	if got := Verify(pub, msg, sig) == nil; got != want {
		t.Fatalf("Verify says %v, ZIP-215 %v: public key %x, signature %x, message %x", got, want, pub, sig, msg)
	}
	k, err := NewVerifyKey(pub)
	if err != nil {
		require.ErrorIs(t, err, ErrBadPublicKey)
		require.False(t, want, "ZIP-215 accepts a signature by public key %x, which NewVerifyKey refuses: %v", pub, err)
		return false
	}
	got := k.Verify(msg, sig) == nil
	require.Equal(t, want, got, "public key %x, signature %x, message %x: ZIP-215 says %v", pub, sig, msg, want)
	return got
}

// torsionedR signs msg with the key from seed as an honest signer would,
// except that R = [r]B + T for T of order 8: [S]B - [k]A - R = -T, so the
// cofactored equation holds and the cofactorless one does not. Only the
// key's holder can make it.
func torsionedR(seed, msg []byte) (pub, sig []byte) {
	digest := sha512.Sum512(seed)
	digest[0] &= 248
	digest[31] &= 127
	digest[31] |= 64
	var a, r, k, s scalar.Scalar
	if _, err := a.SetBits(digest[:32]); err != nil {
		panic(err)
	}
	var A, R, T curve.EdwardsPoint
	A.MulBasepoint(curve.ED25519_BASEPOINT_TABLE, &a)
	var aEnc, rEnc, tEnc curve.CompressedEdwardsY
	aEnc.SetEdwardsPoint(&A)
	rb := sha512.Sum512(append(append([]byte(nil), digest[32:]...), msg...))
	if _, err := r.SetBytesModOrderWide(rb[:]); err != nil {
		panic(err)
	}
	if _, err := tEnc.SetBytes(encOrder8); err != nil {
		panic(err)
	}
	if _, err := T.SetCompressedY(&tEnc); err != nil {
		panic(err)
	}
	R.MulBasepoint(curve.ED25519_BASEPOINT_TABLE, &r)
	R.Add(&R, &T)
	rEnc.SetEdwardsPoint(&R)
	h := sha512.New()
	h.Write(rEnc[:])
	h.Write(aEnc[:])
	h.Write(msg)
	if _, err := k.SetBytesModOrderWide(h.Sum(nil)); err != nil {
		panic(err)
	}
	s.Mul(&k, &a)
	s.Add(&s, &r)
	sig = append([]byte(nil), rEnc[:]...)
	sb := make([]byte, 32)
	if err := s.ToBytes(sb); err != nil {
		panic(err)
	}
	return append([]byte(nil), aEnc[:]...), append(sig, sb...)
}

// edgeCase is a crafted (key, message, signature) and how crypto/ed25519
// and ZIP-215 decide it.
type edgeCase struct {
	name        string
	pub, sig    []byte
	msg         []byte
	std, zip215 bool
}

// edgeCases are the inputs where ed25519 implementations disagree
// (small-order and non-canonical A and R, torsion components,
// non-canonical S), with the expected decisions.
func edgeCases(t testing.TB) []edgeCase {
	s, err := NewSigner(ed25519.NewKeyFromSeed(make([]byte, 32)))
	require.NoError(t, err)
	msg := []byte("a node report")
	sig := s.Sign(msg)
	one := scalarLE(big.NewInt(1))
	zero := make([]byte, 32)
	cat := func(a, b []byte) []byte { return append(append([]byte(nil), a...), b...) }
	// A of order 8, R = B, S = 1: [S]B - [k]A - R = -[k]A, of order 8
	// unless 8 divides k. A message where it does not:
	var order8Msg []byte
	for i := 0; ; i++ {
		order8Msg = []byte{byte(i)}
		if !ed25519.Verify(encOrder8, order8Msg, cat(encBase, one)) {
			break
		}
	}
	tPub, tSig := torsionedR(make([]byte, 32), msg)
	return []edgeCase{
		{"a genuine signature", s.PublicKey(), sig, msg, true, true},
		{"S + l", s.PublicKey(), withNonCanonicalS(sig), msg, false, false},
		{"a bit of R flipped", s.PublicKey(), append([]byte{sig[0] ^ 1}, sig[1:]...), msg, false, false},
		{"another message", s.PublicKey(), sig, []byte("another report"), false, false},
		// A = identity: [S]B - [k]A = B for S = 1 and any message.
		{"small-order A, R = B, S = 1", encIdentity, cat(encBase, one), msg, true, true},
		{"non-canonical small-order A", encIdentityNonCanonical, cat(encBase, one), msg, true, true},
		{"small-order A, R = identity, S = 0", encIdentity, cat(encIdentity, zero), msg, true, true},
		{"non-canonical R", encIdentity, cat(encIdentityNonCanonical, zero), msg, false, true},
		{"A of order 8, [S]B - [k]A - R of order 8", encOrder8, cat(encBase, one), order8Msg, false, true},
		{"an honest key, R with a component of order 8", tPub, tSig, msg, false, true},
		{"A not on the curve", encNotOnCurve, cat(encBase, one), msg, false, false},
		{"a 31-byte key", s.PublicKey()[:31], sig, msg, false, false},
		{"a 63-byte signature", s.PublicKey(), sig[:63], msg, false, false},
	}
}

// The edge cases where ed25519 implementations disagree: each is decided
// by ZIP-215, and crypto/ed25519's decision relates to it as zip215's
// comment states.
func TestVerifyKeyEdgeCasesZIP215(t *testing.T) {
	for _, c := range edgeCases(t) {
		t.Run(c.name, func(t *testing.T) {
			std := len(c.pub) == ed25519.PublicKeySize && len(c.sig) == ed25519.SignatureSize && ed25519.Verify(c.pub, c.msg, c.sig)
			assert.Equal(t, c.std, std, "crypto/ed25519")
			assert.Equal(t, c.zip215, checkZIP215(t, c.pub, c.msg, c.sig), "ZIP-215")
		})
	}
}

// zip215Vectors are Zcash's ZIP-215 test vectors (every combination of
// small-order, canonically and non-canonically encoded A and R, over the
// message "Zcash"), from curve25519-voi
// v0.0.0-20230904125328-1f23a7beb09a, primitives/ed25519/testdata/zip215.json.gz.
// ZIP-215 accepts every one.
func zip215Vectors(t testing.TB) (pubs, sigs [][]byte) {
	f, err := os.Open("testdata/zip215.json.gz")
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	var vs [][2]string
	require.NoError(t, json.NewDecoder(zr).Decode(&vs))
	for _, v := range vs {
		pubs = append(pubs, mustHex(v[0]))
		sigs = append(sigs, mustHex(v[1]))
	}
	return pubs, sigs
}

func TestZIP215Vectors(t *testing.T) {
	pubs, sigs := zip215Vectors(t)
	require.Len(t, pubs, 196)
	std := 0
	for i := range pubs {
		assert.True(t, checkZIP215(t, pubs[i], []byte("Zcash"), sigs[i]), "vector %d", i)
		if ed25519.Verify(pubs[i], []byte("Zcash"), sigs[i]) {
			std++
		}
	}
	t.Logf("crypto/ed25519 accepts %d of the %d vectors", std, len(pubs))
}

// Random keys, messages and single-bit or byte edits of genuine
// signatures: ZIP-215 and crypto/ed25519 agree on all of them (no
// small-order part).
func TestVerifyKeyRandomZIP215(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	accepted := 0
	for i := range 500 {
		pub, msg, sig := randomEntry(r, i)
		got := checkZIP215(t, pub, msg, sig)
		require.Equal(t, ed25519.Verify(pub, msg, sig), got)
		if got {
			accepted++
		}
	}
	assert.Equal(t, 125, accepted, "every unedited signature, and no edited one, verifies")
}

// randomEntry is a random key and message and a genuine signature, edited
// for i%4 != 0: a flipped bit, S + l, a changed message.
func randomEntry(r *rand.Rand, i int) (pub, msg, sig []byte) {
	seed := make([]byte, ed25519.SeedSize)
	for j := range seed {
		seed[j] = byte(r.Uint32())
	}
	priv := ed25519.NewKeyFromSeed(seed)
	msg = make([]byte, r.IntN(4096))
	for j := range msg {
		msg[j] = byte(r.Uint32())
	}
	sig = ed25519.Sign(priv, msg)
	switch i % 4 {
	case 1:
		sig[r.IntN(len(sig))] ^= 1 << r.IntN(8)
	case 2:
		sig = withNonCanonicalS(sig)
	case 3:
		msg = append(msg, 0)
	}
	return priv.Public().(ed25519.PublicKey), msg, sig
}

// FuzzVerifyKeyZIP215: Verify and a VerifyKey decide as ZIP-215 does, and
// accept everything crypto/ed25519 accepts. With signed set, sig is XORed
// into a genuine signature of msg by the key from seed (an all-zero sig
// keeps it genuine); otherwise sig is used as is. A 32-byte pub replaces
// the key's public half.
//
//	go test -run '^$' -fuzz FuzzVerifyKeyZIP215 -fuzztime 60s ./pkg/signing/
func FuzzVerifyKeyZIP215(f *testing.F) {
	addFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, seed, msg, pub, sig []byte, signed bool) {
		pub, sig = fuzzEntry(seed, msg, pub, sig, signed)
		checkZIP215(t, pub, msg, sig)
	})
}

func addFuzzSeeds(f *testing.F) {
	seed := make([]byte, ed25519.SeedSize)
	f.Add(seed, []byte("a node report"), []byte(nil), make([]byte, 64), true)
	f.Add(seed, []byte("a node report"), []byte(nil), append(make([]byte, 63), 0x10), true)
	f.Add(seed, []byte{}, encIdentity, append(append([]byte(nil), encBase...), scalarLE(big.NewInt(1))...), false)
	f.Add(seed, []byte{}, encIdentityNonCanonical, append(append([]byte(nil), encIdentityNonCanonical...), make([]byte, 32)...), false)
	f.Add(seed, []byte{0}, encOrder8, append(append([]byte(nil), encBase...), scalarLE(big.NewInt(1))...), false)
	f.Add(seed, []byte{}, encNotOnCurve, make([]byte, 64), false)
	tPub, tSig := torsionedR(seed, []byte("a node report"))
	f.Add(seed, []byte("a node report"), tPub, tSig, false)
}

func fuzzEntry(seed, msg, pub, sig []byte, signed bool) ([]byte, []byte) {
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
	return pub, sig
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
			if !ed25519.Verify(s.PublicKey(), msg, sig) {
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
