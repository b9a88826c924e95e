// Package servingcert gives the aggregator its gRPC serving certificate from
// the Secret cozy-health-aggregator-tls (tls.crt, tls.key, ca.crt) and
// publishes the CA agents trust in the ConfigMap cozy-health-ca (ca.crt).
//
// Every replica watches the one Secret (a shared informer restricted to its
// name) and swaps the certificate it serves through tls.Config's
// GetCertificate as soon as the Secret changes: no restart, no volume.
//
// Two ways to fill the Secret:
//
//   - ModeSecret: cert-manager (the chart's Issuer/Certificate chain)
//     writes it; the aggregator only reads it and publishes its ca.crt.
//   - ModeSelfSigned: without cert-manager the aggregator keeps the Secret
//     itself. The first replica to start creates it with a new CA and a
//     serving certificate for the Service's DNS names; replicas racing at
//     start all try to create it, exactly one create succeeds (the
//     apiserver's AlreadyExists), and the others read and use that one, so
//     all agree on one CA. Later changes are updates conditional on the
//     resourceVersion read (optimistic concurrency): a replica that loses
//     the race reads the winner's Secret and finds nothing left to do. The
//     serving certificate is renewed in its last third; the CA is rotated
//     with an overlap: the next CA is published beside the current one
//     (ca.crt and the ConfigMap carry both) for --tls-ca-overlap before it
//     signs, so every agent has re-read a bundle that trusts both before
//     any replica serves a certificate of the new CA. The CA's private key
//     lives in the Secret (ca.key, and ca-next.key during a rotation).
package servingcert

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// Modes of --tls-mode besides "files" (which does not use this package).
const (
	ModeSecret     = "secret"
	ModeSelfSigned = "self-signed"
)

// FieldManager writes the Secret and applies the ConfigMap.
const FieldManager = "cozy-health-aggregator"

// Labels on what the aggregator creates.
var managedLabels = map[string]string{
	"app.kubernetes.io/name":       "cozy-health-aggregator",
	"app.kubernetes.io/managed-by": "cozy-health-aggregator",
}

// Config configures a Manager.
type Config struct {
	// Mode is ModeSecret or ModeSelfSigned.
	Mode string
	// Namespace holds the Secret and the ConfigMap (the release namespace).
	Namespace string
	// SecretName is the serving Secret (cozy-health-aggregator-tls).
	SecretName string
	// ConfigMapName is the CA ConfigMap (cozy-health-ca); "" publishes
	// nothing.
	ConfigMapName string
	// OwnerConfigMap names a ConfigMap in Namespace that becomes the owner
	// (metadata.ownerReferences) of the Secret this Manager creates and of
	// the CA ConfigMap, so the garbage collector removes both when it is
	// deleted (helm uninstall deletes the chart's configuration ConfigMap).
	// Empty: no owner.
	OwnerConfigMap string
	// Hosts are the serving certificate's SANs (ModeSelfSigned): DNS names
	// and IP addresses; the first is also the subject's common name.
	Hosts []string
	// CAValidity, CertValidity and CAOverlap rule rotation (ModeSelfSigned).
	CAValidity, CertValidity, CAOverlap time.Duration
	// Resync re-applies the ConfigMap this often even when nothing changed
	// (someone deleted or edited it); default 10 minutes.
	Resync time.Duration
}

// InformerFactory is the informer factory the Manager's Secret watch comes
// from: scoped to the namespace and to the Secret's name, so RBAC can grant
// list and watch on that one name (resourceNames; the apiserver matches a
// metadata.name field selector against them), which a namespace- or
// cluster-wide Secret informer could not use. The aggregator keeps it
// beside its shared factory and starts both at the same place.
func InformerFactory(kube kubernetes.Interface, namespace, secretName string) informers.SharedInformerFactory {
	return informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", secretName).String()
		}))
}

// Manager serves the certificate of the Secret and keeps the Secret and the
// ConfigMap.
type Manager struct {
	cfg   Config
	owner *metav1.OwnerReference // resolved OwnerConfigMap
	kube  kubernetes.Interface
	log   *zap.Logger
	clock clock.Clock

	secrets coreinformers.SecretInformer
	kick    chan struct{}

	cert   atomic.Pointer[tls.Certificate]
	ready  chan struct{}
	once   sync.Once
	expiry prometheus.Gauge
	issued *prometheus.CounterVec

	// Only Run's goroutine touches the fields below.
	servedRaw          []byte
	published          []byte
	publishedAt        time.Time
	warnedUnmanaged    bool
	warnedWaiting      bool
	warnedOwner        string
	consecutiveFailure int
}

// New builds a Manager on secrets (from InformerFactory, started by the
// caller) and registers its event handler; nothing is read until Run.
func New(cfg Config, kube kubernetes.Interface, secrets coreinformers.SecretInformer, reg prometheus.Registerer, log *zap.Logger, clk clock.Clock) (*Manager, error) {
	if cfg.Mode != ModeSecret && cfg.Mode != ModeSelfSigned {
		return nil, fmt.Errorf("servingcert: mode %q: want %s or %s", cfg.Mode, ModeSecret, ModeSelfSigned)
	}
	if cfg.Namespace == "" || cfg.SecretName == "" {
		return nil, errors.New("servingcert: namespace and Secret name are required")
	}
	if cfg.Mode == ModeSelfSigned && (len(cfg.Hosts) == 0 || cfg.CAValidity <= 0 || cfg.CertValidity <= 0 || cfg.CAOverlap < 0) {
		return nil, errors.New("servingcert: self-signed mode needs hosts and positive validities")
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 10 * time.Minute
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	m := &Manager{
		cfg: cfg, kube: kube, secrets: secrets, kick: make(chan struct{}, 1), clock: clk, ready: make(chan struct{}),
		log: log.With(zap.String("component", "serving-cert"), zap.String("secret", cfg.Namespace+"/"+cfg.SecretName)),
		expiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cozy_health_tls_serving_certificate_expiry_timestamp_seconds",
			Help: "Unix time at which the serving certificate this replica serves expires.",
		}),
		issued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cozy_health_tls_certificates_issued_total",
			Help: "Certificates this replica minted into the self-kept Secret, by kind (ca, serving).",
		}, []string{"kind"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.expiry, m.issued} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register serving-cert metrics: %w", err)
			}
		}
	}
	poke := func(any) {
		select {
		case m.kick <- struct{}{}:
		default:
		}
	}
	if _, err := secrets.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: poke, UpdateFunc: func(_, o any) { poke(o) }, DeleteFunc: poke,
	}); err != nil {
		return nil, fmt.Errorf("watch the serving Secret: %w", err)
	}
	return m, nil
}

// GetCertificate serves the certificate of the Secret as last seen; set it
// as tls.Config.GetCertificate.
func (m *Manager) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := m.cert.Load(); c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("no serving certificate yet: Secret %s/%s not loaded", m.cfg.Namespace, m.cfg.SecretName)
}

// Ready is closed once a serving certificate is loaded.
func (m *Manager) Ready() <-chan struct{} { return m.ready }

// policy is the part of the configuration maintain follows.
func (m *Manager) policy() policy {
	return policy{hosts: m.cfg.Hosts, caValidity: m.cfg.CAValidity, certValidity: m.cfg.CertValidity, caOverlap: m.cfg.CAOverlap}
}

// Run keeps the Secret, the served certificate and the ConfigMap in step
// until ctx is done. The informer factory must be started.
func (m *Manager) Run(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), m.secrets.Informer().HasSynced) {
		return nil // ctx done
	}
	m.log.Info("watching the serving Secret", zap.String("mode", m.cfg.Mode))
	for {
		wait := m.sync(ctx, m.secrets.Lister())
		t := m.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-m.kick:
		case <-t.C():
		}
		t.Stop()
	}
}

// sync brings the Secret, the served certificate and the ConfigMap in step
// once and says how long to wait before the next pass (unless the Secret
// changes before).
func (m *Manager) sync(ctx context.Context, lister corelisters.SecretLister) time.Duration {
	now := m.clock.Now()
	sec, err := lister.Secrets(m.cfg.Namespace).Get(m.cfg.SecretName)
	switch {
	case apierrors.IsNotFound(err) && m.cfg.Mode == ModeSelfSigned:
		sec, err = m.bootstrap(ctx, now)
	case apierrors.IsNotFound(err):
		if !m.warnedWaiting {
			m.log.Warn("serving Secret not found; waiting for cert-manager to issue it (the chart's Certificate cozy-health-aggregator)")
			m.warnedWaiting = true
		}
		return m.cfg.Resync
	}
	if err != nil {
		return m.failed("read the serving Secret", err)
	}
	m.warnedWaiting = false
	next := now.Add(m.cfg.Resync)
	if m.cfg.Mode == ModeSelfSigned {
		if len(sec.Data[KeyCAKey]) == 0 {
			if !m.warnedUnmanaged {
				m.log.Warn("the serving Secret holds no ca.key: it was not created by the aggregator (cert-manager or by hand), so it is served as it is and never rotated; use --tls-mode=secret for it, or delete it to let the aggregator create its own")
				m.warnedUnmanaged = true
			}
		} else {
			if sec, err = m.maintain(ctx, sec); err != nil {
				return m.failed("maintain the serving Secret", err)
			}
			if w := wake(m.clock.Now(), m.policy(), sec.Data, sec.Annotations); !w.IsZero() && w.Before(next) {
				next = w
			}
		}
	}
	if err := m.serve(sec); err != nil {
		return m.failed("load the serving certificate", err)
	}
	if err := m.publish(ctx, sec.Data[KeyCA]); err != nil {
		return m.failed("publish the CA ConfigMap", err)
	}
	m.consecutiveFailure = 0
	return max(next.Sub(m.clock.Now()), 100*time.Millisecond)
}

// failed logs err and returns a backoff (1 s doubling to 1 min).
func (m *Manager) failed(what string, err error) time.Duration {
	m.consecutiveFailure++
	d := min(time.Second<<min(m.consecutiveFailure-1, 6), time.Minute)
	m.log.Error("could not "+what+"; retrying", zap.Error(err), zap.Duration("retryIn", d), zap.Int("failures", m.consecutiveFailure))
	return d
}

// bootstrap creates the Secret with a new CA and serving certificate. When
// another replica created it first, its Secret is read and used.
func (m *Manager) bootstrap(ctx context.Context, now time.Time) (*corev1.Secret, error) {
	data, err := initial(now, m.policy())
	if err != nil {
		return nil, err
	}
	owner := m.ownerRef(ctx)
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: m.cfg.SecretName, Namespace: m.cfg.Namespace, Labels: managedLabels},
		Type:       corev1.SecretTypeTLS,
		Data:       data,
	}
	if owner != nil {
		s.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	api := m.kube.CoreV1().Secrets(m.cfg.Namespace)
	created, err := api.Create(ctx, s, metav1.CreateOptions{FieldManager: FieldManager})
	if apierrors.IsAlreadyExists(err) {
		m.log.Info("another replica created the serving Secret first; using its CA")
		return api.Get(ctx, m.cfg.SecretName, metav1.GetOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("create the serving Secret: %w", err)
	}
	m.issued.WithLabelValues("ca").Inc()
	m.issued.WithLabelValues("serving").Inc()
	m.log.Info("created the serving Secret with a new CA and serving certificate", zap.Strings("hosts", m.cfg.Hosts))
	return created, nil
}

// maintain applies maintain's plan to sec, conditional on its
// resourceVersion; on a conflict it reads the Secret again from the
// apiserver and plans again.
func (m *Manager) maintain(ctx context.Context, sec *corev1.Secret) (*corev1.Secret, error) {
	api := m.kube.CoreV1().Secrets(m.cfg.Namespace)
	for attempt := 1; ; attempt++ {
		pl, err := maintain(m.clock.Now(), m.policy(), sec.Data, sec.Annotations, func(bundle []byte) bool { return m.configMapHolds(ctx, bundle) })
		if err != nil {
			return sec, err
		}
		if len(pl.actions) == 0 {
			return sec, nil
		}
		upd := sec.DeepCopy()
		upd.Data, upd.Annotations = pl.data, pl.annotations
		out, err := api.Update(ctx, upd, metav1.UpdateOptions{FieldManager: FieldManager})
		if err == nil {
			if pl.caRotated {
				m.issued.WithLabelValues("ca").Inc()
			}
			if pl.servingIssued {
				m.issued.WithLabelValues("serving").Inc()
			}
			m.log.Info("updated the serving Secret", zap.Strings("actions", pl.actions))
			return out, nil
		}
		if !apierrors.IsConflict(err) || attempt == 5 {
			return sec, fmt.Errorf("update the serving Secret: %w", err)
		}
		m.log.Debug("another replica updated the serving Secret first; reading it again", zap.Error(err))
		if sec, err = api.Get(ctx, m.cfg.SecretName, metav1.GetOptions{}); err != nil {
			return nil, fmt.Errorf("read the serving Secret: %w", err)
		}
	}
}

// ownerRef returns the owner reference to OwnerConfigMap (read once; nil
// when none is configured). An owner that cannot be read (not there: the
// aggregator runs outside the chart, as in the lab; or not readable) never
// holds up TLS: the objects are written without an owner, which only means
// nothing garbage-collects them, and the owner is looked up again the next
// time one is written.
func (m *Manager) ownerRef(ctx context.Context) *metav1.OwnerReference {
	if m.cfg.OwnerConfigMap == "" || m.owner != nil {
		return m.owner
	}
	cm, err := m.kube.CoreV1().ConfigMaps(m.cfg.Namespace).Get(ctx, m.cfg.OwnerConfigMap, metav1.GetOptions{})
	if err != nil {
		if msg := err.Error(); msg != m.warnedOwner {
			m.log.Warn("the owner ConfigMap cannot be read: the serving Secret and the CA ConfigMap are written without an owner (nothing garbage-collects them on uninstall)",
				zap.String("owner", m.cfg.Namespace+"/"+m.cfg.OwnerConfigMap), zap.Error(err))
			m.warnedOwner = msg
		}
		return nil
	}
	m.owner = &metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: cm.Name, UID: cm.UID}
	return m.owner
}

// configMapHolds reports whether the CA ConfigMap already carries bundle.
func (m *Manager) configMapHolds(ctx context.Context, bundle []byte) bool {
	if m.cfg.ConfigMapName == "" {
		return true
	}
	cm, err := m.kube.CoreV1().ConfigMaps(m.cfg.Namespace).Get(ctx, m.cfg.ConfigMapName, metav1.GetOptions{})
	if err != nil {
		m.log.Warn("read the CA ConfigMap before switching CAs", zap.Error(err))
		return false
	}
	return cm.Data[KeyCA] == string(bundle)
}

// serve swaps the served certificate when the Secret's pair changed.
func (m *Manager) serve(sec *corev1.Secret) error {
	raw := append(append([]byte{}, sec.Data[KeyCert]...), sec.Data[KeyKey]...)
	if m.cert.Load() != nil && bytes.Equal(raw, m.servedRaw) {
		return nil
	}
	pair, err := tls.X509KeyPair(sec.Data[KeyCert], sec.Data[KeyKey])
	if err != nil {
		return fmt.Errorf("serving Secret %s/%s: %w", m.cfg.Namespace, m.cfg.SecretName, err)
	}
	if pair.Leaf == nil {
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return fmt.Errorf("parse serving certificate: %w", err)
		}
	}
	m.cert.Store(&pair)
	m.servedRaw = raw
	m.expiry.Set(float64(pair.Leaf.NotAfter.Unix()))
	m.once.Do(func() { close(m.ready) })
	m.log.Info("serving certificate loaded", zap.String("serial", pair.Leaf.SerialNumber.Text(16)),
		zap.String("issuer", pair.Leaf.Issuer.CommonName), zap.Time("notAfter", pair.Leaf.NotAfter), zap.Strings("dnsNames", pair.Leaf.DNSNames))
	return nil
}

// publish applies the CA ConfigMap (server-side apply) when the bundle
// changed, and every Resync in case it was edited or deleted.
func (m *Manager) publish(ctx context.Context, bundle []byte) error {
	if m.cfg.ConfigMapName == "" {
		return nil
	}
	if len(bundle) == 0 {
		return fmt.Errorf("serving Secret %s/%s has no %s to publish", m.cfg.Namespace, m.cfg.SecretName, KeyCA)
	}
	now := m.clock.Now()
	if bytes.Equal(bundle, m.published) && now.Sub(m.publishedAt) < m.cfg.Resync {
		return nil
	}
	owner := m.ownerRef(ctx)
	ac := corev1ac.ConfigMap(m.cfg.ConfigMapName, m.cfg.Namespace).
		WithLabels(managedLabels).
		WithData(map[string]string{KeyCA: string(bundle)})
	if owner != nil {
		ac.WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(owner.APIVersion).WithKind(owner.Kind).WithName(owner.Name).WithUID(owner.UID))
	}
	if _, err := m.kube.CoreV1().ConfigMaps(m.cfg.Namespace).Apply(ctx, ac, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
		return fmt.Errorf("apply ConfigMap %s/%s: %w", m.cfg.Namespace, m.cfg.ConfigMapName, err)
	}
	if !bytes.Equal(bundle, m.published) {
		m.log.Info("published the CA bundle", zap.String("configMap", m.cfg.Namespace+"/"+m.cfg.ConfigMapName))
	}
	m.published, m.publishedAt = bundle, now
	return nil
}
