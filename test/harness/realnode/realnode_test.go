package realnode

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/cozystack/cozy-health/hack/image/oci"
	"github.com/cozystack/cozy-health/test/harness"
)

const probeImage = "localhost/cozy-health/nodeprobe:test"

// hostSnapshot is what the node may touch on the host, read before and after.
type hostSnapshot struct {
	Sysctls map[string]string
	Paths   map[string]bool
	Cgroups []string
	Tables  []string
	Links   []string
	NetNS   []string
}

func snapshotHost(t *testing.T) hostSnapshot {
	t.Helper()
	s := hostSnapshot{Sysctls: map[string]string{}, Paths: map[string]bool{}}
	for _, k := range hostSysctls {
		if b, err := os.ReadFile(filepath.Join("/proc/sys", k)); err == nil {
			s.Sysctls[k] = strings.TrimSpace(string(b))
		}
	}
	for _, p := range hostPaths {
		_, err := os.Lstat(p)
		s.Paths[p] = err == nil
	}
	for _, h := range cgroupHierarchies() {
		for _, e := range listDir(h) {
			if fi, err := os.Stat(filepath.Join(h, e)); err == nil && fi.IsDir() {
				s.Cgroups = append(s.Cgroups, filepath.Join(h, e))
			}
		}
	}
	sort.Strings(s.Cgroups)
	tables, err := nftTables()
	require.NoError(t, err)
	s.Tables = tables
	ifs, err := net.Interfaces()
	require.NoError(t, err)
	for _, i := range ifs {
		s.Links = append(s.Links, i.Name)
	}
	s.NetNS = listDir("/run/netns")
	return s
}

// TestClusterWithNode runs workloads on a real kubelet node: PodSecurity
// refuses host namespaces as on Talos, a Deployment is scheduled and runs on
// the pod network, a pod reaches the apiserver through the kubernetes
// Service (kube-proxy) and resolves names through the cluster DNS, a
// host-network pod resolves a headless Service to every ready pod and
// reaches each, logs come back through the apiserver; then Stop puts the
// host back exactly as it was.
func TestClusterWithNode(t *testing.T) {
	harness.SkipShort(t)
	require.NoError(t, Prerequisites())
	before := snapshotHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	dir := t.TempDir()
	start := time.Now()
	c, err := StartCluster(ctx, Options{Dir: dir, Logf: t.Logf})
	require.NoError(t, err)
	stopped := false
	defer func() {
		if !stopped {
			_ = c.Stop()
		}
	}()
	t.Logf("cluster with a node up in %s", time.Since(start).Round(time.Millisecond))
	running := snapshotHost(t)
	assert.Contains(t, running.Links, Bridge)
	assert.Equal(t, before.Sysctls["net/ipv4/ip_forward"], running.Sysctls["net/ipv4/ip_forward"], "IP forwarding is left as it was: no pod packet is routed off the host")

	// The workload image: a static binary, imported without a registry.
	probeBin := filepath.Join(dir, "nodeprobe")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", probeBin, "./nodeprobe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	archive := filepath.Join(dir, "nodeprobe.tar")
	_, err = oci.WriteArchive(archive, probeImage, oci.Program{Name: "probe"}, "test", map[string]string{runtime.GOARCH: probeBin}, time.Unix(0, 0))
	require.NoError(t, err)
	require.NoError(t, c.Node.ImportImages(ctx, archive))

	cs := c.Clientset()
	hostPod := func(ns, name string, args ...string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{
				HostNetwork:   true,
				DNSPolicy:     corev1.DNSClusterFirstWithHostNet,
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "probe", Image: probeImage, ImagePullPolicy: corev1.PullNever, Args: args}},
			},
		}
	}

	// PodSecurity as on Talos: a namespace without a label enforces
	// baseline, which refuses host namespaces.
	require.NoError(t, c.EnsureNamespace(ctx, "plain"))
	_, err = cs.CoreV1().Pods("plain").Create(ctx, hostPod("plain", "refused"), metav1.CreateOptions{})
	require.Error(t, err)
	assert.True(t, apierrors.IsForbidden(err), "%v", err)
	assert.Contains(t, err.Error(), `violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true)`)

	ns := "probe"
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: ns, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"},
	}}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}), "kube-controller-manager creates the default ServiceAccount")

	// A Deployment on the pod network (the controllers and the scheduler
	// place it) behind a headless Service, as the aggregators are.
	labels := map[string]string{"app": "echo"}
	_, err = cs.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "echo", Image: probeImage, ImagePullPolicy: corev1.PullNever, Args: []string{"--serve=:8080"},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1},
				}}},
			},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: ns},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	var podIPs []string
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=echo"})
		if err != nil {
			return false, nil //nolint:nilerr // keep polling
		}
		podIPs = podIPs[:0]
		for _, p := range pods.Items {
			if podReady(&p) {
				podIPs = append(podIPs, p.Status.PodIP)
			}
		}
		return len(podIPs) == 2, nil
	}), "two echo pods Ready")
	sort.Strings(podIPs)
	_, podNet, _ := net.ParseCIDR(PodCIDR)
	for _, ip := range podIPs {
		assert.True(t, podNet.Contains(net.ParseIP(ip)), "pod IP %s in %s", ip, PodCIDR)
	}

	// A pod on the pod network: the cluster DNS resolves the kubernetes
	// Service, and the in-cluster config reaches the apiserver through its
	// Service IP (kube-proxy's DNAT to the apiserver on the bridge).
	podNetPod := hostPod(ns, "in-cluster", "--lookup=kubernetes.default.svc.cluster.local", "--version")
	podNetPod.Spec.HostNetwork = false
	podNetPod.Spec.DNSPolicy = corev1.DNSClusterFirst
	got := runProbe(ctx, t, cs, podNetPod)
	assert.Equal(t, []string{"10.96.0.1"}, got.Lookup)
	assert.Equal(t, harness.KubernetesVersion+" via https://10.96.0.1:443", got.Version)

	// A host-network pod (as the agent) resolves the headless Service to
	// every ready pod through the cluster DNS and reaches each.
	got = runProbe(ctx, t, cs, hostPod(ns, "host-net", "--lookup=echo."+ns+".svc", "--dial-port=8080"))
	assert.Equal(t, podIPs, got.Lookup)
	assert.Len(t, got.Answers, 2)
	for _, ip := range podIPs {
		assert.True(t, strings.HasPrefix(got.Answers[ip], "echo-"), "answer of %s: %q", ip, got.Answers[ip])
	}

	// Stop: every process gone, the host as before.
	pids := append([]int{}, c.Node.State.ControlPlanePids...)
	for _, p := range c.Node.State.Procs {
		pids = append(pids, p.Pid)
	}
	require.NoError(t, c.Stop())
	stopped = true
	for _, pid := range pids {
		assert.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "pid %d still runs", pid)
	}
	assert.Empty(t, shimPids(c.Node.State.ContainerdSocket), "containerd shims left")
	assert.Empty(t, mountsUnder(dir), "mounts left under the node's directory")
	after := snapshotHost(t)
	assert.Equal(t, before, after, "the host after Stop is the host before StartCluster")
	require.NoError(t, c.Stop(), "Stop is idempotent")
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

type probeResult struct {
	Lookup   []string          `json:"lookup"`
	Version  string            `json:"version"`
	Answers  map[string]string `json:"answers"`
	Errors   []string          `json:"errors"`
	Hostname string            `json:"hostname"`
}

// runProbe runs a probe pod to completion and decodes its output, read
// through the apiserver (kubectl logs' path: apiserver -> kubelet).
func runProbe(ctx context.Context, t *testing.T, cs kubernetes.Interface, pod *corev1.Pod) probeResult {
	t.Helper()
	_, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	var phase corev1.PodPhase
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // keep polling
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, nil
	}), "pod %s completes", pod.Name)
	logs, err := cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	require.NoError(t, err)
	t.Logf("%s: %s", pod.Name, logs)
	var r probeResult
	require.NoError(t, json.Unmarshal(logs, &r), "%s", logs)
	require.Equal(t, corev1.PodSucceeded, phase, "errors: %v", r.Errors)
	return r
}
