package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAdapterSeries: every adapter has its series from the start (0), an
// adapter that is not applicable is never synced, and the names pass
// Prometheus' own lint.
func TestAdapterSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	require.NoError(t, err)
	m.AdaptersKnown([]string{"cnpg", "velero"})
	m.AdapterState("cnpg", true, true, 4000)
	m.AdapterState("velero", false, true, 0)
	m.AdapterError("cnpg", AdapterErrorWatch)
	m.AdapterJudged("cnpg", 3*time.Millisecond)

	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP cozy_health_adapter_applicable 1 when every API a cluster adapter requires is served (its CRDs are installed and established), 0 when not: the adapter publishes nothing.
# TYPE cozy_health_adapter_applicable gauge
cozy_health_adapter_applicable{adapter="cnpg"} 1
cozy_health_adapter_applicable{adapter="velero"} 0
# HELP cozy_health_adapter_synced 1 when every informer of an applicable cluster adapter has synced, 0 when one has not or the adapter is not applicable.
# TYPE cozy_health_adapter_synced gauge
cozy_health_adapter_synced{adapter="cnpg"} 1
cozy_health_adapter_synced{adapter="velero"} 0
# HELP cozy_health_adapter_objects Objects a cluster adapter watches (its sources' informer caches), as of its last judgement.
# TYPE cozy_health_adapter_objects gauge
cozy_health_adapter_objects{adapter="cnpg"} 4000
cozy_health_adapter_objects{adapter="velero"} 0
`), "cozy_health_adapter_applicable", "cozy_health_adapter_synced", "cozy_health_adapter_objects"))
	assert.Equal(t, 2*len(AdapterErrorReasons), testutil.CollectAndCount(m.adapters.errors), "every adapter x reason exists from the start")
	assert.Equal(t, 1.0, testutil.ToFloat64(m.adapters.errors.WithLabelValues("cnpg", AdapterErrorWatch)))
	assert.Equal(t, 0.0, testutil.ToFloat64(m.adapters.errors.WithLabelValues("velero", AdapterErrorWatch)))
	// Queue depth, events and the API's last confirmation.
	m.AdapterEvent("cnpg")
	m.AdapterEvent("cnpg")
	m.AdapterPending("cnpg", 2)
	at := time.Unix(1_700_000_000, 500_000_000)
	m.AdapterConfirmed("cnpg", at)
	assert.Equal(t, 2.0, testutil.ToFloat64(m.adapters.events.WithLabelValues("cnpg")))
	assert.Equal(t, 0.0, testutil.ToFloat64(m.adapters.events.WithLabelValues("velero")), "events exist from the start")
	assert.Equal(t, 2.0, testutil.ToFloat64(m.adapters.pending.WithLabelValues("cnpg")))
	assert.InDelta(t, 1_700_000_000.5, testutil.ToFloat64(m.adapters.confirmed.WithLabelValues("cnpg")), 1e-3)
	assert.Equal(t, 1, testutil.CollectAndCount(m.adapters.confirmed), "no confirmation series before an adapter first synced")
	for _, c := range m.adapters.collectors() {
		problems, err := testutil.CollectAndLint(c)
		require.NoError(t, err)
		assert.Empty(t, problems)
	}
}
