package lab

import (
	"context"
	"fmt"
	"sync"
	"time"

	talosconstants "github.com/siderolabs/talos/pkg/machinery/constants"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

// The lab's kubelets: the lab runs no kubelet, so the daemon renews each
// node's Lease in kube-node-lease as a kubelet does (the node lifecycle
// controller's heartbeat; the aggregator reads it to tell AgentSilent
// from NodeUnreachable). A kubelet renews every quarter of the Lease's
// duration (nodeLeaseRenewIntervalFraction 0.25 of 40 s); the lab keeps
// that ratio at the scale of its 2 s reports: a 10 s Lease renewed every
// 2.5 s, so a node-down reads NodeUnreachable within the soak's silent
// bound.
const (
	KubeletLeaseDuration = 10 * time.Second
	kubeletRenewEvery    = KubeletLeaseDuration / 4
)

// kubelets renews every node's Lease until stopped per node
// (kubelet-stop) or for all (close).
type kubelets struct {
	kube kubernetes.Interface
	mu   sync.Mutex
	// stopped: nodes whose kubelet is down (no renewal).
	stopped map[string]bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// startKubelets starts renewing the Lease of every node of s.
// A lab state without an apiserver (the sources' own tests) has no Node to
// renew a Lease for: its kubelets renew nothing and take no fault.
func startKubelets(s *State) (*kubelets, error) {
	if s.Kubeconfig == "" {
		k := &kubelets{stopped: map[string]bool{}, cancel: func() {}, done: make(chan struct{})}
		close(k.done)
		return k, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("lab kubelets: load kubeconfig: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("lab kubelets: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := &kubelets{kube: kube, stopped: map[string]bool{}, cancel: cancel, done: make(chan struct{})}
	names := make([]string, len(s.Nodes))
	for i, n := range s.Nodes {
		names[i] = n.Name
	}
	go k.run(ctx, names)
	return k, nil
}

func (k *kubelets) close() { k.cancel(); <-k.done }

func (k *kubelets) run(ctx context.Context, names []string) {
	defer close(k.done)
	t := time.NewTicker(kubeletRenewEvery)
	defer t.Stop()
	for {
		for _, n := range names {
			k.mu.Lock()
			down := k.stopped[n]
			k.mu.Unlock()
			if !down {
				// A failed renewal is retried at the next tick, as the
				// kubelet retries; the Lease stays valid for 4 ticks.
				_ = renewNodeLease(ctx, k.kube, n, time.Now())
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// renewNodeLease creates or renews node's Lease in kube-node-lease.
func renewNodeLease(ctx context.Context, kube kubernetes.Interface, node string, now time.Time) error {
	leases := kube.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	renew := metav1.NewMicroTime(now)
	l, err := leases.Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: node},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To(int32(KubeletLeaseDuration / time.Second)),
				RenewTime: &renew},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	l.Spec.RenewTime = &renew
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

// fault stops or starts one node's kubelet renewals.
func (k *kubelets) fault(node, f string) (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.kube == nil {
		return "", fmt.Errorf("%s: this lab has no apiserver, so no kubelet Leases", f)
	}
	switch f {
	case "kubelet-stop":
		k.stopped[node] = true
		return fmt.Sprintf("the kubelet of %s stopped renewing its Lease (expires %s after its last renewal)", node, KubeletLeaseDuration), nil
	case "kubelet-start":
		delete(k.stopped, node)
		return fmt.Sprintf("the kubelet of %s renews its Lease again", node), nil
	}
	return "", fmt.Errorf("not a kubelet fault: %s", f)
}

// cordon sets node's spec.unschedulable as `kubectl cordon` does; byTalos
// also marks it talos.dev/cordoned, as Talos does when the machine shuts
// down, upgrades or resets. uncordon clears both.
func cordon(ctx context.Context, s *State, node string, on, byTalos bool) (string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Kubeconfig)
	if err != nil {
		return "", fmt.Errorf("load kubeconfig: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	ann := "null"
	if on && byTalos {
		ann = `"` + talosconstants.AnnotationCordonedValue + `"`
	}
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t},"metadata":{"annotations":{%q:%s}}}`, on, talosconstants.AnnotationCordonedKey, ann)
	if _, err := kube.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return "", fmt.Errorf("cordon %s: %w", node, err)
	}
	switch {
	case on && byTalos:
		return fmt.Sprintf("cordoned %s as Talos does (spec.unschedulable, %s)", node, talosconstants.AnnotationCordonedKey), nil
	case on:
		return fmt.Sprintf("cordoned %s (spec.unschedulable)", node), nil
	}
	return fmt.Sprintf("uncordoned %s", node), nil
}
