package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	hv "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
	ac "github.com/cozystack/cozy-health/pkg/applyconfiguration/health/v1alpha1"
	"github.com/cozystack/cozy-health/pkg/client/clientset/versioned"
	"github.com/cozystack/cozy-health/test/harness"
)

const fieldManager = "cozy-health-aggregator"

// syncBuffer is a bytes.Buffer safe for a writer goroutine and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
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

func run(ctx context.Context, args ...string) (code int, out, errOut string) {
	var o, e syncBuffer
	code = Run(ctx, args, IO{Out: &o, Err: &e})
	return code, o.String(), e.String()
}

// apply writes one Health object as the aggregator does (SSA, spec then
// status, field manager cozy-health-aggregator).
func apply(t *testing.T, cs versioned.Interface, ns, name string, st *ac.HealthStatusApplyConfiguration) {
	t.Helper()
	ctx := context.Background()
	_, err := cs.HealthV1alpha1().Healths(ns).Apply(ctx, ac.Health(name, ns).WithSpec(ac.HealthSpec().WithComponent(name)),
		metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
	require.NoError(t, err)
	_, err = cs.HealthV1alpha1().Healths(ns).ApplyStatus(ctx, ac.Health(name, ns).WithStatus(st), metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
	require.NoError(t, err)
}

func status(overall hv.Status, freshUntil time.Time) *ac.HealthStatusApplyConfiguration {
	return ac.HealthStatus().WithOverall(overall).WithObservedAt(metav1.NewTime(freshUntil.Add(-30 * time.Second))).WithFreshUntil(metav1.NewTime(freshUntil))
}

func setup(t *testing.T) (*harness.ControlPlane, versioned.Interface) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp := harness.Start(t)
	require.NoError(t, cp.InstallCRDs(ctx))
	for _, ns := range []string{"cozy-system", "tenant-foo"} {
		require.NoError(t, cp.EnsureNamespace(ctx, ns))
	}
	cs, err := versioned.NewForConfig(cp.Config)
	require.NoError(t, err)

	now := time.Now()
	fresh := now.Add(10 * time.Minute)
	apply(t, cs, "cozy-system", "etcd", status(hv.StatusDegraded, fresh).
		WithNodes(map[string]ac.NodeStateApplyConfiguration{
			"node-1": *ac.NodeState().WithStatus(hv.StatusHealthy),
			"node-2": *ac.NodeState().WithStatus(hv.StatusDown).WithReason("ServiceNotRunning").WithMessage("etcd service is Finished"),
			"node-3": *ac.NodeState().WithStatus(hv.StatusHealthy),
		}).WithDegradedNodes("node-2").WithIssues(1).
		WithConditions(
			ac.HealthCondition().WithType("Quorum").WithStatus(hv.ConditionTrue).WithReason("QuorumAtRisk").WithMessage("2/3 voting members healthy").WithLastTransitionTime(metav1.NewTime(now)),
			ac.HealthCondition().WithType("EtcdMember").WithStatus(hv.ConditionFalse).WithReason("ServiceNotRunning").WithMessage("etcd on node-2 is not running").
				WithResourceRef(ac.ResourceRef().WithKind("Node").WithName("node-2")).WithLastTransitionTime(metav1.NewTime(now)),
		))
	// linstor last said Healthy but is past freshUntil: must read Unknown (stale).
	apply(t, cs, "cozy-system", "linstor", status(hv.StatusHealthy, now.Add(-time.Minute)).
		WithNodes(map[string]ac.NodeStateApplyConfiguration{"node-1": *ac.NodeState().WithStatus(hv.StatusHealthy)}))
	apply(t, cs, "cozy-system", "cilium", status(hv.StatusHealthy, fresh).
		WithNodes(map[string]ac.NodeStateApplyConfiguration{
			"node-1": *ac.NodeState().WithStatus(hv.StatusHealthy), "node-2": *ac.NodeState().WithStatus(hv.StatusHealthy),
		}))
	apply(t, cs, "tenant-foo", "control-plane", status(hv.StatusHealthy, fresh))
	return cp, cs
}

func firstWords(out string) []string {
	var w []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		w = append(w, strings.Fields(strings.TrimLeft(l, "│├└─ "))[0])
	}
	return w
}

func TestPluginOnRealAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, cs := setup(t)

	t.Run("tree, every namespace, problems first, stale never green", func(t *testing.T) {
		code, out, errOut := run(ctx, "--kubeconfig", cp.Kubeconfig)
		require.Equal(t, ExitOK, code, errOut)
		t.Log("\n" + out)
		assert.Equal(t, []string{"cozy-system", "etcd", "node", "EtcdMember", "linstor", "cilium", "tenant-foo", "control-plane"}, firstWords(out))
		assert.Regexp(t, `├─ etcd\s+Degraded\s+1 issue\(s\)`, out)
		assert.Regexp(t, `node node-2\s+Down\s+ServiceNotRunning: etcd service is Finished`, out)
		assert.Regexp(t, `linstor\s+Unknown \(stale\)\s+past freshUntil \S+; last said Healthy`, out)
		assert.NotRegexp(t, `linstor\s+Healthy`, out)
	})

	t.Run("KUBECONFIG and -n like kubectl", func(t *testing.T) {
		t.Setenv("KUBECONFIG", cp.Kubeconfig)
		code, out, errOut := run(ctx, "-n", "tenant-foo")
		require.Equal(t, ExitOK, code, errOut)
		assert.Equal(t, []string{"tenant-foo", "control-plane"}, firstWords(out))
		code, out, _ = run(ctx, "-A")
		require.Equal(t, ExitOK, code)
		assert.Contains(t, out, "tenant-foo")
		assert.Contains(t, out, "cozy-system")
	})

	t.Run("unknown context is an error, exit 2", func(t *testing.T) {
		code, _, errOut := run(ctx, "--kubeconfig", cp.Kubeconfig, "--context", "nope")
		assert.Equal(t, ExitUnknown, code)
		assert.Contains(t, errOut, "nope")
	})

	t.Run("nodes", func(t *testing.T) {
		code, out, errOut := run(ctx, "--kubeconfig", cp.Kubeconfig, "nodes")
		require.Equal(t, ExitOK, code, errOut)
		t.Log("\n" + out)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 4)
		assert.Regexp(t, `^node-2\s+Down\s+etcd=Down\(ServiceNotRunning\) cilium=Healthy$`, lines[1])
		assert.Regexp(t, `^node-1\s+Unknown \(stale\)\s+linstor=Unknown \(stale\) cilium=Healthy etcd=Healthy$`, lines[2])
		assert.Regexp(t, `^node-3\s+Healthy\s+etcd=Healthy$`, lines[3])
	})

	t.Run("node NAME", func(t *testing.T) {
		code, out, errOut := run(ctx, "--kubeconfig", cp.Kubeconfig, "node", "node-2")
		require.Equal(t, ExitOK, code, errOut)
		t.Log("\n" + out)
		assert.Regexp(t, `NODE node-2\s+Down`, out)
		assert.Regexp(t, `cozy-system/etcd\s+Down\s+ServiceNotRunning: etcd service is Finished\n\s+EtcdMember\s+False\s+ServiceNotRunning: etcd on node-2 is not running`, out)
		code, _, errOut = run(ctx, "--kubeconfig", cp.Kubeconfig, "node", "ghost")
		assert.Equal(t, ExitUnknown, code)
		assert.Contains(t, errOut, "node not found: ghost")
	})

	t.Run("tenant falls back to its context namespace", func(t *testing.T) {
		_, err := cp.Clientset().RbacV1().Roles("tenant-foo").Create(ctx, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "health-view"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{hv.SchemeGroupVersion.Group}, Resources: []string{"healths"}, Verbs: []string{"get", "list", "watch"}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = cp.Clientset().RbacV1().RoleBindings("tenant-foo").Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "health-view"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "health-view"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		kc, err := cp.UserKubeconfig("alice")
		require.NoError(t, err)
		raw, err := clientcmd.LoadFromFile(kc)
		require.NoError(t, err)
		for _, c := range raw.Contexts {
			c.Namespace = "tenant-foo"
		}
		tenantKC := filepath.Join(t.TempDir(), "alice")
		require.NoError(t, clientcmd.WriteToFile(*raw, tenantKC))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			code, out, errOut := run(ctx, "--kubeconfig", tenantKC)
			assert.Equal(c, ExitOK, code, errOut)
			assert.Contains(c, errOut, "showing namespace tenant-foo")
			assert.Equal(c, []string{"tenant-foo", "control-plane"}, firstWords(out))
		}, time.Minute, time.Second)
		code, _, errOut := run(ctx, "--kubeconfig", tenantKC, "-n", "cozy-system")
		assert.Equal(t, ExitUnknown, code)
		assert.Contains(t, errOut, "forbidden")
	})

	t.Run("watch prints the tree again on change", func(t *testing.T) {
		wctx, stop := context.WithCancel(ctx)
		var o, e syncBuffer
		done := make(chan int, 1)
		go func() {
			done <- Run(wctx, []string{"--kubeconfig", cp.Kubeconfig, "-n", "cozy-system", "-w"}, IO{Out: &o, Err: &e})
		}()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Regexp(c, `cilium\s+Healthy`, o.String())
		}, time.Minute, 200*time.Millisecond)
		apply(t, cs, "cozy-system", "cilium", status(hv.StatusDown, time.Now().Add(10*time.Minute)).
			WithNodes(map[string]ac.NodeStateApplyConfiguration{"node-1": *ac.NodeState().WithStatus(hv.StatusDown).WithReason("AgentUnreachable")}))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			out := o.String()
			frames := strings.Split(out, "--- ")
			last := frames[len(frames)-1]
			assert.GreaterOrEqual(c, len(frames), 3, out)
			assert.Regexp(c, `cilium\s+Down`, last)
			assert.Regexp(c, `node node-1\s+Down\s+AgentUnreachable`, last)
			// cilium (Down) now sorts above etcd (Degraded).
			assert.Less(c, strings.Index(last, "cilium"), strings.Index(last, "etcd"))
		}, time.Minute, 200*time.Millisecond)
		stop()
		select {
		case code := <-done:
			assert.Equal(t, ExitOK, code, e.String())
		case <-time.After(30 * time.Second):
			t.Fatal("watch did not stop")
		}
	})
}
