package adapterkit

import (
	"context"
	"errors"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	watchapi "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
)

// confirmation is what the API last confirmed of one informer's cache.
// The informer's ListerWatcher reports to it: a successful list, a watch
// stream opening, every event on it (bookmarks included) and its end
// confirm the cache; a failed list or watch start records the error. While
// a watch stream is open the cache is confirmed continuously (any change
// would arrive on it; client-go's HTTP/2 health checks end a stream whose
// connection died); once it ends, the cache is as old as the last
// confirmation until a list or watch succeeds again.
//
// The reflector retries a refused watch without reporting it to the watch
// error handler, and keeps serving its cache meanwhile: this is how the
// manager knows a source's facts are no longer confirmed.
type confirmation struct {
	// mu guards everything below.
	mu sync.Mutex
	// streams counts the open watch streams (0 or 1).
	streams int
	// at is the last confirmation (zero: none yet).
	at time.Time
	// err is the last list or watch failure since the last success.
	err error
}

func (c *confirmation) confirmed(now time.Time) {
	c.mu.Lock()
	c.at, c.err = now, nil
	c.mu.Unlock()
}

func (c *confirmation) failed(err error) {
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
}

func (c *confirmation) streamStarted(now time.Time) {
	c.mu.Lock()
	c.streams++
	c.at, c.err = now, nil
	c.mu.Unlock()
}

func (c *confirmation) event(now time.Time) {
	c.mu.Lock()
	c.at = now
	c.mu.Unlock()
}

func (c *confirmation) streamEnded(now time.Time) {
	c.mu.Lock()
	c.streams--
	c.at = now
	c.mu.Unlock()
}

// observed is when the cache was last confirmed (now while a stream is
// open) and the failure since, if any.
func (c *confirmation) observed(now time.Time) (time.Time, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.streams > 0 {
		return now, nil
	}
	return c.at, c.err
}

// confirmingListWatch lists and watches gvr through dyn, reporting to c,
// with dyn's watch-list semantics (as dynamicinformer builds it). A list
// or watch cut short by the informer's own stop is no failure.
func confirmingListWatch(dyn dynamic.Interface, gvr schema.GroupVersionResource, c *confirmation, now func() time.Time) cache.ListerWatcher {
	ri := dyn.Resource(gvr).Namespace(metav1.NamespaceAll)
	fail := func(ctx context.Context, err error) {
		if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
			c.failed(err)
		}
	}
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			l, err := ri.List(ctx, opts)
			if err != nil {
				fail(ctx, err)
				return nil, err
			}
			c.confirmed(now())
			return l, nil
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watchapi.Interface, error) {
			w, err := ri.Watch(ctx, opts)
			if err != nil {
				fail(ctx, err)
				return nil, err
			}
			c.streamStarted(now())
			return newConfirmingWatch(w, c, now), nil
		},
	}, dyn)
}

// confirmingWatch passes a watch's events on, confirming the cache at each
// one (an Error event confirms nothing) and at the stream's end.
type confirmingWatch struct {
	in   watchapi.Interface
	out  chan watchapi.Event
	done chan struct{}
	once sync.Once
}

func newConfirmingWatch(in watchapi.Interface, c *confirmation, now func() time.Time) *confirmingWatch {
	w := &confirmingWatch{in: in, out: make(chan watchapi.Event), done: make(chan struct{})}
	go func() {
		defer close(w.out)
		defer func() { c.streamEnded(now()) }()
		for {
			select {
			case ev, ok := <-in.ResultChan():
				if !ok {
					return
				}
				if ev.Type != watchapi.Error {
					c.event(now())
				}
				select {
				case w.out <- ev:
				case <-w.done:
					return
				}
			case <-w.done:
				return
			}
		}
	}()
	return w
}

// Stop implements watchapi.Interface.
func (w *confirmingWatch) Stop() {
	w.once.Do(func() {
		close(w.done)
		w.in.Stop()
	})
}

// ResultChan implements watchapi.Interface.
func (w *confirmingWatch) ResultChan() <-chan watchapi.Event { return w.out }

var _ watchapi.Interface = (*confirmingWatch)(nil)
