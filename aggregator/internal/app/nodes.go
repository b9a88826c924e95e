package app

import (
	"context"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/cozystack/cozy-health/aggregator/internal/state"
)

// watchNodes prunes nodes deleted from Kubernetes from the state (and so
// from the metrics and, at the next rollup, from the Health objects).
func watchNodes(ctx context.Context, client kubernetes.Interface, st *state.State, log *zap.Logger) error {
	log = log.With(zap.String("component", "nodes"))
	factory := informers.NewSharedInformerFactoryWithOptions(client, 10*time.Minute)
	inf := factory.Core().V1().Nodes().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if n, ok := obj.(*corev1.Node); ok {
				st.Restore(n.Name)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if n, ok := obj.(*corev1.Node); ok {
				log.Info("node deleted, pruning it", zap.String("node", n.Name))
				st.DeleteNode(n.Name)
			}
		},
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
	return nil
}
