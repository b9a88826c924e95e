package app

import (
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"

	"github.com/cozystack/cozy-health/aggregator/internal/metrics"
	healthv1alpha1 "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
	"github.com/cozystack/cozy-health/pkg/client/clientset/versioned"
)

// trackHealths builds an informer on the Health objects in namespace that
// exports, from every replica, their status.freshUntil as the apiserver
// holds it (cozy_health_health_fresh_until_timestamp_seconds). It is the
// watchdog's view from outside the writer: when the leader's writer stops,
// or no replica leads, the objects' freshUntil passes and the alert fires,
// whichever replica is scraped. An informer that loses the apiserver keeps
// the last values, so it too reads as stale, never as fresh. Run starts
// the informer.
func trackHealths(hc versioned.Interface, namespace string, m *metrics.Metrics, log *zap.Logger) (cache.SharedIndexInformer, error) {
	log = log.With(zap.String("component", "health-watch"))
	lw := cache.NewListWatchFromClient(hc.HealthV1alpha1().RESTClient(), "healths", namespace, fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, &healthv1alpha1.Health{}, 10*time.Minute, cache.Indexers{})
	seen := func(obj any) {
		h, ok := obj.(*healthv1alpha1.Health)
		if !ok {
			return
		}
		if h.Status.FreshUntil == nil {
			m.HealthGone(h.Namespace, h.Name)
			return
		}
		m.HealthFreshUntil(h.Namespace, h.Name, h.Status.FreshUntil.Time)
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, obj any) { seen(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if h, ok := obj.(*healthv1alpha1.Health); ok {
				log.Debug("Health object deleted", zap.String("name", h.Name))
				m.HealthGone(h.Namespace, h.Name)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	return inf, nil
}
