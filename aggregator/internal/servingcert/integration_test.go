package servingcert_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/cozystack/cozy-health/aggregator/internal/servingcert"
	"github.com/cozystack/cozy-health/deploy/render"
	"github.com/cozystack/cozy-health/pkg/tlsutil"
	"github.com/cozystack/cozy-health/test/harness"
	"github.com/cozystack/cozy-health/test/volume"
)

const (
	ns         = "cozy-health"
	secretName = "cozy-health-aggregator-tls"
	cmName     = "cozy-health-ca"
	user       = "cozy-health-aggregator-test"
	serverName = "cozy-health-aggregator.cozy-health.svc"
)

var hosts = []string{"cozy-health-aggregator", "cozy-health-aggregator.cozy-health", serverName,
	"cozy-health-aggregator.cozy-health.svc.cluster.local", "127.0.0.1"}

// plane starts the apiserver with the namespace and a user bound to rules
// (the chart's Role for the aggregator's TLS objects) only.
func plane(t *testing.T, rules []rbacv1.PolicyRule) (*harness.ControlPlane, kubernetes.Interface) {
	t.Helper()
	cp := harness.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, cp.EnsureNamespace(ctx, ns))
	admin := cp.Clientset()
	_, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "tls"}, Rules: rules}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "tls"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "tls"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	rc, err := cp.UserConfig(user)
	require.NoError(t, err)
	return cp, kubernetes.NewForConfigOrDie(rc)
}

// chartRules are the rules of the chart's Role for the serving Secret and
// the CA ConfigMap, rendered for a cluster with or without cert-manager:
// the tests run under exactly what ships. create cannot be narrowed by
// resourceNames (a create request names no existing object the authorizer
// could match), so it is granted on the kind in the namespace; server-side
// apply of a ConfigMap that does not exist yet is a create and is refused
// without it ("cannot create resource configmaps", checked).
func chartRules(t *testing.T, certManager bool) []rbacv1.PolicyRule {
	t.Helper()
	o := render.Options{Namespace: ns}
	if certManager {
		o.APIVersions = []string{"cert-manager.io/v1"}
	}
	r, err := render.Render(o)
	require.NoError(t, err)
	role, err := r.Object("Role", "cozy-health-aggregator-tls")
	require.NoError(t, err)
	var typed rbacv1.Role
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(role.Object, &typed))
	require.NotEmpty(t, typed.Rules)
	return typed.Rules
}

// server is one replica's TLS listener serving GetCertificate.
type server struct {
	m    *servingcert.Manager
	addr string
}

func startManagers(t *testing.T, kube kubernetes.Interface, cfg servingcert.Config, n int) []server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	start := make(chan struct{})
	var out []server
	for i := range n {
		factory := servingcert.InformerFactory(kube, cfg.Namespace, cfg.SecretName)
		m, err := servingcert.New(cfg, kube, factory.Core().V1().Secrets(), prometheus.NewRegistry(), zaptest.NewLogger(t).With(zap.Int("replica", i)), nil)
		require.NoError(t, err)
		wg.Add(1)
		go func() { defer wg.Done(); <-start; factory.Start(ctx.Done()); <-ctx.Done(); factory.Shutdown() }()
		ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: m.GetCertificate})
		require.NoError(t, err)
		wg.Add(2)
		go func() { defer wg.Done(); <-start; assert.NoError(t, m.Run(ctx)) }()
		go func() { defer wg.Done(); serveEcho(ctx, ln) }()
		out = append(out, server{m: m, addr: ln.Addr().String()})
	}
	close(start) // every replica starts at once: they race to create the Secret
	for i, s := range out {
		select {
		case <-s.m.Ready():
		case <-time.After(30 * time.Second):
			t.Fatalf("replica %d has no serving certificate after 30s", i)
		}
	}
	return out
}

// serveEcho accepts TLS connections and echoes what they send.
func serveEcho(ctx context.Context, ln net.Listener) {
	go func() { <-ctx.Done(); _ = ln.Close() }()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
	}
}

// dial makes a real TLS handshake to addr as an agent does: verifying
// serverName against the CA bundle file as it is now.
func dial(ca *tlsutil.CAFile, addr, name string) (*tls.Conn, error) {
	pool, _, err := ca.Pool()
	if pool == nil {
		return nil, err
	}
	return tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: name})
}

// kubelet copies the CA ConfigMap into a volume directory the way the
// kubelet updates a ConfigMap volume (atomic symlink swap), polling every
// 100 ms; it returns the ca.crt path.
func kubelet(t *testing.T, admin kubernetes.Interface) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "aggregator-ca")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		last := ""
		for ctx.Err() == nil {
			cm, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, cmName, metav1.GetOptions{})
			if err == nil && cm.Data["ca.crt"] != last {
				if err := volume.Write(dir, map[string][]byte{"ca.crt": []byte(cm.Data["ca.crt"])}); err == nil {
					last = cm.Data["ca.crt"]
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return filepath.Join(dir, "ca.crt")
}

func served(t *testing.T, s server) *x509.Certificate {
	t.Helper()
	c, err := s.m.GetCertificate(nil)
	require.NoError(t, err)
	return c.Leaf
}

// TestReplicasRaceToOneCA: three replicas start at once on an empty
// namespace, each bound to the least RBAC the mode needs. Exactly one
// Secret is created; all three serve its certificate, signed by its one CA;
// the ConfigMap carries that CA; an agent verifying with the ConfigMap's
// bundle completes real handshakes with each replica under the Service's
// DNS name.
func TestReplicasRaceToOneCA(t *testing.T) {
	cp, kube := plane(t, chartRules(t, false))
	admin := cp.Clientset()
	cfg := servingcert.Config{Mode: servingcert.ModeSelfSigned, Namespace: ns, SecretName: secretName, ConfigMapName: cmName,
		Hosts: hosts, CAValidity: 24 * time.Hour, CertValidity: time.Hour, CAOverlap: time.Hour}
	servers := startManagers(t, kube, cfg, 3)

	ctx := context.Background()
	sec, err := admin.CoreV1().Secrets(ns).Get(ctx, secretName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, corev1.SecretTypeTLS, sec.Type)
	bundle, err := tlsutil.ParseCertificates(sec.Data["ca.crt"])
	require.NoError(t, err)
	require.Len(t, bundle, 1, "one CA")
	pair, err := tls.X509KeyPair(sec.Data["tls.crt"], sec.Data["tls.key"])
	require.NoError(t, err)
	for i, s := range servers {
		leaf := served(t, s)
		assert.Equal(t, pair.Certificate[0], leaf.Raw, "replica %d serves the Secret's certificate", i)
		require.NoError(t, leaf.CheckSignatureFrom(bundle[0]))
	}
	require.Eventually(t, func() bool {
		cm, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, cmName, metav1.GetOptions{})
		return err == nil && cm.Data["ca.crt"] == string(sec.Data["ca.crt"])
	}, 10*time.Second, 100*time.Millisecond, "the ConfigMap carries the CA")

	ca := tlsutil.NewCAFile(kubelet(t, admin))
	require.Eventually(t, func() bool { _, _, err := ca.Pool(); return err == nil }, 10*time.Second, 50*time.Millisecond)
	for i, s := range servers {
		for _, name := range []string{serverName, "cozy-health-aggregator", "cozy-health-aggregator.cozy-health.svc.cluster.local", "127.0.0.1"} {
			c, err := dial(ca, s.addr, name)
			require.NoError(t, err, "replica %d as %s", i, name)
			_ = c.Close()
		}
		_, err := dial(ca, s.addr, "cozy-health-aggregator.other.svc")
		require.Error(t, err, "a name the certificate does not carry")
	}

	// Least privilege: nothing but the two objects.
	_, err = kube.CoreV1().Secrets(ns).Get(ctx, "other", metav1.GetOptions{})
	assert.True(t, apierrors.IsForbidden(err), "%v", err)
	_, err = kube.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	assert.True(t, apierrors.IsForbidden(err), "%v", err)
}

// TestServingRotationWithoutRestart: a serving certificate valid for 4 s is
// renewed in its last third; every replica swaps to the new one without a
// restart (new handshakes get it), a connection opened before keeps
// working, and no handshake fails meanwhile.
func TestServingRotationWithoutRestart(t *testing.T) {
	cp, kube := plane(t, chartRules(t, false))
	cfg := servingcert.Config{Mode: servingcert.ModeSelfSigned, Namespace: ns, SecretName: secretName, ConfigMapName: cmName,
		Hosts: hosts, CAValidity: time.Hour, CertValidity: 4 * time.Second, CAOverlap: time.Minute}
	servers := startManagers(t, kube, cfg, 2)
	ca := tlsutil.NewCAFile(kubelet(t, cp.Clientset()))
	require.Eventually(t, func() bool { _, _, err := ca.Pool(); return err == nil }, 10*time.Second, 50*time.Millisecond)

	old, err := dial(ca, servers[0].addr, serverName)
	require.NoError(t, err)
	defer old.Close()
	first := old.ConnectionState().PeerCertificates[0]

	serials := map[string]bool{}
	deadline := time.Now().Add(12 * time.Second)
	for time.Now().Before(deadline) && len(serials) < 3 {
		for i, s := range servers {
			c, err := dial(ca, s.addr, serverName)
			require.NoError(t, err, "replica %d: no handshake fails across renewals", i)
			leaf := c.ConnectionState().PeerCertificates[0]
			require.True(t, time.Now().Before(leaf.NotAfter), "never an expired certificate")
			serials[leaf.SerialNumber.String()] = true
			_ = c.Close()
		}
		time.Sleep(200 * time.Millisecond)
	}
	assert.GreaterOrEqual(t, len(serials), 3, "renewed twice within 12 s at a 4 s validity")
	assert.False(t, serials[first.SerialNumber.String()] && len(serials) == 1)
	for i, s := range servers {
		assert.NotEqual(t, first.SerialNumber, served(t, s).SerialNumber, "replica %d swapped without a restart", i)
	}

	// The connection made before the renewals still carries data.
	_, err = old.Write([]byte("ping"))
	require.NoError(t, err)
	buf := make([]byte, 4)
	_, err = io.ReadFull(old, buf)
	require.NoError(t, err)
	assert.Equal(t, "ping", string(buf))
}

// TestCARotationKeepsAgentsConnecting: a CA valid for 15 s is rotated with
// a 2 s overlap across three replicas while an agent (its CA bundle file
// updated the kubelet's way from the ConfigMap) handshakes with every
// replica every 150 ms. Not one handshake fails: the bundle carries both
// CAs before any replica serves a certificate of the new one. Once the old
// CA expires it leaves the bundle.
func TestCARotationKeepsAgentsConnecting(t *testing.T) {
	cp, kube := plane(t, chartRules(t, false))
	admin := cp.Clientset()
	cfg := servingcert.Config{Mode: servingcert.ModeSelfSigned, Namespace: ns, SecretName: secretName, ConfigMapName: cmName,
		Hosts: hosts, CAValidity: 15 * time.Second, CertValidity: 4 * time.Second, CAOverlap: 2 * time.Second}
	servers := startManagers(t, kube, cfg, 3)
	ca := tlsutil.NewCAFile(kubelet(t, admin))
	require.Eventually(t, func() bool { _, _, err := ca.Pool(); return err == nil }, 10*time.Second, 50*time.Millisecond)

	ctx := context.Background()
	sec, err := admin.CoreV1().Secrets(ns).Get(ctx, secretName, metav1.GetOptions{})
	require.NoError(t, err)
	bundle, err := tlsutil.ParseCertificates(sec.Data["ca.crt"])
	require.NoError(t, err)
	ca1 := bundle[0]

	var handshakes, failures atomic.Int64
	issuers := sync.Map{}
	var lastErr atomic.Value
	stop := time.Now().Add(19 * time.Second)
	for time.Now().Before(stop) {
		for _, s := range servers {
			c, err := dial(ca, s.addr, serverName)
			handshakes.Add(1)
			if err != nil {
				failures.Add(1)
				lastErr.Store(err)
				continue
			}
			issuers.Store(c.ConnectionState().PeerCertificates[0].Issuer.CommonName, true)
			_ = c.Close()
		}
		time.Sleep(150 * time.Millisecond)
	}
	t.Logf("%d handshakes across the CA rotation, %d failed", handshakes.Load(), failures.Load())
	if err, _ := lastErr.Load().(error); err != nil {
		t.Logf("last failure: %v", err)
	}
	assert.Zero(t, failures.Load())
	n := 0
	issuers.Range(func(any, any) bool { n++; return true })
	assert.GreaterOrEqual(t, n, 2, "certificates of a new CA were served")

	sec, err = admin.CoreV1().Secrets(ns).Get(ctx, secretName, metav1.GetOptions{})
	require.NoError(t, err)
	bundle, err = tlsutil.ParseCertificates(sec.Data["ca.crt"])
	require.NoError(t, err)
	for _, c := range bundle {
		assert.False(t, c.Equal(ca1), "the first CA expired 15 s in and left the bundle")
	}
	leaf := served(t, servers[0])
	assert.False(t, errors.Is(leaf.CheckSignatureFrom(ca1), nil), "served by a later CA")
}

// issuedSecret is a Secret as cert-manager's CA Issuer writes it.
func issuedSecret(t *testing.T, ca *tlsutil.CA) *corev1.Secret {
	t.Helper()
	crt, key, err := ca.IssueServing(time.Hour, hosts...)
	require.NoError(t, err)
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secretName, Namespace: ns, Annotations: map[string]string{"cert-manager.io/certificate-name": "cozy-health-aggregator"}},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": crt, "tls.key": key, "ca.crt": ca.CertPEM},
	}
}

// TestSecretModeFollowsCertManager: with cert-manager the aggregator only
// reads the Secret: before it exists nothing is served (and nothing is
// created); once written its certificate is served and its ca.crt
// published; a renewal (new key, new CA) is served without a restart.
func TestSecretModeFollowsCertManager(t *testing.T) {
	cp, kube := plane(t, chartRules(t, true))
	admin := cp.Clientset()
	ctx := context.Background()
	cfg := servingcert.Config{Mode: servingcert.ModeSecret, Namespace: ns, SecretName: secretName, ConfigMapName: cmName}
	factory := servingcert.InformerFactory(kube, ns, secretName)
	m, err := servingcert.New(cfg, kube, factory.Core().V1().Secrets(), prometheus.NewRegistry(), zaptest.NewLogger(t), nil)
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	factory.Start(rctx.Done())
	t.Cleanup(factory.Shutdown)
	done := make(chan error, 1)
	go func() { done <- m.Run(rctx) }()
	t.Cleanup(func() { cancel(); assert.NoError(t, <-done) })

	time.Sleep(time.Second)
	_, err = m.GetCertificate(nil)
	require.ErrorContains(t, err, "no serving certificate yet")
	_, err = admin.CoreV1().Secrets(ns).Get(ctx, secretName, metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "secret mode never creates the Secret")

	ca1, err := tlsutil.NewCA("cert-manager CA 1", time.Hour)
	require.NoError(t, err)
	sec, err := admin.CoreV1().Secrets(ns).Create(ctx, issuedSecret(t, ca1), metav1.CreateOptions{})
	require.NoError(t, err)
	select {
	case <-m.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("the Secret's certificate was not loaded")
	}
	require.Eventually(t, func() bool {
		cm, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, cmName, metav1.GetOptions{})
		return err == nil && cm.Data["ca.crt"] == string(ca1.CertPEM)
	}, 10*time.Second, 100*time.Millisecond)

	ca2, err := tlsutil.NewCA("cert-manager CA 2", time.Hour)
	require.NoError(t, err)
	renewed := issuedSecret(t, ca2)
	renewed.ResourceVersion = sec.ResourceVersion
	_, err = admin.CoreV1().Secrets(ns).Update(ctx, renewed, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		c, err := m.GetCertificate(nil)
		return err == nil && c.Leaf.CheckSignatureFrom(ca2.Cert()) == nil
	}, 10*time.Second, 50*time.Millisecond, "the renewed certificate is served without a restart")
	require.Eventually(t, func() bool {
		cm, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, cmName, metav1.GetOptions{})
		return err == nil && cm.Data["ca.crt"] == string(ca2.CertPEM)
	}, 10*time.Second, 100*time.Millisecond)
}

// TestSelfSignedLeavesAForeignSecretAlone: a Secret the aggregator did not
// create (no ca.key: cert-manager's, or one made by hand) is served as it
// is in self-signed mode and never rewritten.
func TestSelfSignedLeavesAForeignSecretAlone(t *testing.T) {
	cp, kube := plane(t, chartRules(t, false))
	admin := cp.Clientset()
	ctx := context.Background()
	ca, err := tlsutil.NewCA("someone else's CA", time.Hour)
	require.NoError(t, err)
	sec, err := admin.CoreV1().Secrets(ns).Create(ctx, issuedSecret(t, ca), metav1.CreateOptions{})
	require.NoError(t, err)
	cfg := servingcert.Config{Mode: servingcert.ModeSelfSigned, Namespace: ns, SecretName: secretName, ConfigMapName: cmName,
		Hosts: []string{"other-name"}, CAValidity: time.Hour, CertValidity: 2 * time.Second, CAOverlap: time.Minute}
	servers := startManagers(t, kube, cfg, 1)
	require.NoError(t, served(t, servers[0]).CheckSignatureFrom(ca.Cert()))
	time.Sleep(2 * time.Second)
	got, err := admin.CoreV1().Secrets(ns).Get(ctx, secretName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, sec.ResourceVersion, got.ResourceVersion, "not rewritten despite other hosts and a short validity")
}

// TestOwnerConfigMap: the objects the aggregator creates are owned by the
// chart's configuration ConfigMap (helm uninstall deletes it, the garbage
// collector the rest). Without that ConfigMap (the aggregator run outside
// the chart) TLS comes up all the same, unowned.
func TestOwnerConfigMap(t *testing.T) {
	cp, kube := plane(t, chartRules(t, false))
	admin := cp.Clientset()
	ctx := context.Background()
	cfg := servingcert.Config{Mode: servingcert.ModeSelfSigned, Namespace: ns, SecretName: secretName, ConfigMapName: cmName,
		OwnerConfigMap: "cozy-health-aggregator", Hosts: hosts, CAValidity: time.Hour, CertValidity: time.Hour, CAOverlap: time.Minute}
	startManagers(t, kube, cfg, 1) // fails the test unless a certificate is served
	sec, err := admin.CoreV1().Secrets(ns).Get(ctx, secretName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, sec.OwnerReferences, "no owner to point at")

	owner, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cozy-health-aggregator"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, admin.CoreV1().Secrets(ns).Delete(ctx, secretName, metav1.DeleteOptions{}))
	require.Eventually(t, func() bool {
		sec, err := admin.CoreV1().Secrets(ns).Get(ctx, secretName, metav1.GetOptions{})
		return err == nil && len(sec.OwnerReferences) == 1 && sec.OwnerReferences[0].UID == owner.UID
	}, 15*time.Second, 100*time.Millisecond, "the Secret made again is owned by the ConfigMap")
	require.Eventually(t, func() bool {
		cm, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, cmName, metav1.GetOptions{})
		return err == nil && len(cm.OwnerReferences) == 1 && cm.OwnerReferences[0].UID == owner.UID
	}, 15*time.Second, 100*time.Millisecond, "so is the CA ConfigMap, published with the new CA")
}
