package app

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/cozystack/cozy-health/aggregator/internal/adapterkit"
	"github.com/cozystack/cozy-health/aggregator/internal/adapters"
	"github.com/cozystack/cozy-health/aggregator/internal/config"
	"github.com/cozystack/cozy-health/aggregator/internal/writer"
)

// newAdapters wires the cluster adapters (adapters.All) to the publisher on a
// dynamic client of their own (its informers follow CRDs as they come and
// go, which a static factory cannot).
func (a *App) newAdapters(cfg config.Config, rc *rest.Config) (*adapterkit.Manager, error) {
	ages, err := config.ParseMaxAges(cfg.BackupMaxAge)
	if err != nil {
		return nil, fmt.Errorf("--backup-max-age: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	return adapterkit.NewManager(adapterkit.Config{
		Namespace: cfg.Namespace, FreshFor: cfg.AdapterFreshFor, Period: cfg.AdapterPeriod,
		SyncTimeout: cfg.AdapterSyncTimeout, BackupMaxAge: ages, Metrics: a.metrics, Ready: a.writer.AdaptersReady,
	}, dyn, adapters.All(), a.publish, a.base, a.clock), nil
}

// seedAdapterTransitions reads the adapter objects an earlier leader wrote
// (labelled writer.SourceLabel, in any namespace) so their conditions keep
// lastTransitionTime across failovers.
func (a *App) seedAdapterTransitions(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	list, err := a.hc.HealthV1alpha1().Healths(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: writer.SourceLabel + "=" + writer.SourceAdapters})
	if err != nil {
		a.log.Warn("read adapter Health objects to keep their lastTransitionTime; transitions date from this start", zap.Error(err))
		return
	}
	for _, h := range list.Items {
		conds := make([]adapterkit.SeedCondition, 0, len(h.Status.Conditions))
		for _, c := range h.Status.Conditions {
			sc := adapterkit.SeedCondition{Type: c.Type, Status: string(c.Status), Reason: c.Reason, At: c.LastTransitionTime.Time}
			if r := c.ResourceRef; r != nil {
				sc.Ref = r.Kind + "/" + r.Namespace + "/" + r.Name
			}
			conds = append(conds, sc)
		}
		a.adapters.Seed(h.Namespace, h.Spec.Component, conds)
	}
}
