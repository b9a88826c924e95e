package cli

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBudget: one row per node in the answer's order (sorted by the
// aggregator), the blocked node naming the quorums and resources it would
// break, deduplicated; an unknown node naming the rules that could not
// decide; an error answer exits 2.
func TestBudget(t *testing.T) {
	answer := `{"evaluatedAt":"2026-11-30T12:00:00Z","intent":"reboot","nodes":[
 {"node":"node-1","verdict":"safe"},
 {"node":"node-2","verdict":"blocked","breaks":[
   {"rule":"etcd-quorum","component":"etcd","verdict":"blocked","message":"etcd: ..."},
   {"rule":"linstor-last-replica","component":"linstor","verdict":"blocked","message":"...","resourceRef":{"kind":"Resource","name":"pvc-a"}},
   {"rule":"linstor-quorum","component":"linstor","verdict":"blocked","message":"...","resourceRef":{"kind":"Resource","name":"pvc-a"}},
   {"rule":"ovn-central-quorum","component":"kube-ovn","verdict":"blocked","message":"...","resourceRef":{"kind":"OVNDatabase","name":"OVN_Northbound"}},
   {"rule":"etcd-quorum","component":"etcd","verdict":"blocked","message":"again"}]},
 {"node":"node-3","verdict":"unknown","undetermined":[
   {"rule":"node-data","component":"node","verdict":"unknown","message":"..."},
   {"rule":"etcd-quorum","component":"etcd","verdict":"unknown","message":"..."}]}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/drain-budget" {
			http.NotFound(w, r)
			return
		}
		assert.Equal(t, "Bearer tok", r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(answer))
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	code, out, errOut := run(ctx, "budget", "--aggregator-url", srv.URL, "--aggregator-token", "tok")
	require.Equal(t, ExitOK, code, errOut)
	t.Log("\n" + out)
	assert.Equal(t, `NODE    VERDICT  LOSING IT NEXT WOULD BREAK
node-1  safe     -
node-2  blocked  etcd quorum, pvc-a last copy, pvc-a quorum, ovn-central OVN_Northbound quorum
node-3  unknown  not known (node-data, etcd-quorum)
3 node(s): 1 safe, 1 blocked, 1 unknown; evaluated at 2026-11-30T12:00:00Z.
`, out)

	code, out, _ = run(ctx, "budget", "--aggregator-url", srv.URL, "--aggregator-token", "tok", "-o", "json")
	require.Equal(t, ExitOK, code)
	assert.Contains(t, out, `"verdict": "blocked"`)

	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":"the disruption budget has not been evaluated yet"}`))
	}))
	defer down.Close()
	code, _, errOut = run(ctx, "budget", "--aggregator-url", down.URL)
	assert.Equal(t, ExitUnknown, code)
	assert.Contains(t, errOut, "HTTP 503: the disruption budget has not been evaluated yet")
}
