package httpsource

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNewClientAsksForNoGzip: the scraping client does not ask for a
// compressed page (Go's default transport adds Accept-Encoding: gzip).
func TestNewClientAsksForNoGzip(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Accept-Encoding"))
		_, _ = w.Write([]byte("up 1\n"))
	}))
	defer srv.Close()
	for _, c := range []*http.Client{{}, NewClient()} {
		body, err := Get(context.Background(), c, srv.URL, nil)
		require.NoError(t, err)
		assert.Equal(t, "up 1\n", string(body))
	}
	assert.Equal(t, []string{"gzip", ""}, got, "the default client asks for gzip, NewClient does not")
}
