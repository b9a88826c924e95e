package lab

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	healthv1alpha1 "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
	"github.com/cozystack/cozy-health/pkg/report"
)

// LabAdapterCRDs are the cluster adapters' CRDs the lab installs (the
// aggregators pick them up as they do in a cluster): Flux HelmReleases for
// the demo's root-cause step, CNPG's for the backups alert's cross-check.
var LabAdapterCRDs = []string{"helm.toolkit.fluxcd.io_helmreleases",
	"postgresql.cnpg.io_clusters", "postgresql.cnpg.io_backups", "postgresql.cnpg.io_scheduledbackups"}

var helmReleases = schema.GroupVersionResource{Group: "helm.toolkit.fluxcd.io", Version: "v2", Resource: "helmreleases"}

// demoRelease is one HelmRelease of the root-cause step and the Ready
// condition helm-controller would give it.
type demoRelease struct {
	name, dependsOn, status, reason, message string
}

var demoReleases = []demoRelease{
	{"cilium", "", "True", "InstallSucceeded", "Helm install succeeded for release cozy-system/cilium.v1 with chart cilium@1.17.4"},
	{"kubeovn", "cilium", "False", "UpgradeFailed", "Helm upgrade failed for release cozy-system/kubeovn with chart kubeovn@0.30.1: context deadline exceeded"},
	{"cozystack-api", "kubeovn", "False", "DependencyNotReady", "dependency 'cozy-system/kubeovn' is not ready"},
	{"dashboard", "cozystack-api", "False", "DependencyNotReady", "dependency 'cozy-system/cozystack-api' is not ready"},
	{"linstor", "kubeovn", "False", "DependencyNotReady", "dependency 'cozy-system/kubeovn' is not ready"},
}

// DemoRootCause is the demo's platform step: a HelmRelease whose upgrade
// failed and three releases waiting on it (one through another) must read
// as one root cause in the platform object; removing them withdraws it.
func (l *Lab) DemoRootCause(ctx context.Context, w io.Writer, show func(args ...string)) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.State.Kubeconfig)
	if err != nil {
		return fmt.Errorf("lab: kubeconfig: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("lab: dynamic client: %w", err)
	}
	ri := dyn.Resource(helmReleases).Namespace(PlatformNamespace)
	for _, r := range demoReleases {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
			"metadata": map[string]any{"name": r.name, "namespace": PlatformNamespace},
			"spec": map[string]any{"interval": "5m", "chart": map[string]any{"spec": map[string]any{
				"chart": r.name, "sourceRef": map[string]any{"kind": "HelmRepository", "name": "cozystack-system", "namespace": PlatformNamespace}}}},
		}}
		if r.dependsOn != "" {
			u.Object["spec"].(map[string]any)["dependsOn"] = []any{map[string]any{"name": r.dependsOn}}
		}
		got, err := ri.Create(ctx, u, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("lab: create HelmRelease %s: %w", r.name, err)
		}
		got.Object["status"] = map[string]any{"observedGeneration": int64(1), "conditions": []any{map[string]any{
			"type": "Ready", "status": r.status, "reason": r.reason, "message": r.message, "observedGeneration": int64(1),
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}}}
		if _, err := ri.UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("lab: HelmRelease %s status: %w", r.name, err)
		}
	}
	fmt.Fprintf(w, "    created %d HelmReleases: kubeovn UpgradeFailed; cozystack-api and linstor wait on it, dashboard on cozystack-api\n", len(demoReleases))
	if _, err := l.WaitFor(ctx, w, "platform naming one root cause", 30*time.Second, rootCause("cozy-system/kubeovn", 3)); err != nil {
		return err
	}
	show("get", "chz", "-n", PlatformNamespace, "platform")
	show("get", "health", "platform", "-n", PlatformNamespace, "-o",
		`jsonpath={range .status.conditions[?(@.status!="True")]}{.type}{"\t"}{.reason}{"\t"}{.resourceRef.name}{"\t"}{.message}{"\n"}{end}`)

	for _, r := range demoReleases {
		if err := ri.Delete(ctx, r.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("lab: delete HelmRelease %s: %w", r.name, err)
		}
	}
	fmt.Fprintf(w, "    deleted the HelmReleases: with no facts left, the platform object is withdrawn\n")
	_, err = l.WaitFor(ctx, w, "platform object withdrawn", 30*time.Second,
		func(hs map[string]*healthv1alpha1.Health, _ time.Time) (bool, string) {
			_, ok := hs["platform"]
			return !ok, fmt.Sprintf("platform present: %t", ok)
		})
	return err
}

// rootCause holds when the platform object's Releases condition names root
// as its one root cause with waiting releases waiting on it.
func rootCause(root string, waiting int) Condition {
	return func(hs map[string]*healthv1alpha1.Health, _ time.Time) (bool, string) {
		h := hs["platform"]
		if h == nil {
			return false, "no platform object yet"
		}
		for _, c := range h.Status.Conditions {
			if c.Type == "Releases" {
				want := fmt.Sprintf("1 root cause: %s (", root)
				ok := strings.Contains(c.Message, want) && strings.Contains(c.Message, fmt.Sprintf("%d waiting on it", waiting))
				return ok && h.Status.Overall == healthv1alpha1.StatusDegraded, string(h.Status.Overall) + ": " + report.Truncate(c.Message, 80)
			}
		}
		return false, "no Releases condition yet"
	}
}
