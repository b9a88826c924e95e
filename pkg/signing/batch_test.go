package signing

import (
	"crypto/ed25519"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// The batch path and the single path accept exactly the same set: the
// Batch answers each entry as VerifyKey.Verify does, whatever else is in
// the batch. The reasoning is on Batch; it rests on curve25519-voi
// v0.0.0-20230904125328-1f23a7beb09a (go.mod), primitives/ed25519/
// batch_verify.go: entry.doInit (A, R, S decoded with the entry's
// VerifyOptions, k = H(R || A || m) from the same bytes as
// verifyExpandedWithOptionsNoPanic in ed25519_precomputation.go) and
// VerifyBatchOnly (false at once for any entry that failed to decode
// (anyInvalid) or asked for CofactorlessVerify (anyCofactorless);
// otherwise the cofactored equation over a random linear combination,
// checked with IsSmallOrder). With VerifyOptionsZIP_215 single verification
// checks the same cofactored equation per entry.

type batchCase struct {
	name     string
	key      *VerifyKey
	msg, sig []byte
}

// batchCases are the edge cases, Zcash's ZIP-215 vectors and random
// genuine and edited signatures, as entries a Batch can take (a key
// NewVerifyKey refuses never reaches one: ingest refuses its Hello).
func batchCases(t testing.TB) []batchCase {
	var cs []batchCase
	add := func(name string, pub, msg, sig []byte) {
		k, err := NewVerifyKey(pub)
		if err != nil {
			return
		}
		cs = append(cs, batchCase{name: name, key: k, msg: msg, sig: sig})
	}
	for _, c := range edgeCases(t) {
		add(c.name, c.pub, c.msg, c.sig)
	}
	pubs, sigs := zip215Vectors(t)
	for i := range pubs {
		add(fmt.Sprintf("ZIP-215 vector %d", i), pubs[i], []byte("Zcash"), sigs[i])
	}
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 64 {
		pub, msg, sig := randomEntry(r, i)
		add(fmt.Sprintf("random %d", i), pub, msg, sig)
	}
	// An empty signature (ingest refuses it before: missing_signature).
	add("an empty signature", cs[0].key.PublicKey(), cs[0].msg, nil)
	return cs
}

// checkBatch fails t unless b's answer for every case equals the case's
// single verification, and returns whether the batch equation decided it.
func checkBatch(t testing.TB, b *Batch, cs []batchCase) bool {
	t.Helper()
	b.Reset()
	for _, c := range cs {
		b.Add(c.key, c.msg, c.sig)
	}
	errs, batched := b.Verify()
	require.Len(t, errs, len(cs))
	allOK := true
	for i, c := range cs {
		want := c.key.Verify(c.msg, c.sig)
		require.Equal(t, want, errs[i], "%s (entry %d of %d): the batch says %v, the single verification %v", c.name, i, len(cs), errs[i], want)
		// A signature that is not 64 bytes is decided alone, beside the
		// batch equation.
		allOK = allOK && (want == nil || len(c.sig) != ed25519.SignatureSize)
	}
	if batched {
		require.True(t, allOK, "a batch with a refused 64-byte entry was decided by the batch equation")
	}
	return batched
}

// Every case alone, beside three genuine signatures, and all together;
// then random mixes: each entry is decided as alone.
func TestBatchMatchesVerifyKey(t *testing.T) {
	cs := batchCases(t)
	var genuine []batchCase
	for _, c := range cs {
		if len(c.name) > 7 && c.name[:7] == "random " && c.key.Verify(c.msg, c.sig) == nil {
			genuine = append(genuine, c)
		}
	}
	require.GreaterOrEqual(t, len(genuine), 3)
	b := NewBatch(64)
	fast := 0
	for _, c := range cs {
		require.False(t, checkBatch(t, b, []batchCase{c}), "a batch of one is verified alone")
		if checkBatch(t, b, append([]batchCase{c}, genuine[:3]...)) && c.key.Verify(c.msg, c.sig) == nil {
			fast++
		}
	}
	checkBatch(t, b, cs)
	r := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		mix := make([]batchCase, 1+r.IntN(64))
		for i := range mix {
			mix[i] = cs[r.IntN(len(cs))]
		}
		checkBatch(t, b, mix)
	}
	// The fast path is taken for every accepted case, small-order ones
	// (the ZIP-215 vectors) included.
	accepted := 0
	for _, c := range cs {
		if c.key.Verify(c.msg, c.sig) == nil {
			accepted++
		}
	}
	require.Equal(t, accepted, fast, "every accepted case, beside genuine signatures, is accepted by the batch equation")
}

// FuzzBatchMatchesVerifyKey: a Batch answers each entry as VerifyKey.Verify
// does. The fuzzed entry (FuzzVerifyKeyZIP215's encoding) is put in a
// batch between genuine signatures, and twice.
//
//	go test -run '^$' -fuzz FuzzBatchMatchesVerifyKey -fuzztime 60s ./pkg/signing/
func FuzzBatchMatchesVerifyKey(f *testing.F) {
	addFuzzSeeds(f)
	s1, err := NewSigner(ed25519.NewKeyFromSeed(make([]byte, 32)))
	if err != nil {
		f.Fatal(err)
	}
	m := []byte("a node report")
	g := batchCase{name: "genuine", key: s1.VerifyKey(), msg: m, sig: s1.Sign(m)}
	b := NewBatch(8)
	f.Fuzz(func(t *testing.T, seed, msg, pub, sig []byte, signed bool) {
		pub, sig = fuzzEntry(seed, msg, pub, sig, signed)
		k, err := NewVerifyKey(pub)
		if err != nil {
			return
		}
		c := batchCase{name: "fuzzed", key: k, msg: msg, sig: sig}
		checkBatch(t, b, []batchCase{g, c, g})
		checkBatch(t, b, []batchCase{c, c})
	})
}

// BenchmarkBatchVerify: CPU per signature of report-sized (3 KB) payloads
// by distinct keys, verified alone (VerifyKey) and in batches of 1, 4, 16
// and 64.
//
//	go test -run '^$' -bench BatchVerify ./pkg/signing/
func BenchmarkBatchVerify(b *testing.B) {
	const n = 64
	keys := make([]*VerifyKey, n)
	msgs := make([][]byte, n)
	sigs := make([][]byte, n)
	for i := range n {
		s, err := Generate()
		require.NoError(b, err)
		keys[i] = s.VerifyKey()
		msgs[i] = make([]byte, 3000)
		msgs[i][0] = byte(i)
		sigs[i] = s.Sign(msgs[i])
	}
	b.Run("single", func(b *testing.B) {
		i := 0
		for b.Loop() {
			if keys[i%n].Verify(msgs[i%n], sigs[i%n]) != nil {
				b.Fatal("does not verify")
			}
			i++
		}
	})
	for _, size := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprintf("batch-%d", size), func(b *testing.B) {
			bv := NewBatch(size)
			sigsDone := 0
			for b.Loop() {
				bv.Reset()
				for i := range size {
					bv.Add(keys[i], msgs[i], sigs[i])
				}
				errs, _ := bv.Verify()
				for _, err := range errs {
					if err != nil {
						b.Fatal(err)
					}
				}
				sigsDone += size
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(sigsDone), "ns/sig")
		})
	}
}
