// Package peerlimit is one token bucket per peer address, bounded in
// number: the per-client budgets of the aggregator's TokenReviews (ingest's
// hellos, delegated authentication of /metrics and drain-check), so that
// one client cannot spend a budget others share.
package peerlimit

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Max is how many buckets Limiters keeps: past that, buckets idle long
// enough to be full again are dropped, and if none is, all of them (a peer
// then starts with a full bucket: the shared budget behind still holds).
const Max = 1 << 14

// Limiters holds one bucket per peer. Safe for concurrent use.
type Limiters struct {
	mu    sync.Mutex // guards every field
	limit rate.Limit
	burst int
	m     map[string]*rate.Limiter
}

// New returns Limiters giving each peer limit per second, burst at once.
func New(limit rate.Limit, burst int) *Limiters {
	return &Limiters{limit: limit, burst: burst, m: map[string]*rate.Limiter{}}
}

// SetRate changes every peer's budget; the buckets start again full.
func (p *Limiters) SetRate(limit rate.Limit, burst int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.limit, p.burst = limit, burst
	clear(p.m)
}

// Allow spends one token of peer's bucket at now.
func (p *Limiters) Allow(peer string, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	l, ok := p.m[peer]
	if !ok {
		if len(p.m) >= Max {
			for k, v := range p.m {
				if v.TokensAt(now) >= float64(p.burst) {
					delete(p.m, k)
				}
			}
			if len(p.m) >= Max {
				clear(p.m)
			}
		}
		l = rate.NewLimiter(p.limit, p.burst)
		p.m[peer] = l
	}
	return l.AllowN(now, 1)
}

// Len is how many buckets are kept.
func (p *Limiters) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m)
}
