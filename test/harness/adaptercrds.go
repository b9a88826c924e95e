package harness

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
)

// AdapterCRDs are the file names (without .yaml) under test/crds/adapters,
// the CRDs of the cluster adapters' sources.
var AdapterCRDs = []string{
	"helm.toolkit.fluxcd.io_helmreleases",
	"cozystack.io_workloadmonitors",
	"postgresql.cnpg.io_clusters",
	"postgresql.cnpg.io_backups",
	"postgresql.cnpg.io_scheduledbackups",
	"barmancloud.cnpg.io_objectstores",
	"backups.cozystack.io_plans",
	"backups.cozystack.io_backupjobs",
	"backups.cozystack.io_backups",
	"velero.io_backups",
	"velero.io_schedules",
	"kamaji.clastix.io_tenantcontrolplanes",
	"kamaji.clastix.io_datastores",
	"etcd.aenix.io_etcdclusters",
}

// InstallAdapterCRDs applies the named CRDs of test/crds/adapters (every
// one when names is empty) and waits until each is Established.
func (c *ControlPlane) InstallAdapterCRDs(ctx context.Context, names ...string) error {
	if len(names) == 0 {
		names = AdapterCRDs
	}
	files := make([]string, 0, len(names))
	for _, n := range names {
		files = append(files, filepath.Join(RepoRoot(), "test", "crds", "adapters", n+".yaml"))
	}
	return c.InstallCRDFiles(ctx, files...)
}

// DeleteCRD deletes a CRD and waits until it is gone (its objects with it).
func (c *ControlPlane) DeleteCRD(ctx context.Context, name string) error {
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	if err := dyn.Resource(crdGVR).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete CRD %s: %w", name, err)
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

func waitEstablished(ctx context.Context, dyn dynamic.Interface, name string) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // keep polling until the deadline
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, cnd := range conds {
			m, _ := cnd.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("wait for CRD %s Established: %w", name, err)
	}
	return nil
}
