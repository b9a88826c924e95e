package app

import (
	"fmt"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/aggregator/internal/watch"
)

// NodeLeaseNamespace is where every kubelet renews its node's Lease
// (named after the node; spec.renewTime every 10 s, leaseDurationSeconds
// 40 by default): the node lifecycle controller's heartbeat, read here to
// tell a silent agent on a live node (AgentSilent) from a node that is
// gone (NodeUnreachable).
const NodeLeaseNamespace = corev1.NamespaceNodeLease

// kubeletLeases returns the informer factory of kube-node-lease's Leases,
// with handlers that hand each Lease's renewal to the state. Only
// list and watch of Leases in that namespace are needed (the chart's Role
// in kube-node-lease).
func kubeletLeases(kube kubernetes.Interface, st *state.State, now func() time.Time, log *zap.Logger) (informers.SharedInformerFactory, cache.InformerSynced, error) {
	f := informers.NewSharedInformerFactoryWithOptions(kube, 10*time.Minute, informers.WithNamespace(NodeLeaseNamespace))
	inf := f.Coordination().V1().Leases().Informer()
	seen := func(l *coordinationv1.Lease) {
		if l.Spec.RenewTime == nil {
			return
		}
		var d time.Duration
		if l.Spec.LeaseDurationSeconds != nil {
			d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
		}
		st.SetKubeletLease(l.Name, l.Spec.RenewTime.Time, d, now())
	}
	err := watch.Handle(inf, seen, func(l *coordinationv1.Lease) {
		log.Debug("kubelet Lease deleted", zap.String("node", l.Name))
		st.ForgetKubeletLease(l.Name, now())
	})
	if err != nil {
		return nil, nil, fmt.Errorf("kubelet Lease informer: %w", err)
	}
	return f, inf.HasSynced, nil
}
