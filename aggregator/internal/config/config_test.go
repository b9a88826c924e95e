package config

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/deploy"
	"sigs.k8s.io/yaml"
)

var tlsArgs = []string{"--tls-cert", "/c.pem", "--tls-key", "/k.pem", "--identity", "me"}

func TestDefaults(t *testing.T) {
	cfg, err := Load(tlsArgs, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "cozy-system", cfg.Namespace)
	assert.Equal(t, "cozy-system", cfg.LeaseNamespace, "lease namespace defaults to --namespace")
	assert.Equal(t, "cozy-health-aggregator", cfg.LeaseName)
	assert.Equal(t, time.Duration(0), cfg.HeartbeatGrace)
	assert.Equal(t, "health.cozystack.io", cfg.TokenAudience)
	assert.Equal(t, "cozy-health/cozy-health-agent", cfg.AgentServiceAccount)
	assert.Equal(t, 10*time.Second, cfg.DampDegraded)
	assert.Equal(t, time.Duration(0), cfg.DampDown)
	assert.Equal(t, time.Duration(0), cfg.DampUnknown)
	assert.Equal(t, DrainAuthNone, cfg.DrainAuth, "the drain check is reached through the service proxy by default")
	assert.Equal(t, 30*time.Second, cfg.FreshFor())
}

func TestFileThenFlags(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agg.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
namespace: platform
heartbeat-grace: 20s
writes-per-second: 1.5
write-burst: 3
drain-auth: delegated
tls-cert: /file/c.pem
tls-key: /file/k.pem
`), 0o600))
	cfg, err := Load([]string{"--config", path, "--namespace", "flag-wins", "--identity", "x"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "flag-wins", cfg.Namespace)
	assert.Equal(t, 20*time.Second, cfg.HeartbeatGrace)
	assert.InDelta(t, 1.5, cfg.WritesPerSecond, 1e-9)
	assert.Equal(t, 3, cfg.WriteBurst)
	assert.Equal(t, DrainAuthDelegated, cfg.DrainAuth)
	assert.Equal(t, "/file/c.pem", cfg.TLSCert)
	assert.Equal(t, path, cfg.ConfigFile)
}

func TestBadValuesNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--heartbeat-grace", "-1s"}, "--heartbeat-grace"},
		{[]string{"--namespace", ""}, "--namespace"},
		{[]string{"--agent-service-account", "nope"}, "--agent-service-account"},
		{[]string{"--writes-per-second", "0"}, "--writes-per-second"},
		{[]string{"--write-burst", "0"}, "--write-burst"},
		{[]string{"--fresh-for-multiple", "1"}, "--fresh-for-multiple"},
		{[]string{"--refresh-period", "1m"}, "--refresh-period"},
		{[]string{"--renew-deadline", "20s"}, "--renew-deadline"},
		{[]string{"--damp-degraded", "-3s"}, "--damp-degraded"},
		{[]string{"--log-level", "loud"}, "--log-level"},
		{[]string{"--drain-auth", "basic"}, "--drain-auth"},
		{[]string{"--drain-auth", ""}, "--drain-auth"},
		{[]string{"--report-interval", "10ms"}, "--report-interval"},
		{[]string{"--linstor-url", "linstor:3371"}, "--linstor-url"},
		{[]string{"--linstor-url", "http://"}, "--linstor-url"},
		{[]string{"--linstor-url", "https://c:3371", "--linstor-secret-namespace", ""}, "--linstor-secret-namespace"},
		{[]string{"--linstor-interval", "100ms"}, "--linstor-interval"},
		{[]string{"--http-idle-timeout", "0s"}, "--http-idle-timeout"},
		{[]string{"--http-read-timeout", "0s"}, "--http-read-timeout"},
		{[]string{"--http-max-conns-per-peer", "0"}, "--http-max-conns-per-peer"},
		{[]string{"--http-max-conns", "-1"}, "--http-max-conns"},
		{[]string{"--http-max-header-bytes", "0"}, "--http-max-header-bytes"},
	} {
		_, err := Load(append(append([]string{}, tlsArgs...), tc.args...), io.Discard)
		require.Error(t, err, "%v", tc.args)
		assert.Contains(t, err.Error(), tc.flag, "%v", tc.args)
	}
	_, err := Load([]string{"--identity", "x"}, io.Discard)
	assert.ErrorContains(t, err, "--tls-cert")
	_, err = Load(append(append([]string{}, tlsArgs...), "--heartbeat-grace", "soon"), io.Discard)
	assert.ErrorContains(t, err, "heartbeat-grace")
}

func TestBadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agg.yaml")
	require.NoError(t, os.WriteFile(path, []byte("heartbeat-grace: forever\n"), 0o600))
	_, err := Load(append([]string{"--config", path}, tlsArgs...), io.Discard)
	assert.ErrorContains(t, err, "--heartbeat-grace")
	require.NoError(t, os.WriteFile(path, []byte("no-such-flag: 1\n"), 0o600))
	_, err = Load(append([]string{"--config", path}, tlsArgs...), io.Discard)
	assert.ErrorContains(t, err, `"no-such-flag"`)
	_, err = Load(append([]string{"--config", filepath.Join(dir, "missing.yaml")}, tlsArgs...), io.Discard)
	assert.ErrorContains(t, err, "read config file")
}

// The configuration the chart ships (as rendered into the plain manifests)
// loads as it is, and says what the defaults say unless it means otherwise.
func TestShippedConfigLoads(t *testing.T) {
	var file string
	for _, doc := range strings.Split(string(deploy.Manifests()), "\n---") {
		var cm struct {
			Kind string            `json:"kind"`
			Data map[string]string `json:"data"`
		}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &cm))
		if cm.Kind == "ConfigMap" {
			file = cm.Data["config.yaml"]
		}
	}
	require.NotEmpty(t, file, "the manifests have no ConfigMap with config.yaml")
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(file), 0o600))
	// The Deployment passes no certificate files; $POD_NAMESPACE names the
	// release namespace.
	t.Setenv("POD_NAMESPACE", "cozy-health")
	cfg, err := Load([]string{"--config", path, "--identity", "me"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, DrainAuthNone, cfg.DrainAuth)
	assert.Equal(t, "cozy-system", cfg.Namespace)
	assert.Equal(t, 10*time.Second, cfg.DampDegraded)
	assert.Equal(t, TLSModeSelfSigned, cfg.TLSMode, "the plain manifests know of no cert-manager")
	assert.Equal(t, "cozy-health", cfg.TLSNamespace)
	assert.Equal(t, "cozy-health-aggregator-tls", cfg.TLSSecret)
	assert.Contains(t, cfg.TLSHosts(), "cozy-health-aggregator.cozy-health.svc")
	assert.Equal(t, "https://linstor-controller.cozy-linstor.svc:3371", cfg.LinstorURL)
	assert.Equal(t, "cozy-linstor", cfg.LinstorSecretNamespace)
	assert.Equal(t, "linstor-client-tls", cfg.LinstorSecret)
	assert.Equal(t, 10*time.Second, cfg.LinstorInterval)
	assert.True(t, cfg.MetricsTLS, "/metrics over TLS")
	assert.True(t, cfg.AgentPeerCheck)
	assert.Equal(t, DefaultAgentPeerAnnotations, cfg.AgentPeerAnnotations)
	assert.Equal(t, DefaultHTTPIdleTimeout, cfg.HTTPLimits.IdleTimeout)
}

func TestTLSModes(t *testing.T) {
	cfg, err := Load(tlsArgs, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, TLSModeFiles, cfg.TLSMode, "--tls-cert given: files")

	cfg, err = Load([]string{"--identity", "x", "--tls-namespace", "cozy-health"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, TLSModeSelfSigned, cfg.TLSMode, "no files: the aggregator keeps its own CA")
	assert.Equal(t, "cozy-health-aggregator-tls", cfg.TLSSecret)
	assert.Equal(t, "cozy-health-ca", cfg.TLSCAConfigMap)
	assert.Equal(t, []string{"cozy-health-aggregator", "cozy-health-aggregator.cozy-health", "cozy-health-aggregator.cozy-health.svc",
		"cozy-health-aggregator.cozy-health.svc.cluster.local"}, cfg.TLSHosts())

	cfg, err = Load([]string{"--identity", "x", "--tls-mode", "self-signed", "--tls-namespace", "ns", "--tls-service", "a,b",
		"--tls-cluster-domain", "example.org.", "--tls-extra-san", "127.0.0.1", "--tls-extra-san", "agg.local"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "a.ns", "a.ns.svc", "a.ns.svc.example.org", "b", "b.ns", "b.ns.svc", "b.ns.svc.example.org",
		"127.0.0.1", "agg.local"}, cfg.TLSHosts(), "--tls-service replaces its default")

	dir := t.TempDir()
	path := filepath.Join(dir, "agg.yaml")
	require.NoError(t, os.WriteFile(path, []byte("tls-mode: secret\ntls-namespace: ns\ntls-ca-configmap: \"\"\n"), 0o600))
	cfg, err = Load([]string{"--config", path, "--identity", "x"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, TLSModeSecret, cfg.TLSMode)
	assert.Empty(t, cfg.TLSCAConfigMap, "secret mode may leave publishing to someone else")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-mode", "acme"}, "--tls-mode"},
		{[]string{"--tls-mode", "secret", "--tls-namespace", "ns", "--tls-cert", "/c"}, "--tls-cert: and --tls-key are for --tls-mode=files"},
		{[]string{"--tls-mode", "files"}, "--tls-cert: is required with --tls-mode=files"},
		{[]string{"--tls-mode", "secret"}, "--tls-namespace: is required"},
		{[]string{"--tls-namespace", "ns", "--tls-ca-configmap", ""}, "--tls-ca-configmap"},
		{[]string{"--tls-namespace", "ns", "--tls-ca-overlap", "20000h"}, "--tls-ca-overlap"},
		{[]string{"--tls-namespace", "ns", "--tls-cert-validity", "0s"}, "--tls-cert-validity"},
		{[]string{"--tls-namespace", "ns", "--tls-service", ""}, "--tls-service"},
		{[]string{"--tls-namespace", "ns", "--gomaxprocs", "-1"}, "--gomaxprocs: must not be negative"},
	} {
		_, err := Load(append([]string{"--identity", "x"}, tc.args...), io.Discard)
		require.Error(t, err, "%v", tc.args)
		assert.Contains(t, err.Error(), tc.want, "%v", tc.args)
	}
}

func TestParseMaxAges(t *testing.T) {
	got, err := ParseMaxAges("tenant-foo=26h, *=48h")
	require.NoError(t, err)
	assert.Equal(t, map[string]time.Duration{"tenant-foo": 26 * time.Hour, "*": 48 * time.Hour}, got)
	got, err = ParseMaxAges("")
	require.NoError(t, err)
	assert.Empty(t, got)
	for _, bad := range []string{"tenant-foo", "tenant-foo=", "tenant-foo=-1h", "=2h", "a=1h,a=2h"} {
		_, err := ParseMaxAges(bad)
		assert.Error(t, err, bad)
	}
}
