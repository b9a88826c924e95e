package drainserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/cozystack/cozy-health/aggregator/internal/delegated"
	"github.com/cozystack/cozy-health/aggregator/internal/drain"
	"github.com/cozystack/cozy-health/aggregator/internal/drain/draintest"
	"github.com/cozystack/cozy-health/pkg/drainapi"
	"github.com/cozystack/cozy-health/test/harness"
)

var (
	pluginOnce sync.Once
	pluginPath string
	pluginErr  error
	// pluginDir is the temporary directory of a plugin built by the tests.
	pluginDir string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if pluginDir != "" {
		_ = os.RemoveAll(pluginDir)
	}
	os.Exit(code)
}

// plugin returns the kubectl-health binary: $COZY_HEALTH_BIN/kubectl-health
// (make test builds it) or one built from this checkout.
func plugin(t *testing.T) string {
	t.Helper()
	pluginOnce.Do(func() {
		if dir := os.Getenv("COZY_HEALTH_BIN"); dir != "" {
			if p := filepath.Join(dir, "kubectl-health"); fileExists(p) {
				pluginPath = p
				return
			}
		}
		dir, err := os.MkdirTemp("", "kubectl-health-test-")
		if err != nil {
			pluginErr = err
			return
		}
		pluginDir = dir
		pluginPath = filepath.Join(dir, "kubectl-health")
		cmd := exec.Command("go", "build", "-o", pluginPath, "github.com/cozystack/cozy-health/cmd/kubectl-health")
		cmd.Dir = harness.RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			pluginErr = errors.New("go build kubectl-health: " + err.Error() + ": " + string(out))
		}
	})
	require.NoError(t, pluginErr)
	return pluginPath
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// runPlugin runs the built binary and returns its exit code and output.
func runPlugin(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, plugin(t), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG=/nonexistent")
	var out, errOut syncWriter
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return code, out.String(), errOut.String()
}

type syncWriter struct {
	mu sync.Mutex
	b  []byte
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	return len(p), nil
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.b)
}

// TestKubectlHealthDrainCheckDirect runs the built plugin against this
// package's handler on a loopback listener (--aggregator-url).
func TestKubectlHealthDrainCheckDirect(t *testing.T) {
	svc, _, _ := newTestService(t, blockedCluster())
	base := serveHTTP(t, NewHandler(svc, nil))

	code, out, errOut := runPlugin(t, "drain-check", "node-1", "--aggregator-url", base)
	assert.Equal(t, 1, code, errOut)
	t.Log("\n" + out)
	assert.Contains(t, out, "Node node-1: BLOCKED")
	assert.Regexp(t, `blocked\s+etcd-quorum\s+etcd: node-1 is a voting member; with node-2 Down \(ServiceNotRunning\), draining node-1 leaves 1 of 3 voting members healthy, quorum needs 2`, out)

	code, out, errOut = runPlugin(t, "drain-check", "node-2", "--aggregator-url", base)
	assert.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "Node node-2: SAFE")

	code, out, errOut = runPlugin(t, "drain-check", "worker-1", "--aggregator-url", base)
	assert.Equal(t, 2, code, errOut)
	assert.Contains(t, out, "Node worker-1: UNKNOWN")
	assert.Contains(t, out, "has no report from its cozy-health agent")

	code, out, errOut = runPlugin(t, "drain-check", "node-1", "--aggregator-url", base, "-o", "json")
	assert.Equal(t, 1, code, errOut)
	var res drainapi.Result
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	assert.Equal(t, "node-1", res.Node)
	assert.Equal(t, drain.Blocked, res.Verdict)
	assert.Equal(t, drain.RuleEtcdQuorum, res.Reasons[0].Rule)
	assert.Len(t, res.Reasons, len(drain.Rules))

	code, _, errOut = runPlugin(t, "drain-check", "ghost", "--aggregator-url", base)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "HTTP 404: node not found: ghost is neither a Kubernetes Node nor reported by an agent")

	// Through kubectl itself: `kubectl health ...` finds kubectl-health on
	// PATH and passes the arguments and the exit code through.
	t.Run("through kubectl", func(t *testing.T) {
		harness.SkipShort(t)
		bin, err := harness.TestBin.Dir()
		require.NoError(t, err)
		kctx, kcancel := context.WithTimeout(context.Background(), time.Minute)
		defer kcancel()
		kubectl := exec.CommandContext(kctx, filepath.Join(bin, "kubectl"), "health", "drain-check", "node-1", "--aggregator-url", base)
		kubectl.Env = append(os.Environ(), "PATH="+filepath.Dir(plugin(t))+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG=/nonexistent")
		kout, err := kubectl.Output()
		var kexit *exec.ExitError
		require.ErrorAs(t, err, &kexit)
		assert.Equal(t, 1, kexit.ExitCode())
		assert.Contains(t, string(kout), "Node node-1: BLOCKED")
	})

	code, _, errOut = runPlugin(t, "drain-check", "node-1", "--aggregator-url", "http://127.0.0.1:1")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "ask aggregator")

	code, _, errOut = runPlugin(t, "drain-check", "node-1", "--aggregator-url", base, "-o", "yaml")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `--output: want json or nothing, got "yaml"`)
}

// TestKubectlHealthDrainCheckThroughServiceProxy: by default the plugin
// asks through the real apiserver's service proxy
// (/api/v1/namespaces/cozy-health/services/cozy-health-aggregator:http/proxy/v1/drain-check).
// The apiserver refuses loopback endpoints (EndpointSlice validation), and
// only loopback is ours to listen on, so the round trip to the handler is
// left to the lab e2e; here the request is shown to reach the proxy of the
// right Service and port as the kubeconfig's user, and every failure is exit 2.
func TestKubectlHealthDrainCheckThroughServiceProxy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp := harness.Start(t)
	cs := cp.Clientset()
	const ns = "cozy-health"
	require.NoError(t, cp.EnsureNamespace(ctx, ns))
	_, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "cozy-health-aggregator"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 8080, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	// The right Service and port name: the proxy found it and has no endpoint.
	code, _, errOut := runPlugin(t, "--kubeconfig", cp.Kubeconfig, "drain-check", "node-1")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "via service cozy-health/cozy-health-aggregator port http through the Kubernetes API: HTTP 503")
	assert.Contains(t, errOut, `no endpoints available for service "cozy-health-aggregator"`)

	// --aggregator-service and a numeric --aggregator-port reach the proxy
	// too (a port number is resolved by the apiserver against the Service).
	code, _, errOut = runPlugin(t, "--kubeconfig", cp.Kubeconfig, "drain-check", "node-1", "--aggregator-service", "nope", "--aggregator-port", "8080")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `services "nope" not found`)
	code, _, errOut = runPlugin(t, "--kubeconfig", cp.Kubeconfig, "drain-check", "node-1", "--aggregator-port", "8080")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `no endpoints available for service "cozy-health-aggregator"`)

	// A user without get on services/proxy is refused by the apiserver.
	kc, err := cp.UserKubeconfig("mallory")
	require.NoError(t, err)
	code, _, errOut = runPlugin(t, "--kubeconfig", kc, "drain-check", "node-1")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "HTTP 403")
	assert.Contains(t, errOut, `cannot get resource "services/proxy"`)
}

// TestKubectlHealthDrainCheckProxyRoundTrip: the whole default path — the
// plugin, the real apiserver's service proxy (RBAC, Service, EndpointSlice,
// Pod), and this package's handler. The apiserver only proxies to
// non-loopback Pod addresses, so its "cluster" egress goes through the
// harness's CONNECT proxy, which hands the tunnel for the Pod address
// 10.244.0.10:8080 to the handler's loopback listener: nothing is ever sent
// to 10.244.0.10.
func TestKubectlHealthDrainCheckProxyRoundTrip(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp := harness.Start(t)
	cs := cp.Clientset()
	svc, _, _ := newTestService(t, blockedCluster())
	base := serveHTTP(t, NewHandler(svc, nil))
	// The same service with delegated auth, behind a second port.
	authBase := serveHTTP(t, NewHandler(svc, NewAuthorizerFrom(delegated.New(cs, time.Second))))
	const podIP, podPort, authPort = "10.244.0.10", 8080, 8081
	var tunnels atomic.Int32
	stop, err := cp.RouteClusterEgress(ctx, func(ctx context.Context, target string) (net.Conn, error) {
		var to string
		switch target {
		case net.JoinHostPort(podIP, strconv.Itoa(podPort)):
			to = base
		case net.JoinHostPort(podIP, strconv.Itoa(authPort)):
			to = authBase
		default:
			return nil, fmt.Errorf("unexpected tunnel target %s", target)
		}
		tunnels.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, "tcp", strings.TrimPrefix(to, "http://"))
	})
	require.NoError(t, err)
	t.Cleanup(stop)

	const ns = "cozy-health"
	require.NoError(t, cp.CreateServiceAccount(ctx, ns, "cozy-health-aggregator"))
	pod, err := cp.CreateNodeAndPod(ctx, "node-1", ns, "cozy-health-aggregator-0", "cozy-health-aggregator")
	require.NoError(t, err)
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = podIP
	pod.Status.PodIPs = []corev1.PodIP{{IP: podIP}}
	_, err = cs.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	require.NoError(t, err)
	_, err = cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "cozy-health-aggregator"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(podPort)}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	ready := true
	_, err = cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "cozy-health-aggregator-1", Labels: map[string]string{discoveryv1.LabelServiceName: "cozy-health-aggregator"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{podIP}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod.Name, UID: pod.UID}}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(podPort))}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	var code int
	var out, errOut string
	require.Eventually(t, func() bool {
		code, out, errOut = runPlugin(t, "--kubeconfig", cp.Kubeconfig, "drain-check", "node-1")
		return code == 1
	}, time.Minute, time.Second, "last: exit %d, stdout %q, stderr %q", code, out, errOut)
	t.Log("\n" + out)
	assert.Contains(t, out, "Node node-1: BLOCKED")
	assert.Contains(t, out, "etcd: node-1 is a voting member; with node-2 Down (ServiceNotRunning), draining node-1 leaves 1 of 3 voting members healthy, quorum needs 2")

	code, out, errOut = runPlugin(t, "--kubeconfig", cp.Kubeconfig, "drain-check", "node-2", "-o", "json")
	assert.Equal(t, 0, code, errOut)
	assert.Contains(t, out, `"verdict": "safe"`)
	code, _, errOut = runPlugin(t, "--kubeconfig", cp.Kubeconfig, "drain-check", "worker-1")
	assert.Equal(t, 2, code, errOut)
	code, _, errOut = runPlugin(t, "--kubeconfig", cp.Kubeconfig, "drain-check", "ghost")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "HTTP 404: node not found: ghost is neither a Kubernetes Node nor reported by an agent")

	// With delegated auth on, the service proxy cannot pass the caller's
	// token (the apiserver strips it): 401, exit 2, with the way out.
	_, err = cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "cozy-health-aggregator-auth"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(authPort)}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "cozy-health-aggregator-auth-1", Labels: map[string]string{discoveryv1.LabelServiceName: "cozy-health-aggregator-auth"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{podIP}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod.Name, UID: pod.UID}}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(authPort))}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		code, _, errOut = runPlugin(t, "--kubeconfig", cp.Kubeconfig, "drain-check", "node-1", "--aggregator-service", "cozy-health-aggregator-auth")
		return strings.Contains(errOut, "HTTP 401")
	}, time.Minute, time.Second, "last: exit %d, stderr %q", code, errOut)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "use --aggregator-url with --aggregator-token")

	assert.GreaterOrEqual(t, tunnels.Load(), int32(1), "the answers came through the tunnel (kept alive between requests)")
}

func ptr[T any](v T) *T { return &v }

// TestKubectlHealthDrainCheckWait runs the built plugin's --wait against
// this package's handler: it keeps asking while node-1 is blocked and exits
// 0 as soon as the aggregator's state makes it safe.
func TestKubectlHealthDrainCheckWait(t *testing.T) {
	var nodes atomic.Pointer[map[string]drain.NodeInfo]
	blocked := blockedCluster()
	nodes.Store(&blocked)
	clk := clocktesting.NewFakeClock(t0)
	svc, err := NewService(Config{}, func(time.Time) map[string]drain.NodeInfo { return *nodes.Load() }, clk, nil, prometheus.NewRegistry())
	require.NoError(t, err)
	base := serveHTTP(t, NewHandler(svc, nil))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, plugin(t), "drain-check", "node-1", "--wait", "--interval", "100ms", "--timeout", "90s", "--aggregator-url", base)
	cmd.Env = append(os.Environ(), "KUBECONFIG=/nonexistent")
	var out, errOut syncWriter
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	require.Eventually(t, func() bool { return strings.Contains(errOut.String(), "drain-check node-1: blocked (etcd-quorum: ") }, time.Minute, 50*time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("--wait returned while node-1 is blocked: %v\n%s%s", err, out.String(), errOut.String())
	default:
	}
	healthy := draintest.EtcdCluster(3, nil)
	nodes.Store(&healthy)
	clk.Step(2 * time.Second) // past the cached snapshot's age
	require.NoError(t, <-done, "exit 0 once safe:\n%s%s", out.String(), errOut.String())
	assert.Contains(t, out.String(), "Node node-1: SAFE")
	assert.Contains(t, errOut.String(), "drain-check node-1: safe after ")
}
