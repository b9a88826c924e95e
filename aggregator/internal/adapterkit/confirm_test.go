package adapterkit

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	watchapi "k8s.io/apimachinery/pkg/watch"
)

// TestConfirmation: an open watch stream confirms the cache continuously;
// once it ends, the cache is as old as its end (or its last event) until
// a list or watch succeeds again, and a failure in between is kept to name.
func TestConfirmation(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	now := t0
	clock := func() time.Time { return now }
	c := &confirmation{}
	at, err := c.observed(now)
	assert.True(t, at.IsZero(), "nothing confirmed before the first list")
	assert.NoError(t, err)

	c.confirmed(now) // the list
	fake := watchapi.NewFake()
	w := newConfirmingWatch(fake, c, clock)
	c.streamStarted(now)
	now = t0.Add(time.Minute)
	at, _ = c.observed(now)
	assert.Equal(t, now, at, "an open stream confirms continuously")

	now = t0.Add(2 * time.Minute)
	fake.Action(watchapi.Bookmark, &metav1.Status{})
	<-w.ResultChan()
	fake.Stop() // the connection died
	for range w.ResultChan() {
	}
	require.Eventually(t, func() bool {
		_, err := c.observed(now)
		at, _ = c.observed(t0.Add(time.Hour))
		return err == nil && at.Equal(now)
	}, time.Second, time.Millisecond)

	refused := errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
	c.failed(refused)
	at, err = c.observed(t0.Add(time.Hour))
	assert.Equal(t, t0.Add(2*time.Minute), at, "as old as the stream's end")
	assert.Equal(t, refused, err)

	c.streamStarted(t0.Add(time.Hour))
	at, err = c.observed(t0.Add(2 * time.Hour))
	assert.Equal(t, t0.Add(2*time.Hour), at)
	assert.NoError(t, err, "a watch that starts again clears the failure")
}
