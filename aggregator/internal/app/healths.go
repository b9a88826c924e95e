package app

import (
	"fmt"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"

	"github.com/cozystack/cozy-health/aggregator/internal/metrics"
	"github.com/cozystack/cozy-health/aggregator/internal/watch"
	"github.com/cozystack/cozy-health/aggregator/internal/writer"
	healthv1alpha1 "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
	"github.com/cozystack/cozy-health/pkg/client/clientset/versioned"
)

// trackHealths builds an informer on the Health objects the writer writes
// that exports, from every replica, their status.freshUntil as the
// apiserver holds it (cozy_health_health_fresh_until_timestamp_seconds):
// every object in the platform namespace (namespace) and, when the cluster
// adapters run (allNamespaces), the adapters' objects in every namespace
// (labelled writer.SourceLabel: a tenant's apps, backups and
// control-plane), one series per written object. It is the watchdog's view
// from outside the writer: when the leader's writer stops, or no replica
// leads, the objects' freshUntil passes and the alert fires, whichever
// replica is scraped. An informer that loses the apiserver keeps the last
// values, so it too reads as stale, never as fresh. The cache keeps only
// names, labels and freshUntil. Run starts the informer.
func trackHealths(hc versioned.Interface, namespace string, allNamespaces bool, m *metrics.Metrics, log *zap.Logger) (cache.SharedIndexInformer, error) {
	log = log.With(zap.String("component", "health-watch"))
	watched := namespace
	if allNamespaces {
		watched = metav1.NamespaceAll
	}
	lw := cache.NewListWatchFromClient(hc.HealthV1alpha1().RESTClient(), "healths", watched, fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, &healthv1alpha1.Health{}, 10*time.Minute, cache.Indexers{})
	if err := inf.SetTransform(compactHealth); err != nil {
		return nil, fmt.Errorf("compact watched Health objects: %w", err)
	}
	// written says whether the writer writes h: a label an admin removes,
	// or an object someone else creates elsewhere, gets no series.
	written := func(h *healthv1alpha1.Health) bool {
		return h.Namespace == namespace || h.Labels[writer.SourceLabel] == writer.SourceAdapters
	}
	seen := func(h *healthv1alpha1.Health) {
		if h.Status.FreshUntil == nil || !written(h) {
			m.HealthGone(h.Namespace, h.Name)
			return
		}
		m.HealthFreshUntil(h.Namespace, h.Name, h.Status.FreshUntil.Time)
	}
	err := watch.Handle(inf, seen, func(h *healthv1alpha1.Health) {
		log.Debug("Health object deleted", zap.String("namespace", h.Namespace), zap.String("name", h.Name))
		m.HealthGone(h.Namespace, h.Name)
	})
	if err != nil {
		return nil, err
	}
	return inf, nil
}

// compactHealth keeps what trackHealths reads of a Health object: its
// identity, labels and status.freshUntil (hundreds of tenant objects with
// up to a thousand conditions each are not cached whole).
func compactHealth(obj any) (any, error) {
	h, ok := obj.(*healthv1alpha1.Health)
	if !ok {
		return obj, nil
	}
	c := &healthv1alpha1.Health{}
	c.Name, c.Namespace, c.UID, c.ResourceVersion, c.Labels = h.Name, h.Namespace, h.UID, h.ResourceVersion, h.Labels
	c.Status.FreshUntil = h.Status.FreshUntil
	return c, nil
}
