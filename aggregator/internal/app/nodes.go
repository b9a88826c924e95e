package app

import (
	"fmt"
	"strings"
	"time"

	talosconstants "github.com/siderolabs/talos/pkg/machinery/constants"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/aggregator/internal/watch"
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
		st.SetCordoned(n.Name, n.Spec.Unschedulable, n.Annotations[talosconstants.AnnotationCordonedKey] == talosconstants.AnnotationCordonedValue, now())
		if selector.Matches(labels.Set(n.Labels)) {
			st.Expect(n.Name, now())
		} else {
			st.Unexpect(n.Name)
		}
	}
	err := watch.Handle(inf, seen, func(n *corev1.Node) {
		log.Info("node deleted, pruning it", zap.String("node", n.Name))
		st.DeleteNode(n.Name)
	})
	if err != nil {
		return fmt.Errorf("node informer: %w", err)
	}
	return nil
}

// nodeAddresses returns, from the Node informer's cache, the addresses a
// node's host-network agent may connect from: its InternalIPs and the
// addresses in the annotations named (a comma list each: kube-ovn's
// ovn.kubernetes.io/ip_address is ovn0's join-subnet address, from which
// kube-ovn sends host-to-pod traffic). A Node not in the cache has none:
// ingest does not check it. Only the node itself (its kubelet, under
// NodeRestriction) and the CNI write these fields; an agent's token cannot.
func nodeAddresses(lister corelisters.NodeLister, annotations []string) func(string) []string {
	return func(name string) []string {
		n, err := lister.Get(name)
		if err != nil {
			return nil
		}
		var out []string
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP && a.Address != "" {
				out = append(out, a.Address)
			}
		}
		for _, k := range annotations {
			for _, v := range strings.Split(n.Annotations[k], ",") {
				// kube-ovn writes bare addresses; a CIDR's address counts.
				v, _, _ = strings.Cut(strings.TrimSpace(v), "/")
				if v != "" {
					out = append(out, v)
				}
			}
		}
		return out
	}
}
