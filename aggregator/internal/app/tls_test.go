package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cozystack/cozy-health/aggregator/internal/config"
)

// TestSelfSignedServing: an aggregator started with --tls-mode=self-signed
// and no certificate anywhere creates its Secret, publishes its CA, reports
// ready only once it has a certificate, and serves gRPC over TLS that
// verifies with the published CA under the Service's name.
func TestSelfSignedServing(t *testing.T) {
	cp := startPlane(t)
	ctx := context.Background()
	require.NoError(t, cp.EnsureNamespace(ctx, "cozy-health"))
	cfg := testConfig(t, "self-signed-0")
	cfg.TLSMode, cfg.TLSCert, cfg.TLSKey = "", "", ""
	cfg.TLSNamespace = "cozy-health"
	cfg.TLSExtraSANs = []string{"127.0.0.1"}
	require.NoError(t, cfg.Validate())
	require.Equal(t, config.TLSModeSelfSigned, cfg.TLSMode)
	r := startReplica(t, cp.Config, cfg, zaptest.NewLogger(t))

	select {
	case <-r.app.ServingCertReady():
	case <-time.After(30 * time.Second):
		t.Fatal("no serving certificate")
	}
	require.Eventually(t, func() bool {
		res, err := http.Get("http://" + r.app.HTTPAddr() + "/readyz")
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		return res.StatusCode == http.StatusOK
	}, 10*time.Second, 100*time.Millisecond)

	var bundle string
	require.Eventually(t, func() bool {
		cm, err := cp.Clientset().CoreV1().ConfigMaps("cozy-health").Get(ctx, "cozy-health-ca", metav1.GetOptions{})
		if err != nil {
			return false
		}
		bundle = cm.Data["ca.crt"]
		return bundle != ""
	}, 10*time.Second, 100*time.Millisecond)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM([]byte(bundle)))
	for _, name := range []string{"cozy-health-aggregator.cozy-health.svc", "127.0.0.1"} {
		conn, err := grpc.NewClient(r.app.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: name, MinVersion: tls.VersionTLS12})))
		require.NoError(t, err)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		require.NoError(t, err, name)
		assert.Equal(t, healthpb.HealthCheckResponse_SERVING, res.GetStatus())
		_ = conn.Close()
	}
}
