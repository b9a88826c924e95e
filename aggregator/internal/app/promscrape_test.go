package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/pkg/tlsutil"
	"github.com/cozystack/cozy-health/test/harness"
)

// TestRealPrometheusScrapesOverTLS: Debian's real Prometheus scrapes the
// aggregator's /metrics over TLS (--metrics-tls), verifying the serving
// certificate with the CA the chart's scrape objects point at, with a
// bearer token in the Authorization header as the scrape objects send it:
// the target is up and cozy-health's series arrive. A scrape of the same
// target verified with another CA is down with an x509 error (the CA is
// really checked), and one over plain http is down (nothing served in
// clear). hack/testdeps.sh installs prometheus.
func TestRealPrometheusScrapesOverTLS(t *testing.T) {
	harness.SkipShort(t)
	prom, err := exec.LookPath("prometheus")
	require.NoError(t, err, "Debian's prometheus (hack/testdeps.sh installs it)")

	a, cfg := startMetricsTLS(t, "prom-tls")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	dir := t.TempDir()
	ca := filepath.Join(filepath.Dir(cfg.TLSCert), "ca.crt")
	other, err := tlsutil.WriteServing(t.TempDir(), "127.0.0.1", "localhost")
	require.NoError(t, err)
	token := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(token, []byte("scraper-token"), 0o600))
	addr := a.MetricsAddr()
	conf := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: tls
    scheme: https
    tls_config: {ca_file: %q, server_name: localhost}
    authorization: {credentials_file: %q}
    static_configs: [{targets: [%q]}]
  - job_name: wrong-ca
    scheme: https
    tls_config: {ca_file: %q, server_name: localhost}
    static_configs: [{targets: [%q]}]
  - job_name: plain
    scheme: http
    static_configs: [{targets: [%q]}]
`, ca, token, addr, filepath.Join(filepath.Dir(other.CertFile), "ca.crt"), addr, addr)
	confFile := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(confFile, []byte(conf), 0o600))

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	web := l.Addr().String()
	require.NoError(t, l.Close())
	cmd := exec.CommandContext(ctx, prom, "--config.file="+confFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+web, "--log.level=warn")
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = logf, logf
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	type target struct {
		Labels    map[string]string `json:"labels"`
		Health    string            `json:"health"`
		LastError string            `json:"lastError"`
	}
	targets := func() map[string]target {
		res, err := http.Get("http://" + web + "/api/v1/targets")
		if err != nil {
			return nil
		}
		defer res.Body.Close()
		var body struct {
			Data struct {
				ActiveTargets []target `json:"activeTargets"`
			} `json:"data"`
		}
		if json.NewDecoder(res.Body).Decode(&body) != nil {
			return nil
		}
		out := map[string]target{}
		for _, tg := range body.Data.ActiveTargets {
			out[tg.Labels["job"]] = tg
		}
		return out
	}
	var got map[string]target
	require.Eventually(t, func() bool {
		got = targets()
		return got["tls"].Health == "up" && got["wrong-ca"].Health == "down" && got["plain"].Health == "down"
	}, 60*time.Second, 500*time.Millisecond, "targets: %+v (prometheus log %s)", got, logf.Name())
	t.Logf("tls: %s; wrong CA: %s (%s); plain http: %s (%s)", got["tls"].Health, got["wrong-ca"].Health, got["wrong-ca"].LastError, got["plain"].Health, got["plain"].LastError)
	require.Contains(t, got["wrong-ca"].LastError, "x509", "the CA is checked")

	// cozy-health's own series arrived through the TLS scrape.
	q := url.Values{"query": {`cozy_health_http_connections_rejected_total{job="tls"}`}}
	require.Eventually(t, func() bool {
		res, err := http.Get("http://" + web + "/api/v1/query?" + q.Encode())
		if err != nil {
			return false
		}
		defer res.Body.Close()
		var body struct {
			Data struct {
				Result []json.RawMessage `json:"result"`
			} `json:"data"`
		}
		return json.NewDecoder(res.Body).Decode(&body) == nil && len(body.Data.Result) > 0
	}, 30*time.Second, 500*time.Millisecond, "cozy_health series scraped over TLS")
}
