package harness

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// adapterCRDs are the file names (without .yaml) of the CRDs under
// test/crds/adapters at the versions Cozystack ships: every file there
// except the older releases' copies, named NAME-vX.Y.Z.yaml. A new
// adapter's source CRD is installed by adding its file, nothing else.
func adapterCRDs() ([]string, error) {
	files, err := filepath.Glob(filepath.Join(RepoRoot(), "test", "crds", "adapters", "*.yaml"))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, f := range files {
		n := strings.TrimSuffix(filepath.Base(f), ".yaml")
		if olderRelease.MatchString(n) {
			continue
		}
		names = append(names, n)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no CRD files under %s", filepath.Join(RepoRoot(), "test", "crds", "adapters"))
	}
	return names, nil
}

// olderRelease matches a CRD file name of an older release (-v1.27.4).
var olderRelease = regexp.MustCompile(`-v\d+\.\d+\.\d+$`)

// InstallAdapterCRDs applies the named CRDs of test/crds/adapters (file
// names without .yaml; every one at the shipped versions when names is
// empty) and waits until each is served.
func (c *ControlPlane) InstallAdapterCRDs(ctx context.Context, names ...string) error {
	if len(names) == 0 {
		all, err := adapterCRDs()
		if err != nil {
			return err
		}
		names = all
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

// waitServed waits until the CRD is Established and then until discovery
// lists its resource in every served version. The apiserver updates
// discovery asynchronously after Established, so a client that builds its
// view from discovery right after (Helm's .Capabilities.APIVersions, a
// RESTMapper) can miss an API that is already Established.
func waitServed(ctx context.Context, cfg *rest.Config, dyn dynamic.Interface, name string) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("discovery client: %w", err)
	}
	var crd *unstructured.Unstructured
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // keep polling until the deadline
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, cnd := range conds {
			m, _ := cnd.(map[string]any)
			if m["type"] == "Established" && m["status"] == string(metav1.ConditionTrue) {
				crd = got
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("wait for CRD %s Established: %w", name, err)
	}
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		m, _ := v.(map[string]any)
		if served, _ := m["served"].(bool); !served {
			continue
		}
		gv := group + "/" + fmt.Sprint(m["name"])
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			list, err := dc.ServerResourcesForGroupVersion(gv)
			if err != nil {
				return false, nil //nolint:nilerr // not served yet: keep polling until the deadline
			}
			for _, r := range list.APIResources {
				if r.Name == plural {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("wait for discovery to serve %s in %s: %w", plural, gv, err)
		}
	}
	return nil
}
