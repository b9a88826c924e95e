package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/release"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/cozystack/cozy-health/deploy/render"
	"github.com/cozystack/cozy-health/hack/image/oci"
	"github.com/cozystack/cozy-health/test/harness/realnode"
)

// Helm runs Helm actions on one release of the cozy-health chart with the
// Helm Go SDK, as the helm CLI does (release records in Secrets, hooks,
// lookups against the cluster).
type Helm struct {
	Release, Namespace string
	cfg                *action.Configuration
	chart              *chart.Chart
}

// NewHelm prepares Helm for release in namespace with kubeconfig.
func NewHelm(kubeconfig, releaseName, namespace string) (*Helm, error) {
	flags := genericclioptions.NewConfigFlags(false)
	kc, ns := kubeconfig, namespace
	flags.KubeConfig, flags.Namespace = &kc, &ns
	cfg := &action.Configuration{}
	if err := cfg.Init(flags, namespace, "secret", func(string, ...any) {}); err != nil {
		return nil, fmt.Errorf("helm init: %w", err)
	}
	ch, err := render.LoadChart()
	if err != nil {
		return nil, err
	}
	return &Helm{Release: releaseName, Namespace: namespace, cfg: cfg, chart: ch}, nil
}

// Install is `helm install`.
func (h *Helm) Install(ctx context.Context, values map[string]any) (*release.Release, error) {
	in := action.NewInstall(h.cfg)
	in.ReleaseName, in.Namespace, in.Timeout = h.Release, h.Namespace, 2*time.Minute
	return in.RunWithContext(ctx, h.chart, values)
}

// Upgrade is `helm upgrade`.
func (h *Helm) Upgrade(ctx context.Context, values map[string]any) (*release.Release, error) {
	up := action.NewUpgrade(h.cfg)
	up.Namespace, up.Timeout = h.Namespace, 2*time.Minute
	return up.RunWithContext(ctx, h.Release, h.chart, values)
}

// Uninstall is `helm uninstall`.
func (h *Helm) Uninstall() error {
	un := action.NewUninstall(h.cfg)
	un.Timeout = 2 * time.Minute
	_, err := un.Run(h.Release)
	return err
}

// Last returns the release's latest revision.
func (h *Helm) Last() (*release.Release, error) { return h.cfg.Releases.Last(h.Release) }

// ImportImages makes the agent and aggregator images (the static binaries
// from binDir, as `make image` lays them out) as OCI archives in dir,
// imports them into the node's containerd and returns the chart values that
// select them (tag "lab", never pulled).
func ImportImages(ctx context.Context, c *realnode.Cluster, binDir, dir string) (map[string]any, error) {
	var archives []string
	for _, p := range oci.Programs {
		a := filepath.Join(dir, p.Name+".tar")
		if _, err := oci.WriteArchive(a, "ghcr.io/cozystack/"+p.Name+":lab", p, "lab",
			map[string]string{runtime.GOARCH: filepath.Join(binDir, p.Name)}, time.Unix(0, 0)); err != nil {
			return nil, err
		}
		archives = append(archives, a)
	}
	if err := c.Node.ImportImages(ctx, archives...); err != nil {
		return nil, err
	}
	return map[string]any{
		"image":      map[string]any{"pullPolicy": "Never"},
		"agent":      map[string]any{"image": "ghcr.io/cozystack/cozy-health-agent:lab"},
		"aggregator": map[string]any{"image": "ghcr.io/cozystack/cozy-health-aggregator:lab"},
	}, nil
}

// NodeValues are the chart values for a harness node: no Talos API (its
// ServiceAccount CRD is Talos'), no kube-ovn and no LINSTOR here (those
// checks read Unknown or, for ovs-ovn missing, Down); the Cilium socket
// directory, kube-ovn's run and database directories and the fsync probe in
// dir instead of the host's /run and /var; 2 s reports.
func NodeValues(dir string) map[string]any {
	return map[string]any{
		"agent": map[string]any{
			"interval":      "2s",
			"checkDeadline": "1s",
			"sources": map[string]any{
				"talos": map[string]any{"enabled": false},
				"kubeOVN": map[string]any{"pingerURL": "", "ovsRunPath": filepath.Join(dir, "openvswitch"),
					"ovnRunPath": filepath.Join(dir, "ovn"), "ovnDBPath": filepath.Join(dir, "ovn-db")},
				"cilium":     map[string]any{"runPath": filepath.Join(dir, "cilium")},
				"fsyncProbe": map[string]any{"hostPath": filepath.Join(dir, "fsync-probe")},
			},
		},
		// The test reads /metrics through the apiserver's pod proxy, which
		// passes no bearer token, over plain HTTP (the lab's Prometheus and
		// victoria-metrics too); delegated metrics auth and /metrics over
		// TLS are tested in aggregator/internal/{delegated,app} and
		// deploy/render. The agents' peer check stays on: the lab's agents
		// connect from loopback, which it does not check.
		// No LINSTOR controller (and no cozy-linstor namespace) here.
		"aggregator": map[string]any{"reportInterval": "2s", "refreshPeriod": "3s", "metricsAuth": "none", "metricsTLS": false, "linstor": map[string]any{"url": ""}},
		// The drain guard is on in the labs (docs/guard.md).
		"guard": map[string]any{"enabled": true},
	}
}

// MergeValues merges src into a copy of dst (maps recursively).
func MergeValues(dst, src map[string]any) map[string]any {
	out := copyValues(dst)
	for k, v := range copyValues(src) {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := out[k].(map[string]any); ok {
				out[k] = MergeValues(dm, sm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

func copyValues(v map[string]any) map[string]any {
	b, _ := json.Marshal(v)
	out := map[string]any{}
	_ = json.Unmarshal(b, &out)
	return out
}

// installOnNode installs the chart into cozy-health (labelled privileged, as
// Cozystack's package operator does) with the images from binDir.
func installOnNode(ctx context.Context, c *realnode.Cluster, binDir string, logf func(string, ...any)) error {
	dir := filepath.Join(c.Dir, "chart")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	images, err := ImportImages(ctx, c, binDir, dir)
	if err != nil {
		return err
	}
	if err := c.EnsureNamespace(ctx, "cozy-system"); err != nil {
		return err
	}
	_, err = c.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: "cozy-health", Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"},
	}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace cozy-health: %w", err)
	}
	h, err := NewHelm(c.Kubeconfig, "cozy-health", "cozy-health")
	if err != nil {
		return err
	}
	if _, err := h.Install(ctx, MergeValues(images, NodeValues(dir))); err != nil {
		return fmt.Errorf("helm install: %w", err)
	}
	logf("chart installed: release cozy-health in namespace cozy-health (images from %s)", binDir)
	return nil
}
