package app

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
)

// TestReviewClientIsSeparate: the client untrusted callers' reviews go
// through has its own rate limiter and its own transport (connections), so
// a flood of TokenReviews cannot queue a Lease renewal behind it. Before,
// ingest reviewed tokens on the one client leader election used.
func TestReviewClientIsSeparate(t *testing.T) {
	rc := &rest.Config{Host: "https://127.0.0.1:6443", QPS: 20, Burst: 40,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	trusted, err := rest.TransportFor(rc)
	require.NoError(t, err)
	again, err := rest.TransportFor(rest.CopyConfig(rc))
	require.NoError(t, err)
	require.Same(t, trusted, again, "client-go shares a transport between equal configs")
	rv := reviewConfig(rc)
	reviews, err := rest.TransportFor(rv)
	require.NoError(t, err)
	assert.NotSame(t, trusted, reviews)
	assert.Equal(t, float32(20), rc.QPS, "the trusted config is not changed")
	assert.Equal(t, float32(50), rv.QPS)
}
