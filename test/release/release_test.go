package release

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	healthv1alpha1 "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
	"github.com/cozystack/cozy-health/pkg/client/clientset/versioned"
	"github.com/cozystack/cozy-health/test/harness"
	"github.com/cozystack/cozy-health/test/harness/realnode"
	"github.com/cozystack/cozy-health/test/lab"
)

const (
	releaseNS  = "cozy-health"
	platformNS = "cozy-system"
	nodeName   = "node-1"
)

var (
	helmReleaseGVR   = schema.GroupVersionResource{Group: "helm.toolkit.fluxcd.io", Version: "v2", Resource: "helmreleases"}
	ociRepositoryGVR = schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "ocirepositories"}
	packageSourceGVR = schema.GroupVersionResource{Group: "cozystack.io", Version: "v1alpha1", Resource: "packagesources"}
	packageGVR       = schema.GroupVersionResource{Group: "cozystack.io", Version: "v1alpha1", Resource: "packages"}
)

// releaseJSON is hack/release's release.json.
type releaseJSON struct {
	Version  string `json:"version"`
	Registry string `json:"registry"`
	Images   []struct {
		Name, Ref, Digest string
	} `json:"images"`
	Chart struct {
		Ref, Version, Digest string
	} `json:"chart"`
	Package struct {
		Ref, Digest string
	} `json:"package"`
}

// released is one run of hack/release.
type released struct {
	rel      releaseJSON
	out      string
	commands []string // the two commands it tells the user to run
	took     time.Duration
}

// runRelease runs hack/release as `make release` does (go run, from the
// repository root) and reads what it wrote and printed.
func runRelease(ctx context.Context, t *testing.T, images, registry, version string) released {
	t.Helper()
	out := filepath.Join(t.TempDir(), version)
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "run", "./hack/release", "-in", images, "-registry", registry, "-version", version, "-out", out)
	cmd.Dir = harness.RepoRoot()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "hack/release:\n%s\n%s", stdout.String(), stderr.String())
	r := released{out: out, took: time.Since(start)}
	t.Logf("hack/release %s in %s:\n%s", version, r.took.Round(time.Millisecond), stdout.String())
	raw, err := os.ReadFile(filepath.Join(out, "release.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &r.rel))
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "  kubectl ") {
			r.commands = append(r.commands, strings.TrimSpace(line))
		}
	}
	require.Len(t, r.commands, 2, "hack/release prints the two commands the user runs next")
	return r
}

// TestReleaseThroughFlux: `make release` into a registry on loopback; the
// user's two commands, as printed, on a cluster with a real kubelet node
// and the real source-controller and helm-controller; the node pulls the
// images by digest; Health objects appear. Then the Cozystack variant's
// source reconciles, and a second release upgrades through the same path.
func TestReleaseThroughFlux(t *testing.T) {
	images := os.Getenv("COZY_HEALTH_IMAGES")
	c := realnode.Start(t)
	require.NotEmpty(t, images, "COZY_HEALTH_IMAGES (make image) is required")
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	cs := c.Clientset()
	hc, err := versioned.NewForConfig(c.Config)
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(c.Config)
	require.NoError(t, err)
	c.StartFlux(t, harness.FluxOptions{DependencyRequeue: 2 * time.Second, MaxRetryDelay: 10 * time.Second})
	reg, err := lab.StartRegistry()
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Stop() })
	// The node's containerd may pull from this registry (plain HTTP on
	// loopback, its certs.d entry), and from no other.
	require.NoError(t, c.Node.TrustRegistry(reg.Host))
	registry := reg.Host + "/cozy"

	// What the cluster has before the user's commands: the user's values in
	// the ConfigMap the HelmRelease reads (this node's paths, no Talos API).
	// No cozy-system: the chart creates its platform namespace where the
	// cluster has none.
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNS}}, metav1.CreateOptions{})
	require.NoError(t, err)
	userValues, err := yaml.Marshal(lab.NodeValues(t.TempDir()))
	require.NoError(t, err)
	_, err = cs.CoreV1().ConfigMaps(releaseNS).Create(ctx, &corev1.ConfigMap{
		// Labelled as docs/release.md says: helm-controller reconciles at
		// once when it changes (its --watch-configs-label-selector default).
		ObjectMeta: metav1.ObjectMeta{Name: "cozy-health-values", Labels: map[string]string{"reconcile.fluxcd.io/watch": "Enabled"}},
		Data:       map[string]string{"values.yaml": string(userValues)},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	kubectl := c.Binary("kubectl")
	sh := func(cmd string) string {
		t.Helper()
		ec := exec.CommandContext(ctx, "bash", "-c", cmd)
		ec.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig, "PATH="+filepath.Dir(kubectl)+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := ec.CombinedOutput()
		if err != nil {
			hr, _ := dyn.Resource(helmReleaseGVR).Namespace(releaseNS).Get(ctx, "cozy-health", metav1.GetOptions{})
			t.Fatalf("%s: %v\n%s\nHelmRelease: %v", cmd, err, out, hr)
		}
		return string(out)
	}

	// make release, then the user's two commands as printed.
	start := time.Now()
	r1 := runRelease(ctx, t, images, registry, "v0.0.1-test")
	pushedRequests := len(reg.Requests())
	for _, cmd := range r1.commands {
		t.Logf("$ %s\n%s", cmd, sh(cmd))
	}
	readyIn := time.Since(start)
	// helm-controller's chart version for an OCIRepository source: the
	// chart's, "+" the first 12 hex digits of the artifact's digest.
	chart1 := "0.0.1-test+" + r1.rel.Chart.Digest[len("sha256:"):][:12]
	assert.Contains(t, ready(ctx, t, dyn)["message"], "with chart cozy-health@"+chart1, "Ready for the pushed chart")
	hr := history(ctx, t, dyn)
	assert.Equal(t, chart1, hr["chartVersion"], "the release is of the pushed chart")
	assert.Equal(t, "deployed", hr["status"])

	agent := waitPods(ctx, t, cs, "app.kubernetes.io/name=cozy-health-agent", 1)[0]
	aggs := waitPods(ctx, t, cs, "app.kubernetes.io/name=cozy-health-aggregator", 3)
	assertPulled(t, r1.rel, reg, pushedRequests, append([]corev1.Pod{agent}, aggs...))
	disk := waitHealth(ctx, t, hc, func(h *healthv1alpha1.Health) bool {
		_, ok := h.Status.Nodes[nodeName]
		return ok
	})
	firstHealth := time.Since(start)
	assert.NotEqual(t, healthv1alpha1.StatusUnknown, disk.Status.Nodes[nodeName].Status, "the agent measured the node's disk: %+v", disk.Status)
	t.Logf("install: release %s, HelmRelease Ready %s, first Health object with node %s %s after make release started",
		r1.took.Round(time.Millisecond), readyIn.Round(time.Millisecond), nodeName, firstHealth.Round(time.Millisecond))

	// The Cozystack variant: source-controller pulls the package artifact
	// (Flux's format) from the registry; the PackageSource and Package are
	// accepted by Cozystack v1.6.2's CRDs (no package operator here).
	require.NoError(t, c.InstallCRDFiles(ctx, "cozystack/cozystack.io_packagesources.yaml", "cozystack/cozystack.io_packages.yaml"))
	sh("kubectl apply --server-side -f " + filepath.Join(r1.out, "flux", "cozystack-package.yaml"))
	sh("kubectl -n cozy-system wait ocirepository/cozy-health-package --for=condition=Ready --timeout=3m")
	artifact := ociArtifact(ctx, t, dyn, "cozy-health-package")
	assert.Equal(t, r1.rel.Package.Digest, artifact["revision"], "source-controller fetched the pushed artifact (pinned by digest, its revision is the digest)")
	url, _ := artifact["url"].(string)
	files := fetchArtifact(ctx, t, url)
	var wrapper map[string]any
	require.NoError(t, yaml.Unmarshal(files["system/cozy-health/values.yaml"], &wrapper))
	sub, _ := wrapper["cozy-health"].(map[string]any)
	agentValues, _ := sub["agent"].(map[string]any)
	assert.Equal(t, imageRef(r1.rel, "cozy-health-agent"), agentValues["image"], "the package pins the released agent")
	assert.Contains(t, files, "library/cozy-health/Chart.yaml", "the chart, as the PackageSource's library")
	ps, err := dyn.Resource(packageSourceGVR).Get(ctx, "cozystack.cozy-health", metav1.GetOptions{})
	require.NoError(t, err)
	ref, _, _ := unstructured.NestedMap(ps.Object, "spec", "sourceRef")
	assert.Equal(t, map[string]any{"kind": "OCIRepository", "name": "cozy-health-package", "namespace": "cozy-system", "path": "/"}, ref)
	_, err = dyn.Resource(packageGVR).Get(ctx, "cozystack.cozy-health", metav1.GetOptions{})
	require.NoError(t, err)

	// A second release: new digests, the same two commands; the HelmRelease
	// upgrades, every pod runs the new digests, Health objects stay written.
	images2 := t.TempDir()
	require.NoError(t, Relabel(images, images2, "v0.0.2-test"))
	upgradeStart := time.Now()
	r2 := runRelease(ctx, t, images2, registry, "v0.0.2-test")
	for i := range r1.rel.Images {
		assert.NotEqual(t, r1.rel.Images[i].Digest, r2.rel.Images[i].Digest, "the second release's %s is a new image", r2.rel.Images[i].Name)
	}
	pushedRequests = len(reg.Requests())
	for _, cmd := range r2.commands {
		t.Logf("$ %s\n%s", cmd, sh(cmd))
	}
	chart2 := "0.0.2-test+" + r2.rel.Chart.Digest[len("sha256:"):][:12]
	assert.Contains(t, ready(ctx, t, dyn)["message"], "upgrade succeeded for release cozy-health/cozy-health.v2 with chart cozy-health@"+chart2,
		"the wait returned on the second release's Ready, not the first's")
	require.Eventually(t, func() bool { return history(ctx, t, dyn)["chartVersion"] == chart2 }, time.Minute, 250*time.Millisecond, "the HelmRelease records the upgrade")
	assert.Equal(t, "deployed", history(ctx, t, dyn)["status"])
	var pods []corev1.Pod
	require.NoError(t, wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods = append(listReady(ctx, cs, "app.kubernetes.io/name=cozy-health-agent"), listReady(ctx, cs, "app.kubernetes.io/name=cozy-health-aggregator")...)
		if len(pods) != 4 {
			return false, nil
		}
		for _, p := range pods {
			if !strings.Contains(p.Spec.Containers[0].Image, ":v0.0.2-test@") {
				return false, nil
			}
		}
		return true, nil
	}), "the agent and three aggregators run the second release: %v", podImages(pods))
	assertPulled(t, r2.rel, reg, pushedRequests, pods)
	upgraded := time.Now()
	waitHealth(ctx, t, hc, func(h *healthv1alpha1.Health) bool {
		return h.Status.ObservedAt.After(upgraded)
	})
	t.Logf("upgrade: release %s, every pod on the new digests and a Health object written after it %s after the second make release started",
		r2.took.Round(time.Millisecond), time.Since(upgradeStart).Round(time.Millisecond))
}

// TestPackageArtifactIsFluxs: the package artifact hack/release pushes is
// byte for byte what Flux's own code pushes for the same files and
// annotations: fluxcd/pkg/oci's Client.Push (what `flux push artifact`
// calls), at the version source-controller v1.7.3 uses, run from the Flux
// tool's module (test/flux/sourcecontroller/fluxpush), gives the same
// manifest digest.
func TestPackageArtifactIsFluxs(t *testing.T) {
	harness.SkipShort(t)
	images := os.Getenv("COZY_HEALTH_IMAGES")
	require.NotEmpty(t, images, "COZY_HEALTH_IMAGES (make image) is required")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	reg, err := lab.StartRegistry()
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Stop() })
	r := runRelease(ctx, t, images, reg.Host+"/cozy", "v0.0.1-test")
	cmd := exec.CommandContext(ctx, "go", "run", "./fluxpush", r.rel.Package.Ref, reg.Host+"/cozy/flux-oracle:v0.0.1-test")
	cmd.Dir = filepath.Join(harness.RepoRoot(), "test", "flux", "sourcecontroller")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "fluxpush: %s", stderr.String())
	assert.Equal(t, r.rel.Package.Digest, strings.TrimSpace(string(out)), "fluxcd/pkg/oci pushes the same artifact")
}

// ready is the HelmRelease's Ready condition as it reads now: what the
// printed wait returned on.
func ready(ctx context.Context, t *testing.T, dyn dynamic.Interface) map[string]any {
	t.Helper()
	hr, err := dyn.Resource(helmReleaseGVR).Namespace(releaseNS).Get(ctx, "cozy-health", metav1.GetOptions{})
	require.NoError(t, err)
	conds, _, _ := unstructured.NestedSlice(hr.Object, "status", "conditions")
	for _, c := range conds {
		if m := c.(map[string]any); m["type"] == "Ready" {
			return m
		}
	}
	t.Fatalf("the HelmRelease has no Ready condition: %v", hr.Object["status"])
	return nil
}

// history is the HelmRelease's latest release once helm-controller has
// recorded it (it may patch the history after Ready).
func history(ctx context.Context, t *testing.T, dyn dynamic.Interface) map[string]any {
	t.Helper()
	var h []any
	var last any
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		hr, err := dyn.Resource(helmReleaseGVR).Namespace(releaseNS).Get(ctx, "cozy-health", metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // keep polling
		}
		last = hr.Object["status"]
		h, _, _ = unstructured.NestedSlice(hr.Object, "status", "history")
		return len(h) > 0, nil
	})
	// The poll runs before last is read for the message (Go leaves the
	// order of a variable's read among a call's arguments unspecified).
	require.NoError(t, err, "the HelmRelease records its release: %v", last)
	return h[0].(map[string]any)
}

// ociArtifact is an OCIRepository's status.artifact once source-controller
// has recorded it. Ready=True alone does not say it is there: Flux's patch
// helper writes the conditions before the rest of the status
// (fluxcd/pkg/runtime v0.89.0 patch/patch.go, Helper.Patch), so a wait on
// the condition can return between the two patches.
func ociArtifact(ctx context.Context, t *testing.T, dyn dynamic.Interface, name string) map[string]any {
	t.Helper()
	var artifact map[string]any
	var last any
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		repo, err := dyn.Resource(ociRepositoryGVR).Namespace(platformNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // keep polling
		}
		last = repo.Object["status"]
		artifact, _, _ = unstructured.NestedMap(repo.Object, "status", "artifact")
		return artifact["revision"] != nil && artifact["url"] != nil, nil
	})
	require.NoError(t, err, "OCIRepository %s/%s records its artifact: %v", platformNS, name, last)
	return artifact
}

func imageRef(rel releaseJSON, name string) string {
	for _, im := range rel.Images {
		if im.Name == name {
			return im.Ref
		}
	}
	return ""
}

// assertPulled checks that each pod runs the image release.json names, by
// its index digest, and that the node asked the registry for that digest
// after the push.
func assertPulled(t *testing.T, rel releaseJSON, reg *lab.Registry, after int, pods []corev1.Pod) {
	t.Helper()
	asked := reg.Requests()[after:]
	for _, p := range pods {
		name := p.Labels["app.kubernetes.io/name"]
		var want struct{ Name, Ref, Digest string }
		for _, im := range rel.Images {
			if im.Name == name {
				want = im
			}
		}
		require.NotEmpty(t, want.Ref, "pod %s (%s) runs an image of the release", p.Name, name)
		assert.Equal(t, want.Ref, p.Spec.Containers[0].Image, "pod %s", p.Name)
		tagged, _, _ := strings.Cut(want.Ref, "@")
		repo := tagged[:strings.LastIndex(tagged, ":")]
		require.Len(t, p.Status.ContainerStatuses, 1)
		assert.Equal(t, repo+"@"+want.Digest, p.Status.ContainerStatuses[0].ImageID, "pod %s runs the pushed index", p.Name)
		path := strings.TrimPrefix(repo, reg.Host)
		assert.True(t, slices.Contains(asked, "GET /v2"+path+"/manifests/"+want.Digest) || slices.Contains(asked, "HEAD /v2"+path+"/manifests/"+want.Digest),
			"the node asked the registry for %s by digest", want.Ref)
	}
}

func listReady(ctx context.Context, cs kubernetes.Interface, selector string) []corev1.Pod {
	pods, err := cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil
	}
	var ready []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			return nil // a rollout under way
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready = append(ready, p)
			}
		}
	}
	if len(ready) != len(pods.Items) {
		return nil
	}
	return ready
}

func waitPods(ctx context.Context, t *testing.T, cs kubernetes.Interface, selector string, n int) []corev1.Pod {
	t.Helper()
	var ready []corev1.Pod
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		ready = listReady(ctx, cs, selector)
		return len(ready) == n, nil
	}), "%d Ready pods %s", n, selector)
	return ready
}

func podImages(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name+"="+p.Spec.Containers[0].Image)
	}
	return out
}

// waitHealth waits for a fresh disk Health object that satisfies ok.
func waitHealth(ctx context.Context, t *testing.T, hc versioned.Interface, ok func(*healthv1alpha1.Health) bool) *healthv1alpha1.Health {
	t.Helper()
	var got *healthv1alpha1.Health
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		h, err := hc.HealthV1alpha1().Healths(platformNS).Get(ctx, "disk", metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // not written yet
		}
		got = h
		return h.Status.FreshUntil != nil && h.Status.FreshUntil.After(time.Now()) && ok(h), nil
	}), "a fresh Health %s/disk (last: %+v)", platformNS, got)
	return got
}

// fetchArtifact downloads an artifact source-controller serves and returns
// its files.
func fetchArtifact(ctx context.Context, t *testing.T, url string) map[string][]byte {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, url)
	zr, err := gzip.NewReader(resp.Body)
	require.NoError(t, err)
	tr := tar.NewReader(zr)
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		require.NoError(t, err)
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			require.NoError(t, err)
			files[strings.TrimPrefix(h.Name, "./")] = b
		}
	}
}
