package app

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/cozystack/cozy-health/pkg/client/clientset/versioned"
	"github.com/cozystack/cozy-health/pkg/report"
)

// readyz returns the replica's /readyz status code and body.
func readyz(t *testing.T, a *App) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + a.HTTPAddr() + "/readyz")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// TestWarmUpWaitsForEveryExpectedNode: a replica neither reads ready nor
// campaigns for the Lease before every expected Node its kubelet reports
// Ready has reported to it,
// so it never writes a node whose agent has not found it yet as Unknown;
// past --warm-up-max it campaigns anyway, the silent node then reading
// Unknown.
func TestWarmUpWaitsForEveryExpectedNode(t *testing.T) {
	cp := startPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	nodes := cp.Clientset().CoreV1().Nodes()
	// node-off's kubelet says NotReady (powered off): nobody waits for its
	// agent.
	for name, ready := range map[string]corev1.ConditionStatus{"node-a": corev1.ConditionTrue, "node-b": corev1.ConditionTrue, "node-off": corev1.ConditionFalse} {
		createNode(ctx, t, nodes, name, ready)
	}
	hc, err := versioned.NewForConfig(cp.Config)
	require.NoError(t, err)

	cfg := testConfig(t, "warming-replica")
	cfg.WarmUpMax = 2 * time.Minute
	r := startReplica(t, cp.Config, cfg, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	f, _ := feed(ctx, t, map[string]report.Status{"node-a": report.StatusHealthy}, r.app)

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		code, body := readyz(t, r.app)
		assert.Equal(c, http.StatusServiceUnavailable, code)
		assert.Contains(c, body, "1 of 2 expected Ready nodes reported (waiting for node-b)")
	}, 30*time.Second, 100*time.Millisecond)
	// Well past the lease duration (3 s), it has not campaigned, and so
	// written nothing.
	assert.Never(t, func() bool {
		_, err := getHealth(ctx, hc, report.ComponentNode)
		return leaseHolder(ctx, cp) != "" || !apierrors.IsNotFound(err)
	}, 5*time.Second, 250*time.Millisecond, "no Lease and no Health object while node-b has not reported")

	f.set("node-b", report.StatusHealthy)
	reportedAt := time.Now()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		code, _ := readyz(t, r.app)
		assert.Equal(c, http.StatusOK, code)
		assert.Equal(c, "warming-replica", leaseHolder(ctx, cp))
	}, 20*time.Second, 100*time.Millisecond)
	t.Logf("ready and leading %s after node-b's first report", time.Since(reportedAt).Round(time.Millisecond))
	// The first object it writes already has node-b as reported.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		h, err := getHealth(ctx, hc, report.ComponentNode)
		if assert.NoError(c, err) {
			assert.Equal(c, "Healthy", string(h.Status.Nodes["node-b"].Status))
			assert.Equal(c, "Unknown", string(h.Status.Nodes["node-off"].Status), "the NotReady node held nothing back and reads Unknown")
		}
	}, 20*time.Second, 100*time.Millisecond)

	// A node whose agent never reaches a second replica holds it back only
	// until --warm-up-max.
	createNode(ctx, t, nodes, "node-silent", corev1.ConditionTrue)
	cfg2 := testConfig(t, "second-replica")
	cfg2.WarmUpMax = 8 * time.Second
	startedAt := time.Now()
	r2 := startReplica(t, cp.Config, cfg2, zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)))
	f.mu.Lock()
	f.sinks = append(f.sinks, r2.app)
	f.mu.Unlock()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		code, body := readyz(t, r2.app)
		assert.Equal(c, http.StatusServiceUnavailable, code)
		assert.Contains(c, body, "2 of 3 expected Ready nodes reported (waiting for node-silent)")
	}, 6*time.Second, 100*time.Millisecond)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		code, _ := readyz(t, r2.app)
		assert.Equal(c, http.StatusOK, code)
	}, 20*time.Second, 100*time.Millisecond)
	assert.GreaterOrEqual(t, time.Since(startedAt), cfg2.WarmUpMax, "ready only once --warm-up-max ran out")
}

// createNode creates a Node and sets its Ready condition through the
// status subresource, as its kubelet does.
func createNode(ctx context.Context, t *testing.T, nodes typedcorev1.NodeInterface, name string, ready corev1.ConditionStatus) {
	t.Helper()
	n, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	_, err = nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
	require.NoError(t, err)
}
