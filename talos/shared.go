package talos

import (
	"context"
	"sync"
	"time"
)

// sharedTTL is how long a successful answer is reused: the Talos checks of
// one report interval run together and share one ServiceList and one
// EtcdAlarmList instead of asking apid once per check.
const sharedTTL = time.Second

// shared coalesces concurrent and near-simultaneous calls of one RPC.
type shared[T any] struct {
	// mu guards cur, the latest call (in flight or finished).
	mu  sync.Mutex
	cur *call[T]
}

type call[T any] struct {
	done chan struct{}
	res  T
	err  error
	at   time.Time
}

// do returns the answer of a call in flight or younger than sharedTTL, or
// makes one with fetch. A waiter gives up when its own ctx ends.
func (s *shared[T]) do(ctx context.Context, fetch func(context.Context) (T, error)) (T, error) {
	s.mu.Lock()
	if c := s.cur; c != nil {
		select {
		case <-c.done:
			if c.err == nil && time.Since(c.at) < sharedTTL {
				s.mu.Unlock()
				return c.res, nil
			}
		default:
			s.mu.Unlock()
			select {
			case <-c.done:
				return c.res, c.err
			case <-ctx.Done():
				var zero T
				return zero, ctx.Err()
			}
		}
	}
	c := &call[T]{done: make(chan struct{})}
	s.cur = c
	s.mu.Unlock()

	c.res, c.err = fetch(ctx)
	c.at = time.Now()
	close(c.done)
	return c.res, c.err
}

// reset forgets the latest answer (the client was rebuilt or is gone).
func (s *shared[T]) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur = nil
}
