package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRDs creates (or updates) every CRD in deploy/crds and waits until
// each is Established.
func (c *ControlPlane) InstallCRDs(ctx context.Context) error {
	files, err := filepath.Glob(filepath.Join(RepoRoot(), "deploy", "crds", "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("find CRDs under deploy/crds: %v", err)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("read %s: %w", f, err)
		}
		if err := c.applyCRD(ctx, f, raw); err != nil {
			return err
		}
	}
	return nil
}

// EnsureNamespace creates ns unless it exists.
func (c *ControlPlane) EnsureNamespace(ctx context.Context, ns string) error {
	_, err := c.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	return nil
}

// CreateServiceAccount creates ns (if missing) and the ServiceAccount ns/name
// (if missing).
func (c *ControlPlane) CreateServiceAccount(ctx context.Context, ns, name string) error {
	if err := c.EnsureNamespace(ctx, ns); err != nil {
		return err
	}
	_, err := c.Clientset().CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create serviceaccount %s/%s: %w", ns, name, err)
	}
	return nil
}

// CreateNodeAndPod creates the Node (if missing) and a Pod bound to it
// (spec.nodeName) running as serviceAccount. No kubelet runs: the Pod stays
// Pending, which is all pod-bound tokens need.
func (c *ControlPlane) CreateNodeAndPod(ctx context.Context, node, ns, pod, serviceAccount string) (*corev1.Pod, error) {
	cs := c.Clientset()
	_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create node %s: %w", node, err)
	}
	if err := c.EnsureNamespace(ctx, ns); err != nil {
		return nil, err
	}
	p, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod, Labels: map[string]string{"app.kubernetes.io/name": "cozy-health-agent"}},
		Spec: corev1.PodSpec{
			NodeName:           node,
			ServiceAccountName: serviceAccount,
			Containers:         []corev1.Container{{Name: "agent", Image: "ghcr.io/cozystack/cozy-health-agent:dev"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create pod %s/%s: %w", ns, pod, err)
	}
	return p, nil
}

// PodBoundToken requests a ServiceAccount token bound to a Pod, as the
// kubelet does for a projected token volume. Its TokenReview carries the
// node name in status.user.extra["authentication.kubernetes.io/node-name"].
// The apiserver raises expiries below 10 minutes to 10 minutes.
func (c *ControlPlane) PodBoundToken(ctx context.Context, ns, serviceAccount, pod string, audiences []string, expiry time.Duration) (string, error) {
	cs := c.Clientset()
	p, err := cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("get pod %s/%s: %w", ns, pod, err)
	}
	secs := int64(expiry / time.Second)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, serviceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences:         audiences,
			ExpirationSeconds: &secs,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("request token for %s/%s bound to pod %s: %w", ns, serviceAccount, pod, err)
	}
	return tr.Status.Token, nil
}

// applyCRD applies one CRD (YAML) by server-side apply and waits until it is
// Established and discovery lists it (waitServed).
func (c *ControlPlane) applyCRD(ctx context.Context, what string, raw []byte) error {
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(raw, &obj.Object); err != nil {
		return fmt.Errorf("decode %s: %w", what, err)
	}
	_, err = dyn.Resource(crdGVR).Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: "cozy-health-harness", Force: true})
	if err != nil {
		return fmt.Errorf("apply CRD %s: %w", obj.GetName(), err)
	}
	return waitServed(ctx, c.Config, dyn, obj.GetName())
}

// talosServiceAccountCRD is the CRD Talos installs for its ServiceAccount
// (serviceaccounts.talos.dev) when kubernetesTalosAPIAccess is enabled, in
// the shape Talos' CRD controller builds it: spec.roles, status.failureReason.
const talosServiceAccountCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: serviceaccounts.talos.dev
spec:
  group: talos.dev
  names:
    kind: ServiceAccount
    listKind: ServiceAccountList
    plural: serviceaccounts
    singular: serviceaccount
    shortNames: [tsa]
  scope: Namespaced
  versions:
    - name: v1alpha1
      served: true
      storage: true
      subresources:
        status: {}
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                roles:
                  type: array
                  items: {type: string}
            status:
              type: object
              properties:
                failureReason: {type: string}
`

// InstallTalosServiceAccountCRD installs the talos.dev ServiceAccount CRD, as
// a Talos cluster with Talos API access enabled serves it, and waits until it
// is Established.
func (c *ControlPlane) InstallTalosServiceAccountCRD(ctx context.Context) error {
	return c.applyCRD(ctx, "talos ServiceAccount CRD", []byte(talosServiceAccountCRD))
}

// SetNodeReady writes node's Ready condition through the status
// subresource, as its kubelet would (no kubelet runs for a simulated
// node, and no node-lifecycle controller changes it afterwards).
func (c *ControlPlane) SetNodeReady(ctx context.Context, node string, ready bool) error {
	cs := c.Clientset()
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get node %s: %w", node, err)
	}
	status, reason := corev1.ConditionTrue, "KubeletReady"
	if !ready {
		status, reason = corev1.ConditionFalse, "KubeletNotReady"
	}
	now := metav1.Now()
	cond := corev1.NodeCondition{Type: corev1.NodeReady, Status: status, Reason: reason,
		Message: "simulated node (test harness)", LastHeartbeatTime: now, LastTransitionTime: now}
	replaced := false
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			n.Status.Conditions[i], replaced = cond, true
		}
	}
	if !replaced {
		n.Status.Conditions = append(n.Status.Conditions, cond)
	}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("set node %s Ready=%s: %w", node, status, err)
	}
	return nil
}
