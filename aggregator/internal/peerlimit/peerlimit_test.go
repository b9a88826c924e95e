package peerlimit

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestOnePeerCannotSpendAnothersBudget(t *testing.T) {
	now := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	p := New(1, 3)
	for i := 0; i < 3; i++ {
		assert.True(t, p.Allow("10.0.0.1", now))
	}
	assert.False(t, p.Allow("10.0.0.1", now), "its burst spent")
	assert.True(t, p.Allow("10.0.0.2", now), "another peer keeps its own")
	assert.True(t, p.Allow("10.0.0.1", now.Add(time.Second)), "refilled at its rate")
	p.SetRate(1, 1)
	assert.True(t, p.Allow("10.0.0.1", now))
	assert.False(t, p.Allow("10.0.0.1", now), "the new budget applies")
}

func TestBucketsAreBounded(t *testing.T) {
	now := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	p := New(1, 1)
	for i := 0; i < Max+10; i++ {
		p.Allow(fmt.Sprintf("peer-%d", i), now)
	}
	assert.LessOrEqual(t, p.Len(), Max, "never more than Max buckets")
	// Past the bound, idle full buckets are dropped first.
	p = New(1, 1)
	for i := 0; i < Max; i++ {
		p.Allow(fmt.Sprintf("peer-%d", i), now)
	}
	p.Allow("late", now.Add(time.Minute))
	assert.Equal(t, 1, p.Len(), "every old bucket was full again a minute later and dropped")
}
