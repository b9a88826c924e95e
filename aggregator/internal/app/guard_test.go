package app

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/cozystack/cozy-health/aggregator/internal/guard"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/test/harness"
)

// etcdFeeder sends etcdReport for each node it holds, every 500 ms, to a
// replica, as its agents would.
type etcdFeeder struct {
	mu     sync.Mutex
	seq    uint64
	status map[string]report.Status
}

func (f *etcdFeeder) set(node string, s report.Status) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status[node] = s
}

func (f *etcdFeeder) drop(node string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.status, node)
}

func (f *etcdFeeder) run(ctx context.Context, a *App) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		f.mu.Lock()
		f.seq++
		now := time.Now()
		for node, s := range f.status {
			a.State().Accept(etcdReport(node, f.seq, s), now)
		}
		f.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// guardWebhook is the ValidatingWebhookConfiguration the chart renders,
// pointed at url (the test's replica) instead of the Service.
func guardWebhook(url string, ca []byte, timeout int32) *admissionregistrationv1.ValidatingWebhookConfiguration {
	fail := admissionregistrationv1.Ignore
	none := admissionregistrationv1.SideEffectClassNone
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "cozy-health-drain-guard"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "drain-guard.health.cozystack.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(url), CABundle: ca},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/eviction"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)}}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			TimeoutSeconds:          ptr.To(timeout),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
}

func guardPod(ns, name, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{Name: "c", Image: "example.invalid/pause"}}}}
}

func evict(ctx context.Context, cs kubernetes.Interface, ns, name string) error {
	return cs.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
}

// evictDryRun asks for pod's eviction as a dry run: what the guard would
// answer a drain, with nothing changed.
func evictDryRun(ctx context.Context, cs kubernetes.Interface, ns, name string) error {
	return cs.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}})
}

func cordon(ctx context.Context, t *testing.T, cs kubernetes.Interface, node string, on bool) {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	require.NoError(t, err)
	n.Spec.Unschedulable = on
	_, err = cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// kubectlDrain runs the real kubectl drain in the background; its output
// and exit come back on the returned channel.
type drainRun struct {
	done chan struct{}
	out  *syncBuffer
	err  error
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func kubectlDrain(ctx context.Context, t *testing.T, cp *harness.ControlPlane, node string) *drainRun {
	t.Helper()
	r := &drainRun{done: make(chan struct{}), out: &syncBuffer{}}
	cmd := exec.CommandContext(ctx, cp.Binary("kubectl"), "--kubeconfig", cp.Kubeconfig, "drain", node,
		"--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=3m")
	cmd.Stdout, cmd.Stderr = r.out, r.out
	require.NoError(t, cmd.Start())
	go func() { r.err = cmd.Wait(); close(r.done) }()
	return r
}

func (r *drainRun) finished() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// TestGuardRefusesDrainWhileBlocked runs the drain guard on the real
// aggregator behind a real kube-apiserver's ValidatingWebhookConfiguration
// and drives the real kubectl drain through it: refused with cozy-health's
// reason while node-2 is blocked (node-1's etcd down), completed once safe;
// an unknown verdict refused until --guard-unknown-for after the cordon;
// cozy-health's own pods always evicted; the Node override; fail-open when
// no replica answers.
func TestGuardRefusesDrainWhileBlocked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cp := startPlane(t)
	cs := cp.Clientset()
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n,
			Labels: map[string]string{"node-role.kubernetes.io/control-plane": ""}}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	for _, ns := range []string{"apps", "cozy-health"} {
		require.NoError(t, cp.EnsureNamespace(ctx, ns))
	}
	cfg := testConfig(t, "guard-test")
	cfg.HeartbeatGrace = 3 * time.Second
	cfg.GuardAddr = "127.0.0.1:0"
	cfg.GuardExemptNamespaces = []string{"cozy-health"}
	cfg.GuardUnknownFor = 12 * time.Second
	require.NoError(t, cfg.Validate())
	a := startReplica(t, cp.Config, cfg, zaptest.NewLogger(t)).app
	f := &etcdFeeder{status: map[string]report.Status{"node-1": report.StatusDown, "node-2": report.StatusHealthy, "node-3": report.StatusHealthy}}
	go f.run(ctx, a)

	ca, err := os.ReadFile(filepath.Join(filepath.Dir(cfg.TLSCert), "ca.crt"))
	require.NoError(t, err)
	_, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx,
		// 10 s: on a loaded machine a slow answer must not fail open (and
		// evict the pod the test waits to see refused); the fail-open
		// phase below sets the shipped kind of timeout, 2 s.
		guardWebhook("https://"+a.GuardAddr()+guard.Path, ca, 10), metav1.CreateOptions{})
	require.NoError(t, err)
	for _, p := range []*corev1.Pod{guardPod("apps", "web-0", "node-2"), guardPod("apps", "web-1", "node-2"),
		guardPod("cozy-health", "cozy-health-aggregator-0", "node-2"), guardPod("apps", "db-0", "node-3")} {
		_, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		require.NoError(t, err)
	}

	// A preview while node-2 is schedulable: a dry-run eviction is judged
	// as a drain would be (the webhook configuration reaches the
	// apiserver's admission within a second or so: wait for the first
	// refusal), and kubectl drain --dry-run=server (its cordon a dry run
	// too) prints the refusal and changes nothing.
	var preview error
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		preview = evictDryRun(ctx, cs, "apps", "web-0")
		assert.Error(c, preview)
	}, 30*time.Second, 200*time.Millisecond)
	assert.True(t, apierrors.IsTooManyRequests(preview), "%v", preview)
	assert.Contains(t, preview.Error(), "cozy-health: draining node-2 (reboot) is blocked: etcd-quorum:")
	previewOut, err := exec.CommandContext(ctx, cp.Binary("kubectl"), "--kubeconfig", cp.Kubeconfig, "drain", "node-2", "--dry-run=server",
		"--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=4s").CombinedOutput()
	require.Error(t, err, "a dry-run drain of a blocked node reports the refusal: %s", previewOut)
	assert.Contains(t, string(previewOut), `denied the request: cozy-health: draining node-2 (reboot) is blocked`)
	t.Logf("kubectl drain --dry-run=server while blocked:\n%s", previewOut)
	n, err := cs.CoreV1().Nodes().Get(ctx, "node-2", metav1.GetOptions{})
	require.NoError(t, err)
	assert.False(t, n.Spec.Unschedulable, "the dry run cordoned nothing")
	for _, p := range []string{"web-0", "web-1"} {
		_, err = cs.CoreV1().Pods("apps").Get(ctx, p, metav1.GetOptions{})
		require.NoError(t, err, "the dry run evicted %s", p)
	}
	// The same eviction for real on a schedulable node is not a drain.
	_, err = cs.CoreV1().Pods("apps").Create(ctx, guardPod("apps", "web-x", "node-2"), metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, evict(ctx, cs, "apps", "web-x"))

	// Cordoned: the drain is judged (db-0 on node-3 stays to be drained
	// later; web-0 is recreated).
	cordon(ctx, t, cs, "node-2", true)
	// The webhook configuration reaches the apiserver's admission within a
	// second or so: wait for the first refusal.
	var refusal error
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		refusal = evict(ctx, cs, "apps", "web-0")
		assert.Error(c, refusal)
	}, 30*time.Second, 200*time.Millisecond)
	// The webhook's 429 reaches the client as 429 TooManyRequests, what
	// kubectl drain retries (apierrors.IsTooManyRequests).
	assert.True(t, apierrors.IsTooManyRequests(refusal), "%v", refusal)
	assert.Contains(t, refusal.Error(), `admission webhook "drain-guard.health.cozystack.io" denied the request: cozy-health: draining node-2 (reboot) is blocked: etcd-quorum:`)
	t.Logf("refusal: %v", refusal)

	// cozy-health's own pod on the blocked node: evicted.
	require.NoError(t, evict(ctx, cs, "cozy-health", "cozy-health-aggregator-0"))

	// The real kubectl drain: refused, retrying, while blocked.
	run := kubectlDrain(ctx, t, cp, "node-2")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, run.out.String(), "(will retry after 5s): admission webhook \"drain-guard.health.cozystack.io\" denied the request: cozy-health: draining node-2 (reboot) is blocked")
	}, 30*time.Second, 200*time.Millisecond)
	time.Sleep(6 * time.Second)
	require.False(t, run.finished(), "drain finished while blocked: %s", run.out.String())
	_, err = cs.CoreV1().Pods("apps").Get(ctx, "web-1", metav1.GetOptions{})
	require.NoError(t, err, "web-1 evicted while blocked")

	// node-1's etcd repaired: the verdict turns safe, the drain completes.
	repaired := time.Now()
	f.set("node-1", report.StatusHealthy)
	var safeAt time.Time
	go func() {
		for ctx.Err() == nil {
			if res, err := a.drain.Check("node-2", "test"); err == nil && res.Verdict == "safe" {
				safeAt = time.Now()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	var evictedAt time.Time
	require.Eventually(t, func() bool {
		_, err := cs.CoreV1().Pods("apps").Get(ctx, "web-1", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			evictedAt = time.Now()
			return true
		}
		return false
	}, time.Minute, 50*time.Millisecond)
	select {
	case <-run.done:
	case <-time.After(time.Minute):
		t.Fatalf("kubectl drain did not complete once safe: %s", run.out.String())
	}
	require.NoError(t, run.err, run.out.String())
	assert.Contains(t, run.out.String(), "node/node-2 drained")
	require.False(t, safeAt.IsZero())
	t.Logf("repaired -> verdict safe: %s; safe -> first eviction allowed (pod gone): %s; repaired -> drain completed output:\n%s",
		safeAt.Sub(repaired).Round(time.Millisecond), evictedAt.Sub(safeAt).Round(time.Millisecond), run.out.String())
	// kubectl retries every 5 s: the first eviction after safe comes within one retry.
	assert.Less(t, evictedAt.Sub(safeAt), 7*time.Second)
	cordon(ctx, t, cs, "node-2", false)

	// Unknown: node-1's agent falls silent; draining node-3 hinges on it.
	f.drop("node-1")
	require.Eventually(t, func() bool {
		res, err := a.drain.Check("node-3", "test")
		return err == nil && res.Verdict == "unknown"
	}, 30*time.Second, 100*time.Millisecond)
	cordon(ctx, t, cs, "node-3", true)
	cordonedAt := time.Now()
	err = evict(ctx, cs, "apps", "db-0")
	require.Error(t, err)
	assert.True(t, apierrors.IsTooManyRequests(err), "%v", err)
	assert.Contains(t, err.Error(), "cozy-health: draining node-3 (reboot) is unknown:")
	assert.Contains(t, err.Error(), "health.cozystack.io/drain-guard=disabled")
	t.Logf("unknown refusal: %v", err)
	var allowedAt time.Time
	require.Eventually(t, func() bool {
		if evict(ctx, cs, "apps", "db-0") == nil {
			allowedAt = time.Now()
			return true
		}
		return false
	}, time.Minute, 250*time.Millisecond)
	waited := allowedAt.Sub(cordonedAt)
	t.Logf("unknown: refused for %s after the cordon (--guard-unknown-for %s)", waited.Round(time.Millisecond), cfg.GuardUnknownFor)
	assert.GreaterOrEqual(t, waited, cfg.GuardUnknownFor-time.Second)
	assert.Less(t, waited, cfg.GuardUnknownFor+3*time.Second)

	// The operator's override on a blocked node: allowed at once.
	f.set("node-1", report.StatusDown)
	f.set("node-3", report.StatusHealthy)
	_, err = cs.CoreV1().Pods("apps").Create(ctx, guardPod("apps", "web-2", "node-2"), metav1.CreateOptions{})
	require.NoError(t, err)
	cordon(ctx, t, cs, "node-3", false)
	cordon(ctx, t, cs, "node-2", true)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, apierrors.IsTooManyRequests(evict(ctx, cs, "apps", "web-2")))
	}, 30*time.Second, 200*time.Millisecond)
	n2, err := cs.CoreV1().Nodes().Get(ctx, "node-2", metav1.GetOptions{})
	require.NoError(t, err)
	n2.Annotations = map[string]string{guard.AnnotationGuard: guard.GuardDisabled}
	_, err = cs.CoreV1().Nodes().Update(ctx, n2, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, evict(ctx, cs, "apps", "web-2"))
	}, 10*time.Second, 100*time.Millisecond)

	// Fail-open: no replica answers. A closed port (connection refused)
	// and a port that accepts but never answers (the webhook's 2 s
	// timeout): both let the eviction through under failurePolicy Ignore.
	delete(n2.Annotations, guard.AnnotationGuard)
	n2, err = cs.CoreV1().Nodes().Get(ctx, "node-2", metav1.GetOptions{})
	require.NoError(t, err)
	n2.Annotations = nil
	_, err = cs.CoreV1().Nodes().Update(ctx, n2, metav1.UpdateOptions{})
	require.NoError(t, err)
	hang, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer hang.Close()
	go func() {
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedAddr := closed.Addr().String()
	require.NoError(t, closed.Close())
	for i, target := range []struct{ name, addr string }{{"connection refused", closedAddr}, {"no answer", hang.Addr().String()}} {
		pod := guardPod("apps", "fo-"+string(rune('a'+i)), "node-2")
		_, err := cs.CoreV1().Pods("apps").Create(ctx, pod, metav1.CreateOptions{})
		require.NoError(t, err)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.True(c, apierrors.IsTooManyRequests(evict(ctx, cs, "apps", pod.Name)))
		}, 30*time.Second, 200*time.Millisecond)
		vwc, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "cozy-health-drain-guard", metav1.GetOptions{})
		require.NoError(t, err)
		vwc.Webhooks[0].ClientConfig.URL = ptr.To("https://" + target.addr + guard.Path)
		vwc.Webhooks[0].TimeoutSeconds = ptr.To[int32](2)
		_, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, vwc, metav1.UpdateOptions{})
		require.NoError(t, err)
		var took time.Duration
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			start := time.Now()
			assert.NoError(c, evict(ctx, cs, "apps", pod.Name))
			took = time.Since(start)
		}, 30*time.Second, 200*time.Millisecond)
		t.Logf("fail-open (%s): the eviction went through in %s", target.name, took.Round(time.Millisecond))
		assert.Less(t, took, 5*time.Second)
		vwc, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "cozy-health-drain-guard", metav1.GetOptions{})
		require.NoError(t, err)
		vwc.Webhooks[0].ClientConfig.URL = ptr.To("https://" + a.GuardAddr() + guard.Path)
		_, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, vwc, metav1.UpdateOptions{})
		require.NoError(t, err)
	}

	// One command undoes the gate.
	_, err = cs.CoreV1().Pods("apps").Create(ctx, guardPod("apps", "web-3", "node-2"), metav1.CreateOptions{})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, apierrors.IsTooManyRequests(evict(ctx, cs, "apps", "web-3")))
	}, 30*time.Second, 200*time.Millisecond)
	out, err := cp.Kubectl(ctx, "delete", "validatingwebhookconfiguration", "cozy-health-drain-guard")
	require.NoError(t, err, out)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, evict(ctx, cs, "apps", "web-3"))
	}, 30*time.Second, 200*time.Millisecond)
}
