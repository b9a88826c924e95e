package app

import (
	"fmt"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/cozystack/cozy-health/aggregator/internal/state"
)

// trackNodes keeps the state's node set in step with Kubernetes through
// the shared Node informer: a Node that matches selector (the nodes the
// agent DaemonSet runs on) is expected to report, so one whose agent never
// reached this replica reads Unknown (HeartbeatMissed) instead of being
// absent; a Node deleted from Kubernetes is pruned from the state (and so
// from the metrics and, at the next rollup, from the Health objects). Each
// Node's role (control-plane by node-role.kubernetes.io/control-plane, a
// label NodeRestriction refuses from kubelets) goes to the state: raft
// member claims are believed only from control-plane nodes. It only
// registers handlers: the informer runs when Run starts the factory.
func trackNodes(inf cache.SharedIndexInformer, st *state.State, selector labels.Selector, now func() time.Time, log *zap.Logger) error {
	log = log.With(zap.String("component", "nodes"))
	seen := func(n *corev1.Node) {
		st.Restore(n.Name)
		st.SetRole(n.Name, state.RoleOf(n.Labels))
		if selector.Matches(labels.Set(n.Labels)) {
			st.Expect(n.Name, now())
		} else {
			st.Unexpect(n.Name)
		}
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if n, ok := obj.(*corev1.Node); ok {
				seen(n)
			}
		},
		UpdateFunc: func(_, obj any) {
			if n, ok := obj.(*corev1.Node); ok {
				seen(n)
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
		return fmt.Errorf("node informer handler: %w", err)
	}
	return nil
}
