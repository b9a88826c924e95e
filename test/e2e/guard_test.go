package e2e

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	healthv1alpha1 "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
	"github.com/cozystack/cozy-health/test/harness"
	"github.com/cozystack/cozy-health/test/lab"
)

// lockedBuffer is a bytes.Buffer a process writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDrainGuardOnTheLab is issue 37's lab case with the real kubectl: the
// lab runs the drain guard (the chart's webhook on pods/eviction, one
// webhook per replica), so `kubectl drain node-2 --ignore-daemonsets
// --delete-emptydir-data --force` is refused with cozy-health's reason
// while node-1's etcd member is stopped (draining node-2 would leave 1 of
// 3 voters), kubectl retries it as it retries a PodDisruptionBudget, and
// the drain completes once node-1's member is back. The agent pods, owned
// by their DaemonSet, are skipped, as in a real install.
func TestDrainGuardOnTheLab(t *testing.T) {
	harness.SkipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	l := upLab(ctx, t)
	dir := l.State.Dir
	cfg, err := clientcmd.BuildConfigFromFlags("", l.State.Kubeconfig)
	require.NoError(t, err)
	kube, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	fault := func(node, f string) {
		t.Helper()
		msg, err := lab.Fault(ctx, dir, node, f, "")
		require.NoError(t, err)
		t.Log(msg)
	}
	_, err = l.WaitFor(ctx, nil, "all Healthy", boundRecover, lab.AllHealthy(components))
	require.NoError(t, err)

	fault("node-1", "etcd-stop")
	_, err = l.WaitFor(ctx, nil, "etcd Degraded naming node-1", boundFault, lab.ComponentIs("etcd", healthv1alpha1.StatusDegraded, "node-1"))
	require.NoError(t, err)

	var out lockedBuffer
	cmd := exec.CommandContext(ctx, l.State.Kubectl, "--kubeconfig", l.State.Kubeconfig, "drain", "node-2",
		"--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=5m")
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	// Refused with the reason, and retried.
	refusal := `cozy-health: draining node-2 (reboot) is blocked`
	require.Eventually(t, func() bool { return strings.Count(out.String(), refusal) >= 2 }, 45*time.Second, 250*time.Millisecond,
		"kubectl drain refused with cozy-health's reason, twice (it retries): %s", out.String())
	assert.Contains(t, out.String(), "will retry after 5s", "kubectl retries the refusal as it retries a PDB's")
	assert.Contains(t, out.String(), "ignoring DaemonSet-managed Pods: cozy-health/cozy-health-agent-node-2", "the agent pod is the DaemonSet's")
	select {
	case err := <-done:
		t.Fatalf("kubectl drain ended while node-2 was blocked (%v): %s", err, out.String())
	default:
	}
	_, err = kube.CoreV1().Pods(lab.WorkloadNamespace).Get(ctx, "web-node-2", metav1.GetOptions{})
	require.NoError(t, err, "the workload pod is still there")

	// Repaired: the drain completes.
	repaired := time.Now()
	fault("node-1", "etcd-start")
	var evicted time.Duration
	require.Eventually(t, func() bool {
		_, err := kube.CoreV1().Pods(lab.WorkloadNamespace).Get(ctx, "web-node-2", metav1.GetOptions{})
		if apierrors.IsNotFound(err) && evicted == 0 {
			evicted = time.Since(repaired)
		}
		return evicted > 0
	}, boundRecover, 100*time.Millisecond, "the workload pod evicted once safe: %s", out.String())
	select {
	case err := <-done:
		require.NoError(t, err, "kubectl drain: %s", out.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("kubectl drain did not end after the eviction: %s", out.String())
	}
	assert.Contains(t, out.String(), "node/node-2 drained")
	t.Logf("node-1's etcd started -> node-2's workload evicted (kubectl retries every 5 s): %s\n%s", evicted.Round(100*time.Millisecond), out.String())

	// Undo: uncordon, and the workload back, as after a maintenance.
	_, err = exec.CommandContext(ctx, l.State.Kubectl, "--kubeconfig", l.State.Kubeconfig, "uncordon", "node-2").CombinedOutput()
	require.NoError(t, err)
	require.NoError(t, lab.CreateWorkload(ctx, kube, "node-2"))
}
