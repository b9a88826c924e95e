// Package nodee2e installs the cozy-health Helm chart, with the Helm Go SDK,
// on a real kubelet node (test/harness/realnode.Start): the images `make
// image` built (the OCI archives a release ships) are imported into the
// node's containerd and run pinned to their digests, the agent runs as a
// DaemonSet pod on the host network with its pod-bound token, the three
// aggregators run on the pod network, and everything a user does after an
// install is exercised: Health objects, kubectl health through the service
// proxy, the drain guard (guard.enabled: an eviction from the cordoned
// node answered as drain-check answers, the override letting a real
// eviction through to the kubelet), an upgrade, a leader crash and an
// uninstall.
package nodee2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	healthv1alpha1 "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
	"github.com/cozystack/cozy-health/pkg/client/clientset/versioned"
	"github.com/cozystack/cozy-health/pkg/drainapi"
	"github.com/cozystack/cozy-health/test/harness/realnode"
	"github.com/cozystack/cozy-health/test/lab"
)

const (
	releaseName = "cozy-health"
	releaseNS   = "cozy-health"
	platformNS  = "cozy-system"
	nodeName    = "node-1"
	leaseName   = "cozy-health-aggregator"
)

func TestChartOnRealNode(t *testing.T) {
	c := realnode.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cs := c.Clientset()
	hc, err := versioned.NewForConfig(c.Config)
	require.NoError(t, err)

	bin := os.Getenv("COZY_HEALTH_BIN")
	require.NotEmpty(t, bin, "COZY_HEALTH_BIN (make build) is required")
	// The images a release ships (`make image`), published as `make push`
	// does to a registry on loopback, and pulled by the node's containerd
	// by the digests `make push` wrote into the values.
	imagesDir := os.Getenv("COZY_HEALTH_IMAGES")
	require.NotEmpty(t, imagesDir, "COZY_HEALTH_IMAGES (make image) is required")
	stateDir := t.TempDir()
	reg, err := lab.StartRegistry()
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Stop() })
	images, pushed, err := lab.PushedImages(ctx, c, reg, imagesDir, t.TempDir())
	require.NoError(t, err)
	pushedRequests := len(reg.Requests())
	values := lab.MergeValues(images, lab.NodeValues(stateDir))
	h, err := lab.NewHelm(c.Kubeconfig, releaseName, releaseNS)
	require.NoError(t, err)
	require.NoError(t, c.EnsureNamespace(ctx, platformNS))

	// Talos' PodSecurity refuses the agent in a namespace without the
	// privileged label; the chart says so before installing anything.
	require.NoError(t, c.EnsureNamespace(ctx, releaseNS))
	_, err = h.Install(ctx, values)
	require.Error(t, err, "install into a namespace without pod-security.kubernetes.io/enforce=privileged")
	assert.Contains(t, err.Error(), "pod-security.kubernetes.io/enforce=privileged")
	// Forced past the chart's check, the DaemonSet exists but the apiserver
	// refuses its pod.
	_, err = h.Install(ctx, lab.MergeValues(values, map[string]any{"namespace": map[string]any{"requirePrivileged": false}}))
	require.NoError(t, err)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := cs.CoreV1().Events(releaseNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=DaemonSet,reason=FailedCreate"})
		if err != nil {
			return false, nil //nolint:nilerr // keep polling
		}
		for _, e := range evs.Items {
			if strings.Contains(e.Message, `violates PodSecurity "baseline:latest"`) && strings.Contains(e.Message, "hostNetwork") {
				return true, nil
			}
		}
		return false, nil
	}), "the DaemonSet controller reports PodSecurity refusing the agent pod")
	pods, err := cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=cozy-health-agent"})
	require.NoError(t, err)
	assert.Empty(t, pods.Items, "no agent pod in a baseline namespace")
	require.NoError(t, h.Uninstall())

	// With the label, as Cozystack's package operator sets it.
	ns, err := cs.CoreV1().Namespaces().Get(ctx, releaseNS, metav1.GetOptions{})
	require.NoError(t, err)
	ns.Labels["pod-security.kubernetes.io/enforce"] = "privileged"
	_, err = cs.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{})
	require.NoError(t, err)
	installedAt := time.Now()
	_, err = h.Install(ctx, values)
	require.NoError(t, err)

	// The agent pod and the three aggregators run and pass their probes.
	agentPod := waitReady(ctx, t, cs, "app.kubernetes.io/name=cozy-health-agent", 1)[0]
	assert.True(t, agentPod.Spec.HostNetwork)
	assert.Equal(t, nodeName, agentPod.Spec.NodeName)
	aggPods := waitReady(ctx, t, cs, "app.kubernetes.io/name=cozy-health-aggregator", 3)
	t.Logf("agent and 3 aggregators Ready %s after helm install", time.Since(installedAt).Round(time.Millisecond))

	// The node pulled each image from the registry by its index digest.
	for _, p := range pushed {
		pod := agentPod
		if p.Name == "cozy-health-aggregator" {
			pod = aggPods[0]
		}
		repo, _, _ := strings.Cut(p.Ref, ":0.1.0@")
		assert.Equal(t, p.Ref, pod.Spec.Containers[0].Image)
		require.Len(t, pod.Status.ContainerStatuses, 1)
		assert.Equal(t, repo+"@"+p.Digest, pod.Status.ContainerStatuses[0].ImageID, "%s runs the pushed index", pod.Name)
		path := strings.TrimPrefix(repo, reg.Host)
		t.Logf("%s runs %s, pulled from the loopback registry", pod.Name, pod.Status.ContainerStatuses[0].ImageID)
		asked := reg.Requests()[pushedRequests:]
		assert.True(t, slices.Contains(asked, "GET /v2"+path+"/manifests/"+p.Digest) || slices.Contains(asked, "HEAD /v2"+path+"/manifests/"+p.Digest),
			"the node asked the registry for %s by digest: %v", p.Name, asked)
	}

	// The in-cluster leader writes Health objects from the agent's reports.
	disk := waitFresh(ctx, t, hc, "disk", func(h *healthv1alpha1.Health) bool {
		_, ok := h.Status.Nodes[nodeName]
		return ok
	})
	t.Logf("first fresh Health object with node %s %s after helm install (observedAt %s)", nodeName, time.Since(installedAt).Round(time.Millisecond), disk.Status.ObservedAt)
	// Judged from the agent's measurement of the real disk (the fsync probe
	// may read Degraded on a busy machine), never Unknown for lack of data.
	assert.NotEqual(t, healthv1alpha1.StatusUnknown, disk.Status.Nodes[nodeName].Status, "the real node's disk, measured by the agent: %+v", disk.Status)

	// Every replica accepted signed reports over a stream authenticated with
	// the agent's pod-bound token (a TokenReview, not a cache hit, first).
	for _, p := range aggPods {
		m := scrape(ctx, t, cs, &p)
		assert.Positive(t, m["cozy_health_reports_accepted_total"], "replica %s accepted reports", p.Name)
		assert.Positive(t, m[`cozy_health_ingest_token_reviews_total{result="reviewed"}`], "replica %s reviewed the agent's token", p.Name)
		assert.Equal(t, 1.0, m["cozy_health_ingest_streams"], "replica %s has the agent's stream", p.Name)
		assert.Zero(t, sumPrefix(m, "cozy_health_reports_rejected_total"), "replica %s rejected nothing", p.Name)
	}

	// kubectl health reads the objects; drain-check asks an aggregator
	// through the Kubernetes API service proxy.
	plugin := filepath.Join(bin, "kubectl-health")
	out, code := runPlugin(ctx, t, plugin, c.Kubeconfig)
	require.Equal(t, 0, code, "%s", out)
	assert.Contains(t, out, "disk")
	out, code = runPlugin(ctx, t, plugin, c.Kubeconfig, "drain-check", nodeName, "-o", "json")
	var verdict drainapi.Result
	require.NoError(t, json.Unmarshal([]byte(out), &verdict), "%s", out)
	assert.Equal(t, nodeName, verdict.Node)
	assert.Equal(t, map[drainapi.Verdict]int{drainapi.Safe: 0, drainapi.Blocked: 1, drainapi.Unknown: 2}[verdict.Verdict], code, "exit code matches the verdict %q", verdict.Verdict)
	t.Logf("drain-check %s: %s (exit %d)", nodeName, verdict.Verdict, code)

	guardOnRealNode(ctx, t, c, cs, aggPods, plugin)

	// helm upgrade with a changed value rolls the DaemonSet; the objects
	// stay fresh through the rollout.
	stopFresh := watchFresh(ctx, t, hc, "disk")
	_, err = h.Upgrade(ctx, lab.MergeValues(values, map[string]any{"agent": map[string]any{"logLevel": "debug"}}))
	require.NoError(t, err)
	newAgent := waitReady(ctx, t, cs, "app.kubernetes.io/name=cozy-health-agent", 1)[0]
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		newAgent = waitReady(ctx, t, cs, "app.kubernetes.io/name=cozy-health-agent", 1)[0]
		return newAgent.UID != agentPod.UID, nil
	}), "the DaemonSet replaced the agent pod")
	assert.Contains(t, strings.Join(newAgent.Spec.Containers[0].Args, " "), "debug")
	waitFresh(ctx, t, hc, "disk", func(h *healthv1alpha1.Health) bool {
		return h.Status.ObservedAt.After(time.Now().Add(-5 * time.Second))
	})
	stopFresh()

	// Killing the leader pod moves the writer to another replica.
	lease, err := cs.CoordinationV1().Leases(platformNS).Get(ctx, leaseName, metav1.GetOptions{})
	require.NoError(t, err)
	leader := *lease.Spec.HolderIdentity
	t.Logf("leader %s; killing its pod", leader)
	known := map[string]bool{}
	for _, p := range waitReady(ctx, t, cs, "app.kubernetes.io/name=cozy-health-aggregator", 3) {
		known[p.Name] = true
	}
	deletedAt := time.Now()
	require.NoError(t, cs.CoreV1().Pods(releaseNS).Delete(ctx, leader, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := cs.CoordinationV1().Leases(platformNS).Get(ctx, leaseName, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, nil //nolint:nilerr // keep polling
		}
		return *l.Spec.HolderIdentity != leader && *l.Spec.HolderIdentity != "", nil
	}), "another replica takes the Lease")
	killedAt := time.Now()
	waitFresh(ctx, t, hc, "disk", func(h *healthv1alpha1.Health) bool { return h.Status.ObservedAt.After(killedAt) })
	// The Deployment's replacement reads Ready only once the agent found it
	// through the -ingest Service (which lists it while it warms up) and
	// its reports arrived.
	var replacement *corev1.Pod
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, p := range waitReady(ctx, t, cs, "app.kubernetes.io/name=cozy-health-aggregator", 3) {
			if !known[p.Name] {
				replacement = &p
				return true, nil
			}
		}
		return false, nil
	}), "the Deployment's replacement replica reads Ready")
	t.Logf("replacement %s Ready %s after the leader's pod was deleted", replacement.Name, time.Since(deletedAt).Round(time.Millisecond))
	m := scrape(ctx, t, cs, replacement)
	assert.Equal(t, 1.0, m["cozy_health_ingest_streams"], "the replacement has the agent's stream")
	assert.Positive(t, m["cozy_health_reports_accepted_total"], "and accepted its reports before reading Ready")

	// helm uninstall leaves nothing of the release but the CRD.
	rel, err := h.Last()
	require.NoError(t, err)
	require.NoError(t, h.Uninstall())
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, nil
	}), "every pod of the release is gone")
	assertGone(ctx, t, c, rel.Manifest)
	cms, err := cs.CoreV1().ConfigMaps(releaseNS).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, cm := range cms.Items {
		assert.Equal(t, "kube-root-ca.crt", cm.Name, "ConfigMap left after uninstall")
	}
	secrets, err := cs.CoreV1().Secrets(releaseNS).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, s := range secrets.Items {
		assert.Fail(t, "Secret left after uninstall", "%s (%s)", s.Name, s.Type)
	}
	_, err = hc.HealthV1alpha1().Healths(platformNS).List(ctx, metav1.ListOptions{})
	require.NoError(t, err, "the CRD stays")
}

// waitReady waits until exactly n pods match selector and all are Ready.
func waitReady(ctx context.Context, t *testing.T, cs kubernetes.Interface, selector string, n int) []corev1.Pod {
	t.Helper()
	var ready []corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, nil //nolint:nilerr // keep polling
		}
		ready = ready[:0]
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				return false, nil
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					ready = append(ready, p)
				}
			}
		}
		return len(pods.Items) == n && len(ready) == n, nil
	})
	if err != nil {
		pods, _ := cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{})
		for _, p := range pods.Items {
			t.Logf("pod %s: %s %+v", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
		}
		require.NoError(t, err, "%d Ready pods %s", n, selector)
	}
	return ready
}

// waitFresh waits for the Health object name in the platform namespace to be
// fresh (freshUntil in the future) and to satisfy ok.
func waitFresh(ctx context.Context, t *testing.T, hc versioned.Interface, name string, ok func(*healthv1alpha1.Health) bool) *healthv1alpha1.Health {
	t.Helper()
	var got *healthv1alpha1.Health
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		h, err := hc.HealthV1alpha1().Healths(platformNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // not written yet
		}
		got = h
		return h.Status.FreshUntil != nil && h.Status.FreshUntil.After(time.Now()) && ok(h), nil
	}), "a fresh Health %s/%s (last: %+v)", platformNS, name, got)
	return got
}

// watchFresh checks, until the returned stop is called, that the Health
// object never reads stale (freshUntil in the past).
func watchFresh(ctx context.Context, t *testing.T, hc versioned.Interface, name string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var stale []string
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			h, err := hc.HealthV1alpha1().Healths(platformNS).Get(ctx, name, metav1.GetOptions{})
			if err == nil && (h.Status.FreshUntil == nil || h.Status.FreshUntil.Time.Before(time.Now())) {
				stale = append(stale, time.Now().Format(time.RFC3339Nano))
			}
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	return func() {
		cancel()
		<-done
		assert.Empty(t, stale, "Health %s read stale during the rollout at", name)
	}
}

// scrape reads a replica's /metrics through the apiserver's pod proxy (by
// port number: kube-apiserver v1.37.2 panics on a named port there).
func scrape(ctx context.Context, t *testing.T, cs kubernetes.Interface, pod *corev1.Pod) map[string]float64 {
	t.Helper()
	port := ""
	for _, p := range pod.Spec.Containers[0].Ports {
		if p.Name == "metrics" {
			port = strconv.Itoa(int(p.ContainerPort))
		}
	}
	require.NotEmpty(t, port, "pod %s has a metrics port", pod.Name)
	raw, err := cs.CoreV1().RESTClient().Get().Namespace(releaseNS).Resource("pods").Name(pod.Name + ":" + port).SubResource("proxy").Suffix("metrics").DoRaw(ctx)
	require.NoError(t, err)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	require.NoError(t, err)
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.Metric {
			key := name
			var labels []string
			for _, l := range m.Label {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			}
		}
	}
	return out
}

func sumPrefix(m map[string]float64, prefix string) float64 {
	var s float64
	for k, v := range m {
		if strings.HasPrefix(k, prefix) {
			s += v
		}
	}
	return s
}

// runPlugin runs bin/kubectl-health and returns its stdout and exit code.
func runPlugin(ctx context.Context, t *testing.T, plugin, kubeconfig string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.CommandContext(ctx, plugin, append([]string{"--kubeconfig=" + kubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		require.NoError(t, err)
	}
	t.Logf("kubectl health %s -> %d\n%s%s", strings.Join(args, " "), cmd.ProcessState.ExitCode(), stdout.String(), stderr.String())
	return stdout.String(), cmd.ProcessState.ExitCode()
}

// assertGone checks that no object of a release manifest exists any more.
func assertGone(ctx context.Context, t *testing.T, c *realnode.Cluster, manifest string) {
	t.Helper()
	for _, doc := range strings.Split(manifest, "\n---") {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil || obj.Kind == "" {
			continue
		}
		ns := obj.Metadata.Namespace
		if ns == "" && obj.Kind != "ClusterRole" && obj.Kind != "ClusterRoleBinding" && obj.Kind != "Namespace" {
			ns = releaseNS
		}
		args := []string{"get", strings.ToLower(obj.Kind), obj.Metadata.Name, "--ignore-not-found", "-o", "name"}
		if ns != "" {
			args = append(args, "-n", ns)
		}
		out, err := c.Kubectl(ctx, args...)
		if err != nil && !apierrors.IsNotFound(err) {
			assert.NoError(t, err)
			continue
		}
		assert.Empty(t, strings.TrimSpace(out), "%s %s/%s left after uninstall", obj.Kind, ns, obj.Metadata.Name)
	}
}

// guardOnRealNode drives the chart's drain guard (guard.enabled: the
// ValidatingWebhookConfiguration through the guard Service, its caBundle
// kept by the aggregators) on the real node: an eviction from the cordoned
// node is answered as drain-check answers (refused with the reason when
// blocked or unknown; let through when safe), cozy-health's own pods are
// never held, and with the Node's override a real eviction goes through and
// the kubelet stops the pod.
func guardOnRealNode(ctx context.Context, t *testing.T, c *realnode.Cluster, cs kubernetes.Interface, aggPods []corev1.Pod, plugin string) {
	t.Helper()
	// The aggregators publish their CA into the webhook's caBundle.
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		w, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "cozy-health-drain-guard", metav1.GetOptions{})
		return err == nil && len(w.Webhooks) == 1 && len(w.Webhooks[0].ClientConfig.CABundle) > 0, nil
	}), "the drain guard's webhook has its caBundle")

	require.NoError(t, c.EnsureNamespace(ctx, "apps"))
	web := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "pause", Image: realnode.PauseImage, ImagePullPolicy: corev1.PullNever}}}}
	_, err := cs.CoreV1().Pods("apps").Create(ctx, web, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("apps").Get(ctx, "web", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	}), "the workload pod runs on the node")

	setNode := func(f func(*corev1.Node)) {
		n, err := cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		require.NoError(t, err)
		f(n)
		_, err = cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	setNode(func(n *corev1.Node) { n.Spec.Unschedulable = true })
	defer setNode(func(n *corev1.Node) {
		n.Spec.Unschedulable = false
		delete(n.Annotations, "health.cozystack.io/drain-guard")
	})

	decided := func() float64 {
		var sum float64
		for i := range aggPods {
			sum += sumPrefix(scrape(ctx, t, cs, &aggPods[i]), "cozy_health_guard_evictions_total{")
		}
		return sum
	}
	before := decided()
	// Ask as a dry run until the guard answers (the apiserver reaches the
	// Service once kube-proxy programmed it; until then failurePolicy
	// Ignore lets the dry run through uncounted).
	dry := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"}, DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}}
	var answer error
	require.NoError(t, wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		answer = cs.PolicyV1().Evictions("apps").Evict(ctx, dry)
		return answer != nil || decided() > before, nil
	}), "the guard answers an eviction from the cordoned node")
	// The verdict drain-check gives next to the guard's answer (asked again
	// a few times: the two are two reads of a state that may move).
	var verdict drainapi.Result
	for range 5 {
		out, _ := runPlugin(ctx, t, plugin, c.Kubeconfig, "drain-check", nodeName, "-o", "json")
		require.NoError(t, json.Unmarshal([]byte(out), &verdict), "%s", out)
		if (answer == nil) == (verdict.Verdict == drainapi.Safe) {
			break
		}
		time.Sleep(2 * time.Second)
		answer = cs.PolicyV1().Evictions("apps").Evict(ctx, dry)
	}
	t.Logf("guard on the real node: drain-check %s, eviction answer: %v", verdict.Verdict, answer)
	if answer != nil {
		assert.True(t, apierrors.IsTooManyRequests(answer), "%v", answer)
		assert.Contains(t, answer.Error(), `denied the request: cozy-health: draining node-1 (reboot) is `)
		assert.NotEqual(t, drainapi.Safe, verdict.Verdict, "refused while drain-check says safe: %v", answer)
	} else {
		assert.Equal(t, drainapi.Safe, verdict.Verdict, "let through while drain-check says %s", verdict.Verdict)
	}

	// cozy-health's own pods are never held: a dry-run eviction of an
	// aggregator goes through whatever the verdict.
	require.NoError(t, cs.PolicyV1().Evictions(releaseNS).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: releaseNS, Name: aggPods[0].Name},
		DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}}))

	// The operator's override: the real eviction goes through and the
	// kubelet stops the pod.
	setNode(func(n *corev1.Node) {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations["health.cozystack.io/drain-guard"] = "disabled"
	})
	require.NoError(t, wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		return cs.PolicyV1().Evictions("apps").Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"}}) == nil, nil
	}), "the override lets the eviction through")
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Pods("apps").Get(ctx, "web", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}), "the kubelet stopped the evicted pod")
}
