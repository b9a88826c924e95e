package config

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPeerFlags: --peers takes a comma list of host:port and needs
// --peer-token-file; the peer ServiceAccount defaults to the chart's.
func TestPeerFlags(t *testing.T) {
	cfg, err := Load(tlsArgs, io.Discard)
	require.NoError(t, err)
	assert.Empty(t, cfg.Peers)
	assert.Equal(t, "cozy-health/cozy-health-aggregator", cfg.PeerServiceAccount)

	cfg, err = Load(append(append([]string(nil), tlsArgs...), "--peers=cozy-health-aggregator-ingest.cozy-health.svc:9443,10.0.0.2:9443", "--peer-token-file=/var/run/secrets/cozy-health/token"), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"cozy-health-aggregator-ingest.cozy-health.svc:9443", "10.0.0.2:9443"}, cfg.Peers)

	_, err = Load(append(append([]string(nil), tlsArgs...), "--peers=a:1"), io.Discard)
	assert.ErrorContains(t, err, "--peer-token-file")
	_, err = Load(append(append([]string(nil), tlsArgs...), "--peers=nohost", "--peer-token-file=/t"), io.Discard)
	assert.ErrorContains(t, err, "--peers")
}
