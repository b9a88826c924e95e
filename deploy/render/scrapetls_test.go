package render

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestScrapeOverTLS: with aggregator.metricsTLS (the default) the
// aggregator serves /metrics over TLS (metrics-tls in its configuration)
// and both scrape objects use https, verifying with the published CA
// ConfigMap under the Service's DNS name, which the serving certificate
// carries; the token then never crosses the network in clear. Off, they
// scrape plain HTTP. The agents' peer check is on by default.
func TestScrapeOverTLS(t *testing.T) {
	for _, api := range []struct{ api, kind string }{{"operator.victoriametrics.com/v1beta1", "VMServiceScrape"}, {"monitoring.coreos.com/v1", "ServiceMonitor"}} {
		r, err := Render(Options{APIVersions: []string{api.api}})
		require.NoError(t, err)
		sc, err := r.Object(api.kind, "cozy-health-aggregator")
		require.NoError(t, err)
		assert.Equal(t, "https", nested(t, sc, "spec", "endpoints", 0, "scheme"), api.kind)
		assert.Equal(t, map[string]any{"configMap": map[string]any{"name": "cozy-health-ca", "key": "ca.crt"}},
			nested(t, sc, "spec", "endpoints", 0, "tlsConfig", "ca"), api.kind)
		assert.Equal(t, "cozy-health-aggregator.cozy-health.svc", nested(t, sc, "spec", "endpoints", 0, "tlsConfig", "serverName"), api.kind)
		cm, err := r.Object("ConfigMap", "cozy-health-aggregator")
		require.NoError(t, err)
		conf, _ := nested(t, cm, "data", "config.yaml").(string)
		assert.Contains(t, strings.Split(conf, "\n"), "metrics-tls: true")
		assert.Contains(t, strings.Split(conf, "\n"), "agent-peer-check: true")
	}
	r, err := Render(Options{APIVersions: []string{"monitoring.coreos.com/v1"}, Set: []string{"aggregator.metricsTLS=false"}})
	require.NoError(t, err)
	sc, err := r.Object("ServiceMonitor", "cozy-health-aggregator")
	require.NoError(t, err)
	assert.Nil(t, nested(t, sc, "spec", "endpoints", 0, "scheme"))
	assert.Nil(t, nested(t, sc, "spec", "endpoints", 0, "tlsConfig"))
}
