package lab

import (
	"context"
	"fmt"
	"os"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/cozystack/cozy-health/deploy/render"
)

// The drain guard in the lab (docs/guard.md): the chart's
// ValidatingWebhookConfiguration on pods/eviction, as the chart renders
// it, but with one webhook per replica called by URL (the lab has no
// Service network; a real cluster's apiserver calls any ready replica
// through the guard Service), so `kubectl drain` against the lab is
// refused with cozy-health's reasons while a node is blocked. The agent
// pods are owned by a DaemonSet, as in a real install, so drain skips
// them; every node runs one workload pod (WorkloadNamespace) for a drain
// to evict.

// GuardWebhook is the chart's ValidatingWebhookConfiguration name.
const GuardWebhook = "cozy-health-drain-guard"

// WorkloadNamespace holds the lab's workload pods, one per node
// ("web-NODE"): what a drain evicts.
const WorkloadNamespace = "workloads"

// installGuard applies the guard webhook (one webhook per replica, by
// URL, with the lab's CA), the agents' DaemonSet as their owner, and a
// workload pod per node.
func (l *Lab) installGuard(ctx context.Context) error {
	kube, err := l.kube()
	if err != nil {
		return err
	}
	r, err := render.Render(render.Options{Namespace: AgentNamespace, Values: labValues(l.opts)})
	if err != nil {
		return fmt.Errorf("lab: render the chart: %w", err)
	}
	obj, err := r.Object("ValidatingWebhookConfiguration", GuardWebhook)
	if err != nil {
		return fmt.Errorf("lab: the chart renders no drain guard: %w", err)
	}
	var chart admissionregistrationv1.ValidatingWebhookConfiguration
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &chart); err != nil {
		return fmt.Errorf("lab: the chart's %s: %w", GuardWebhook, err)
	}
	if len(chart.Webhooks) != 1 || chart.Webhooks[0].ClientConfig.Service == nil || chart.Webhooks[0].ClientConfig.Service.Path == nil {
		return fmt.Errorf("lab: the chart's %s is not one webhook called through a Service path", GuardWebhook)
	}
	ca, err := os.ReadFile(l.State.CAFile)
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: GuardWebhook, Labels: chart.Labels}}
	for _, a := range l.State.Aggregators {
		w := *chart.Webhooks[0].DeepCopy()
		// Webhook names must be unique and fully qualified.
		w.Name = a.Name + "." + w.Name
		w.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://" + a.Guard + *chart.Webhooks[0].ClientConfig.Service.Path), CABundle: ca}
		vwc.Webhooks = append(vwc.Webhooks, w)
	}
	if _, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("lab: create %s: %w", GuardWebhook, err)
	}

	ds, err := r.Object("DaemonSet", "cozy-health-agent")
	if err != nil {
		return fmt.Errorf("lab: the chart: %w", err)
	}
	var agentDS appsv1.DaemonSet
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(ds.Object, &agentDS); err != nil {
		return fmt.Errorf("lab: the chart's agent DaemonSet: %w", err)
	}
	agentDS.ResourceVersion, agentDS.Namespace = "", AgentNamespace
	created, err := kube.AppsV1().DaemonSets(AgentNamespace).Create(ctx, &agentDS, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("lab: create the agents' DaemonSet: %w", err)
	}
	owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: created.Name, UID: created.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	for _, n := range l.State.Nodes {
		pods := kube.CoreV1().Pods(AgentNamespace)
		p, err := pods.Get(ctx, "cozy-health-agent-"+n.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("lab: the agent pod of %s: %w", n.Name, err)
		}
		p.OwnerReferences = []metav1.OwnerReference{owner}
		if _, err := pods.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("lab: own the agent pod of %s by its DaemonSet: %w", n.Name, err)
		}
		if err := CreateWorkload(ctx, kube, n.Name); err != nil {
			return err
		}
	}
	return nil
}

// CreateWorkload creates node's workload pod (WorkloadNamespace/web-NODE)
// if it is missing: a bare pod with no grace period, so an eviction the
// guard lets through deletes it at once (no kubelet runs here to confirm a
// graceful stop); a drain evicts it with --force.
func CreateWorkload(ctx context.Context, kube kubernetes.Interface, node string) error {
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: WorkloadNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("lab: create namespace %s: %w", WorkloadNamespace, err)
	}
	_, err := kube.CoreV1().Pods(WorkloadNamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-" + node, Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{Name: "web", Image: "registry.k8s.io/pause:3.10"}}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("lab: create the workload pod of %s: %w", node, err)
	}
	return nil
}

// guardURLs lists the replicas' guard URLs (for messages).
func (l *Lab) guardURLs() string {
	var out []string
	for _, a := range l.State.Aggregators {
		out = append(out, "https://"+a.Guard)
	}
	return strings.Join(out, ", ")
}

// kube is a clientset of the lab's apiserver (its admin kubeconfig).
func (l *Lab) kube() (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.State.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("lab: load kubeconfig: %w", err)
	}
	return kubernetes.NewForConfig(cfg)
}
