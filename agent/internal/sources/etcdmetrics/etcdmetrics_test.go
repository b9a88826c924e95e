package etcdmetrics

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const exposition = "# HELP etcd_server_quota_backend_bytes Current backend storage quota size in bytes.\n" +
	"# TYPE etcd_server_quota_backend_bytes gauge\netcd_server_quota_backend_bytes 2.147483648e+09\n" +
	"# TYPE etcd_server_has_leader gauge\netcd_server_has_leader 1\n"

// TestOneScrapePerInterval: the checks of one interval share one scrape;
// a later interval scrapes again.
func TestOneScrapePerInterval(t *testing.T) {
	var scrapes atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		scrapes.Add(1)
		time.Sleep(50 * time.Millisecond)
		_, _ = io.WriteString(w, exposition)
	}))
	defer srv.Close()
	r := New(srv.URL, 200*time.Millisecond)
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fams, err := r.Read(context.Background())
			assert.NoError(t, err)
			q, ok, _ := Quota(fams)
			assert.True(t, ok)
			assert.Equal(t, int64(2<<30), q)
		}()
	}
	wg.Wait()
	_, err := r.Read(context.Background())
	require.NoError(t, err)
	assert.Equal(t, int32(1), scrapes.Load(), "three concurrent checks and one right after share a scrape")
	time.Sleep(250 * time.Millisecond)
	_, err = r.Read(context.Background())
	require.NoError(t, err)
	assert.Equal(t, int32(2), scrapes.Load(), "the next interval scrapes again")
}

func TestQuotaRejectsWhatCannotBeTrusted(t *testing.T) {
	for body, why := range map[string]string{
		"": "absent",
		"# TYPE etcd_server_quota_backend_bytes counter\netcd_server_quota_backend_bytes 5\n": "want a gauge",
		"# TYPE etcd_server_quota_backend_bytes gauge\netcd_server_quota_backend_bytes 0\n":   "is 0",
		"# TYPE etcd_server_quota_backend_bytes gauge\netcd_server_quota_backend_bytes NaN\n": "is NaN",
	} {
		fams, err := Parse([]byte(body))
		require.NoError(t, err)
		_, ok, got := Quota(fams)
		assert.False(t, ok, body)
		assert.Contains(t, got, why, body)
	}
	_, err := New("", 0).Read(context.Background())
	assert.ErrorIs(t, err, ErrNoURL)
}
