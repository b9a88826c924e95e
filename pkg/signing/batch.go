package signing

import (
	"crypto/ed25519"

	voied25519 "github.com/oasisprotocol/curve25519-voi/primitives/ed25519"
)

// Batch verifies many (key, payload, signature) entries together: one
// multiscalar multiplication for the whole batch instead of one double
// scalar multiplication per signature (curve25519-voi's BatchVerifier).
// Its answer for each entry is exactly what VerifyKey.Verify answers for
// it (TestVerifyKeyAndBatchMatchZIP215, FuzzBatchMatchesVerifyKey):
//
//   - the batch is only a fast path: when voi's VerifyBatchOnly
//     (batch_verify.go) accepts, every entry is reported verified;
//     otherwise every entry is verified alone with VerifyKey.Verify, so a
//     bad signature is attributed to its entry and the good ones beside it
//     still verify;
//   - VerifyBatchOnly computes the random linear combination
//     sum z_i ([S_i]B - [k_i]A_i - R_i) with 128-bit z_i from crypto/rand
//     and accepts when it is of small order. If every entry satisfies the
//     cofactored equation each term is of small order, and so is the sum:
//     a batch of entries VerifyKey accepts is always accepted. If some
//     entry does not, its term has a component of prime order l, and for
//     any choice of the other z_i at most one of the 2^128 values of its
//     z_i cancels it: a batch with an entry VerifyKey refuses is accepted
//     with probability at most 2^-128;
//   - both sides use the same options (zip215), the same expanded A and
//     the same k = H(R || A || payload) (entry.doInit and
//     verifyExpandedWithOptionsNoPanic), and an entry whose encodings
//     those options refuse (non-canonical S, an R off the curve) makes
//     VerifyBatchOnly return false at once (anyInvalid), so the entries
//     are then decided alone;
//   - a batch of one entry, and an entry whose signature is not 64 bytes,
//     is verified alone.
//
// A Batch is not safe for concurrent use; reuse it with Reset.
type Batch struct {
	v       *voied25519.BatchVerifier
	entries []batchEntry
	errs    []error
}

type batchEntry struct {
	key          *VerifyKey
	payload, sig []byte
}

// NewBatch returns an empty Batch with room for n entries.
func NewBatch(n int) *Batch {
	return &Batch{v: voied25519.NewBatchVerifierWithCapacity(n), entries: make([]batchEntry, 0, n), errs: make([]error, 0, n)}
}

// Add adds one entry. The Batch keeps payload and sig until Reset.
func (b *Batch) Add(k *VerifyKey, payload, sig []byte) {
	b.entries = append(b.entries, batchEntry{key: k, payload: payload, sig: sig})
}

// Len returns the number of entries added since the last Reset.
func (b *Batch) Len() int { return len(b.entries) }

// Verify returns, for each entry in the order added, what
// entry.key.Verify(payload, sig) returns. The slice is the Batch's own,
// valid until the next Verify or Reset. It reports whether the entries were
// decided by one batch equation (false: alone, after a failed batch, or
// because fewer than two could be batched).
func (b *Batch) Verify() ([]error, bool) {
	b.errs = b.errs[:0]
	batched := 0
	for _, e := range b.entries {
		b.errs = append(b.errs, nil)
		if len(e.sig) == ed25519.SignatureSize {
			batched++
		}
	}
	if batched >= 2 {
		b.v.Reset()
		for _, e := range b.entries {
			if len(e.sig) == ed25519.SignatureSize {
				b.v.AddExpandedWithOptions(e.key.expanded, e.payload, e.sig, zip215)
			}
		}
		if b.v.VerifyBatchOnly(nil) {
			for i, e := range b.entries {
				if len(e.sig) != ed25519.SignatureSize {
					b.errs[i] = e.key.Verify(e.payload, e.sig)
				}
			}
			return b.errs, true
		}
	}
	for i, e := range b.entries {
		b.errs[i] = e.key.Verify(e.payload, e.sig)
	}
	return b.errs, false
}

// Reset empties the Batch for reuse and drops its references to the
// entries' keys, payloads and signatures.
func (b *Batch) Reset() {
	clear(b.entries)
	b.entries = b.entries[:0]
	clear(b.errs)
	b.errs = b.errs[:0]
	b.v.Reset()
}
