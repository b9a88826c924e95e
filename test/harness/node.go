package harness

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cozystack/cozy-health/hack/image/oci"
)

// The node's network. Pods get addresses on a Linux bridge the node creates
// (it never exists before and is deleted at the end); the host owns the
// bridge's first address, where kube-apiserver and the cluster DNS listen for
// pods. Pods get no default route, only the pod and service ranges, and IP
// forwarding stays as it was (off): no pod packet can leave the machine.
const (
	NodeBridge    = "cozy-health0"
	NodePodCIDR   = "10.244.0.0/24"
	NodeAddress   = "10.244.0.1"
	ServiceCIDR   = "10.96.0.0/24"
	ClusterDomain = "cluster.local"
	// PauseImage is the CRI sandbox image, built from test/nodebin/pause and
	// imported at start.
	PauseImage = "localhost/cozy-health/pause:harness"
)

// ClusterOptions configure StartCluster.
type ClusterOptions struct {
	// Dir holds everything: the control plane's data, certificates, logs and
	// admin kubeconfig (Dir/kubeconfig), and the node (Dir/node). Required.
	Dir string
	// Detach lets every process outlive the caller (the lab's `up`); the
	// cluster is then stopped with StopClusterDir.
	Detach bool
	// NodeName is the kubelet's node name; default "node-1".
	NodeName string
	// Logf reports progress; default silent.
	Logf func(format string, args ...any)
}

// Cluster is a control plane with one real node: containerd and runc from
// the host's packages; kubelet, kube-proxy (nftables), kube-controller-manager
// and kube-scheduler v1.37.2 and CoreDNS built from the Go module proxy by
// hack/nodebin.sh. PodSecurity admission enforces "baseline" by default as on
// Talos.
type Cluster struct {
	*ControlPlane
	Node *Node
}

// Node is the running node.
type Node struct {
	State *NodeState
	cp    *ControlPlane
}

// NodeState is what the node started and what it changed on the host, saved
// as Dir/node/node.json so that another process can stop it.
type NodeState struct {
	Dir              string      `json:"dir"`
	Name             string      `json:"name"`
	Detached         bool        `json:"detached"`
	Bridge           string      `json:"bridge"`
	BridgeCreated    bool        `json:"bridgeCreated"`
	Address          string      `json:"address"`
	PodCIDR          string      `json:"podCIDR"`
	ContainerdSocket string      `json:"containerdSocket"`
	KubeletPort      int         `json:"kubeletPort"`
	Procs            []NodeProc  `json:"procs"`
	Host             *HostRecord `json:"host"`
	ControlPlanePids []int       `json:"controlPlanePids,omitempty"`
}

// NodeProc is one process the node started.
type NodeProc struct {
	Name string `json:"name"`
	Pid  int    `json:"pid"`
	Log  string `json:"log"`
}

func nodeStatePath(dir string) string { return filepath.Join(dir, "node", "node.json") }

// LoadNodeState reads the state of the cluster whose directory is dir.
func LoadNodeState(dir string) (*NodeState, error) {
	b, err := os.ReadFile(nodeStatePath(dir))
	if err != nil {
		return nil, fmt.Errorf("read node state: %w", err)
	}
	s := &NodeState{}
	if err := json.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("decode %s: %w", nodeStatePath(dir), err)
	}
	return s, nil
}

func (s *NodeState) save() error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := nodeStatePath(s.Dir) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write node state: %w", err)
	}
	return os.Rename(tmp, nodeStatePath(s.Dir))
}

func (s *NodeState) anyAlive() bool {
	for _, p := range s.Procs {
		if pidAlive(p.Pid) {
			return true
		}
	}
	for _, pid := range s.ControlPlanePids {
		if pidAlive(pid) {
			return true
		}
	}
	return false
}

// Pid returns the pid of the named process (kubelet, containerd,
// kube-proxy, coredns, kube-controller-manager, kube-scheduler), 0 if none.
func (s *NodeState) Pid(name string) int {
	for _, p := range s.Procs {
		if p.Name == name {
			return p.Pid
		}
	}
	return 0
}

// NodeBinDir returns the directory holding kubelet, kube-proxy,
// kube-controller-manager, kube-scheduler, coredns and pause:
// $COZY_HEALTH_NODEBIN when set, otherwise what hack/nodebin.sh prints (it
// builds them the first time, about 8 minutes on 2 cores after testbin).
func NodeBinDir() (string, error) {
	return toolDir("COZY_HEALTH_NODEBIN", "nodebin.sh")
}

// NodePrerequisites reports what this host lacks to run a node: root, the
// Debian packages containerd, runc and containernetworking-plugins, nft and
// ip. .ci/run installs the packages.
func NodePrerequisites() error {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "nft", "ip"} {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniBinDir, p)); err != nil {
			missing = append(missing, filepath.Join(cniBinDir, p))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("a real node needs %s (apt-get install containerd runc containernetworking-plugins nftables iproute2, as root)", strings.Join(missing, ", "))
	}
	return nil
}

const cniBinDir = "/usr/lib/cni"

// StartWithNode starts a cluster with a real node for a test and stops it,
// restoring the host, at the test's end.
func StartWithNode(t testing.TB) *Cluster {
	t.Helper()
	SkipShort(t)
	if err := NodePrerequisites(); err != nil {
		t.Fatalf("start node: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c, err := StartCluster(ctx, ClusterOptions{Dir: t.TempDir(), Logf: t.Logf})
	if err != nil {
		t.Fatalf("start cluster with a node: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
	})
	return c
}

// StartCluster starts a control plane and one real node in o.Dir and returns
// when the node is Ready, kube-proxy has synced, the cluster DNS answers and
// the controllers run. Only one such node runs on a host at a time (the
// kubelet's paths and cgroups are host-wide): a second waits for the first.
func StartCluster(ctx context.Context, o ClusterOptions) (c *Cluster, err error) {
	if o.Dir == "" {
		return nil, errors.New("start cluster: ClusterOptions.Dir is required")
	}
	if o.NodeName == "" {
		o.NodeName = "node-1"
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if err := NodePrerequisites(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	nodeBin, err := NodeBinDir()
	if err != nil {
		return nil, err
	}
	nodeDir := filepath.Join(dir, "node")
	if err := os.MkdirAll(nodeDir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", nodeDir, err)
	}
	if err := acquireHost(ctx, dir, o.Logf); err != nil {
		return nil, err
	}
	host, err := recordHost()
	if err != nil {
		releaseHost(dir)
		return nil, err
	}
	st := &NodeState{
		Dir: dir, Name: o.NodeName, Detached: o.Detach, Bridge: NodeBridge, Address: NodeAddress,
		PodCIDR: NodePodCIDR, Host: host,
		ContainerdSocket: filepath.Join(nodeDir, "containerd", "containerd.sock"),
	}
	if len(st.ContainerdSocket) > 100 {
		releaseHost(dir)
		return nil, fmt.Errorf("start cluster: %s is too long for a unix socket path; use a shorter Dir", st.ContainerdSocket)
	}
	if err := st.save(); err != nil {
		releaseHost(dir)
		return nil, err
	}
	n := &Node{State: st}
	defer func() {
		if err != nil {
			if c != nil && c.ControlPlane != nil {
				_ = c.ControlPlane.Stop()
			}
			err = errors.Join(err, st.teardown())
		}
	}()
	c = &Cluster{Node: n}
	start := time.Now()
	if err := st.createBridge(); err != nil {
		return c, err
	}
	cp, err := StartControlPlane(ctx, Options{Dir: dir, Detach: o.Detach, Address: NodeAddress, TalosPodSecurity: true, kubelet: true})
	if err != nil {
		return c, err
	}
	c.ControlPlane, n.cp = cp, cp
	etcdPid, apiPid := cp.Pids()
	st.ControlPlanePids = []int{apiPid, etcdPid}
	if err := st.save(); err != nil {
		return c, err
	}
	o.Logf("control plane ready on %s in %s", cp.APIServerURL, time.Since(start).Round(time.Millisecond))
	if err := n.start(ctx, nodeBin, o.Logf); err != nil {
		return c, err
	}
	o.Logf("node %s ready in %s (containerd, kubelet, kube-proxy, coredns, kube-controller-manager, kube-scheduler)", o.NodeName, time.Since(start).Round(time.Millisecond))
	return c, nil
}

// Stop stops the node and the control plane and puts the host back as it
// was: sysctls, fixed paths, cgroups, mounts, network namespaces, nftables
// tables and the bridge. Safe to call more than once.
func (c *Cluster) Stop() error {
	var errs []error
	if err := c.Node.State.stopProcs(); err != nil {
		errs = append(errs, err)
	}
	if c.ControlPlane != nil {
		if err := c.ControlPlane.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.Node.State.teardown(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// StopClusterDir stops a (detached) cluster from its directory, as Stop.
func StopClusterDir(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	st, err := LoadNodeState(dir)
	if err != nil {
		return err
	}
	return st.teardown()
}

// Addresses of the node's services, for tests.
func (n *Node) Name() string { return n.State.Name }

func (s *NodeState) createBridge() error {
	if _, err := net.InterfaceByName(s.Bridge); err == nil {
		return fmt.Errorf("create bridge: %s already exists on this host (a node that was not stopped? `ip link del %s` if it is not in use)", s.Bridge, s.Bridge)
	}
	if err := routeFree(s.PodCIDR); err != nil {
		return err
	}
	if err := run("ip", "link", "add", s.Bridge, "type", "bridge"); err != nil {
		return err
	}
	s.BridgeCreated = true
	if err := s.save(); err != nil {
		return err
	}
	// No IPv6 on the bridge: nothing but the pods' IPv4 runs on it.
	_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+s.Bridge+"/disable_ipv6", []byte("1"), 0o644)
	ones, _ := mustCIDR(s.PodCIDR).Mask.Size()
	if err := run("ip", "addr", "add", s.Address+"/"+strconv.Itoa(ones), "dev", s.Bridge); err != nil {
		return err
	}
	return run("ip", "link", "set", s.Bridge, "up")
}

// routeFree fails when the host already routes cidr somewhere: the node's
// pod range must be private to the bridge it creates.
func routeFree(cidr string) error {
	out, err := exec.Command("ip", "-4", "route", "show", "root", cidr).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip route show: %w: %s", err, out)
	}
	if strings.TrimSpace(string(out)) != "" {
		return fmt.Errorf("the host already routes %s (%s); the node's pod range must be unused", cidr, strings.TrimSpace(string(out)))
	}
	return nil
}

func mustCIDR(s string) *net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return n
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// stopProcs stops the node's processes in reverse start order, then every
// container process left in the kubepods cgroups, then containerd's shims.
func (s *NodeState) stopProcs() error {
	var errs []error
	for i := len(s.Procs) - 1; i >= 0; i-- {
		p := s.Procs[i]
		if p.Name == "containerd" {
			// Containers first: the kubelet is gone, nothing restarts them.
			killCgroupProcs(s.Host, 5*time.Second)
		}
		if err := stopPid(p.Pid, 15*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", p.Name, err))
		}
	}
	killCgroupProcs(s.Host, 5*time.Second)
	for _, pid := range shimPids(s.ContainerdSocket) {
		if err := stopPid(pid, 5*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("stop containerd shim %d: %w", pid, err))
		}
	}
	return errors.Join(errs...)
}

// teardown stops everything recorded in the state (the control plane's
// processes too), restores the host and gives it up. Idempotent.
func (s *NodeState) teardown() error {
	err := s.teardownLocked()
	releaseHost(s.Dir)
	return err
}

// teardownLocked is teardown without giving the host up (the caller holds
// the host lock).
func (s *NodeState) teardownLocked() error {
	var errs []error
	if err := s.stopProcs(); err != nil {
		errs = append(errs, err)
	}
	for _, pid := range s.ControlPlanePids {
		if err := stopPid(pid, 15*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if s.Host != nil {
		if err := s.Host.restore(s.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	if s.BridgeCreated {
		if _, err := net.InterfaceByName(s.Bridge); err == nil {
			if err := run("ip", "link", "del", s.Bridge); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// killCgroupProcs terminates every process in the kubepods cgroups the node
// created (the pods' containers and sandboxes), SIGTERM then SIGKILL.
func killCgroupProcs(h *HostRecord, grace time.Duration) {
	if h == nil {
		return
	}
	pids := func() []int {
		var out []int
		for _, cg := range h.CreatedCgroups {
			_ = filepath.WalkDir(cg, func(p string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
					return nil
				}
				b, _ := os.ReadFile(p)
				for _, f := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
						out = append(out, pid)
					}
				}
				return nil
			})
		}
		return out
	}
	ps := pids()
	if len(ps) == 0 {
		return
	}
	for _, pid := range ps {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) && len(pids()) > 0 {
		time.Sleep(100 * time.Millisecond)
	}
	for _, pid := range pids() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for i := 0; i < 50 && len(pids()) > 0; i++ {
		time.Sleep(100 * time.Millisecond)
	}
}

// shimPids finds the containerd-shim-runc-v2 processes serving the node's
// containerd (their -address is its socket).
func shimPids(socket string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) == 0 || filepath.Base(args[0]) != "containerd-shim-runc-v2" {
			continue
		}
		for i, a := range args {
			if a == "-address" && i+1 < len(args) && args[i+1] == socket {
				out = append(out, pid)
			}
		}
	}
	return out
}

func pidAlive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	st := ProcState(pid)
	return st != 0 && st != 'Z'
}

// ProcState is the state letter of pid in /proc/<pid>/stat (R, S, D, T for
// stopped, Z for a zombie...), 0 when it cannot be read.
func ProcState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The state follows the parenthesised command name.
	if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) {
		return b[i+2]
	}
	return 0
}

// WaitStopped waits until pid is stopped (SIGSTOP is delivered
// asynchronously: a process signalled a moment ago may still answer).
func WaitStopped(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		st := ProcState(pid)
		if st == 'T' || st == 't' {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d not stopped after %s (state %q)", pid, timeout, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stopPid sends SIGTERM, waits up to grace, then SIGKILL. A pid not running
// is not an error.
func stopPid(pid int, grace time.Duration) error {
	if !pidAlive(pid) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %d: %w", pid, err)
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !pidAlive(pid) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for i := 0; i < 100 && pidAlive(pid); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	if pidAlive(pid) {
		return fmt.Errorf("pid %d survived SIGKILL", pid)
	}
	return nil
}

func (n *Node) spawn(name, bin string, args []string) error {
	p, err := spawnProcess(filepath.Join(n.State.Dir, "node", name+".log"), name, bin, args, n.State.Detached)
	if err != nil {
		return err
	}
	n.State.Procs = append(n.State.Procs, NodeProc{Name: name, Pid: p.cmd.Process.Pid, Log: p.log})
	return n.State.save()
}

func (n *Node) procDone(name string) error {
	pid := n.State.Pid(name)
	if pidAlive(pid) {
		return nil
	}
	b, _ := os.ReadFile(filepath.Join(n.State.Dir, "node", name+".log"))
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return fmt.Errorf("%s exited; log tail:\n%s", name, b)
}

// waitProc polls probe until it succeeds, the named process exits, or ctx
// (bounded by timeout) ends.
func (n *Node) waitProc(ctx context.Context, name string, timeout time.Duration, probe func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if last = probe(ctx); last == nil {
			return nil
		}
		if err := n.procDone(name); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			b, _ := os.ReadFile(filepath.Join(n.State.Dir, "node", name+".log"))
			if len(b) > 3000 {
				b = b[len(b)-3000:]
			}
			return fmt.Errorf("%s not ready: %w (last: %v); log tail:\n%s", name, ctx.Err(), last, b)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (n *Node) ctr(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", n.State.ContainerdSocket, "--namespace", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

func (n *Node) start(ctx context.Context, bin string, logf func(string, ...any)) error {
	st := n.State
	dir := filepath.Join(st.Dir, "node")
	pki := filepath.Join(st.Dir, "pki")
	for _, d := range []string{"containerd", "cni/net.d", "cni/ipam", "kubelet", "pod-logs", "volume-plugins", "containerd/certs.d/_default"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}

	// containerd, its state in dir. restrict_oom_score_adj: these machines
	// lack CAP_SYS_RESOURCE, runc cannot lower a container's oom_score_adj.
	cd := filepath.Join(dir, "containerd")
	containerdConfig := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = %[5]q
    restrict_oom_score_adj = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = %[6]q
      conf_dir = %[7]q
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = %[8]q
  [plugins."io.containerd.internal.v1.opt"]
    path = %[9]q
`, filepath.Join(cd, "root"), filepath.Join(cd, "state"), st.ContainerdSocket, st.ContainerdSocket+".ttrpc",
		PauseImage, cniBinDir, filepath.Join(dir, "cni", "net.d"), filepath.Join(cd, "certs.d"), filepath.Join(cd, "opt"))
	// Every image comes from an import; a pull that is attempted anyway goes
	// to a closed loopback port, never to a registry.
	if err := os.WriteFile(filepath.Join(cd, "certs.d", "_default", "hosts.toml"), []byte("server = \"http://127.0.0.1:9\"\n"), 0o600); err != nil {
		return err
	}
	cfgPath := filepath.Join(cd, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(containerdConfig), 0o600); err != nil {
		return err
	}
	containerd, err := exec.LookPath("containerd")
	if err != nil {
		return err
	}
	if err := n.spawn("containerd", containerd, []string{"--config", cfgPath}); err != nil {
		return err
	}
	if err := n.waitProc(ctx, "containerd", 30*time.Second, func(ctx context.Context) error {
		_, err := n.ctr(ctx, "version")
		return err
	}); err != nil {
		return err
	}

	// The sandbox image.
	pauseTar := filepath.Join(dir, "pause.tar")
	if _, err := oci.WriteArchive(pauseTar, PauseImage, oci.Program{Name: "pause"}, "harness",
		map[string]string{runtime.GOARCH: filepath.Join(bin, "pause")}, time.Unix(0, 0)); err != nil {
		return err
	}
	if err := n.ImportImages(ctx, pauseTar); err != nil {
		return err
	}

	// CNI: pods on the bridge, routes only to the pod and service ranges.
	conflist := fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "cozy-health",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": false,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q, "rangeStart": "10.244.0.10", "gateway": %q}]],
        "routes": [{"dst": %q, "gw": %q}],
        "dataDir": %q
      }
    }
  ]
}
`, st.Bridge, st.PodCIDR, st.Address, ServiceCIDR, st.Address, filepath.Join(dir, "cni", "ipam"))
	if err := os.WriteFile(filepath.Join(dir, "cni", "net.d", "10-cozy-health.conflist"), []byte(conflist), 0o600); err != nil {
		return err
	}

	// Identities: the kubelet as system:node:<name>, kube-proxy as
	// system:kube-proxy (bound to system:node-proxier by default); the
	// controllers and CoreDNS use the admin kubeconfig.
	kubeletKC, err := n.clientKubeconfig(pki, "kubelet", "system:node:"+st.Name, "system:nodes")
	if err != nil {
		return err
	}
	proxyKC, err := n.clientKubeconfig(pki, "kube-proxy", "system:kube-proxy")
	if err != nil {
		return err
	}

	ports, err := freePorts(7)
	if err != nil {
		return err
	}
	kubeletPort, kubeletHealthz, proxyHealthz, proxyMetrics, dnsReady, kcmPort, schedPort := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5], ports[6]
	st.KubeletPort = kubeletPort

	kubeletConfig := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: %[2]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[3]d
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %[4]q}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%[5]s
podLogsDir: %[6]q
volumePluginDir: %[7]q
clusterDNS: [%[1]s]
clusterDomain: %[8]s
resolvConf: ""
makeIPTablesUtilChains: false
rotateCertificates: false
serverTLSBootstrap: false
registerNode: true
evictionHard: {memory.available: 100Mi, nodefs.available: "1%%", imagefs.available: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
nodeStatusUpdateFrequency: 2s
syncFrequency: 5s
`, st.Address, kubeletPort, kubeletHealthz, filepath.Join(pki, "client-ca.crt"), st.ContainerdSocket,
		filepath.Join(dir, "pod-logs"), filepath.Join(dir, "volume-plugins"), ClusterDomain)
	kubeletCfgPath := filepath.Join(dir, "kubelet.yaml")
	if err := os.WriteFile(kubeletCfgPath, []byte(kubeletConfig), 0o600); err != nil {
		return err
	}
	if err := n.spawn("kubelet", filepath.Join(bin, "kubelet"), []string{
		"--config=" + kubeletCfgPath,
		"--kubeconfig=" + kubeletKC,
		"--root-dir=" + filepath.Join(dir, "kubelet"),
		"--cert-dir=" + filepath.Join(dir, "kubelet", "pki"),
		"--hostname-override=" + st.Name,
		"--node-ip=" + st.Address,
		"--oom-score-adj=0",
		"--v=1",
	}); err != nil {
		return err
	}
	cs := n.cp.Clientset()
	if err := n.waitProc(ctx, "kubelet", 2*time.Minute, func(ctx context.Context) error {
		node, err := cs.CoreV1().Nodes().Get(ctx, st.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("node %s not Ready", st.Name)
	}); err != nil {
		return err
	}
	logf("kubelet: node %s Ready", st.Name)

	proxyConfig := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
hostnameOverride: %[1]s
bindAddress: %[2]s
healthzBindAddress: 127.0.0.1:%[3]d
metricsBindAddress: 127.0.0.1:%[4]d
clientConnection: {kubeconfig: %[5]q}
clusterCIDR: %[6]s
nodePortAddresses: [%[2]s/32]
oomScoreAdj: 0
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
`, st.Name, st.Address, proxyHealthz, proxyMetrics, proxyKC, st.PodCIDR)
	proxyCfgPath := filepath.Join(dir, "kube-proxy.yaml")
	if err := os.WriteFile(proxyCfgPath, []byte(proxyConfig), 0o600); err != nil {
		return err
	}
	if err := n.spawn("kube-proxy", filepath.Join(bin, "kube-proxy"), []string{"--config=" + proxyCfgPath, "--v=1"}); err != nil {
		return err
	}

	// The cluster's zone from the API; every other name is NXDOMAIN, as an
	// upstream resolver would answer for a name that does not exist, and no
	// query ever leaves the host.
	corefile := fmt.Sprintf(`%[1]s:53 in-addr.arpa:53 {
    bind %[2]s
    errors
    kubernetes %[1]s in-addr.arpa {
        kubeconfig %[3]s
        pods insecure
        ttl 5
    }
    ready 127.0.0.1:%[4]d
}
.:53 {
    bind %[2]s
    errors
    template ANY ANY {
        rcode NXDOMAIN
    }
}
`, ClusterDomain, st.Address, n.cp.Kubeconfig, dnsReady)
	corePath := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(corePath, []byte(corefile), 0o600); err != nil {
		return err
	}
	if err := n.spawn("coredns", filepath.Join(bin, "coredns"), []string{"-conf", corePath}); err != nil {
		return err
	}

	servingCA := filepath.Join(st.Dir, "apiserver-certs", "apiserver.crt")
	if err := n.spawn("kube-controller-manager", filepath.Join(bin, "kube-controller-manager"), []string{
		"--kubeconfig=" + n.cp.Kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(kcmPort),
		"--leader-elect=false",
		"--root-ca-file=" + servingCA,
		"--service-account-private-key-file=" + filepath.Join(pki, "sa.key"),
		"--use-service-account-credentials=false",
		"--cluster-name=cozy-health-harness",
		"--controllers=*",
		"--v=1",
	}); err != nil {
		return err
	}
	if err := n.spawn("kube-scheduler", filepath.Join(bin, "kube-scheduler"), []string{
		"--kubeconfig=" + n.cp.Kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(schedPort),
		"--leader-elect=false",
		"--v=1",
	}); err != nil {
		return err
	}

	insecure := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // readiness of processes this harness just started on loopback
	probeURL := func(url string) func(context.Context) error {
		return func(ctx context.Context) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return err
			}
			resp, err := insecure.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("GET %s: %s", url, resp.Status)
			}
			return nil
		}
	}
	if err := n.waitProc(ctx, "kube-proxy", time.Minute, probeURL(fmt.Sprintf("http://127.0.0.1:%d/healthz", proxyHealthz))); err != nil {
		return err
	}
	if err := n.waitProc(ctx, "coredns", time.Minute, probeURL(fmt.Sprintf("http://127.0.0.1:%d/ready", dnsReady))); err != nil {
		return err
	}
	if err := n.waitProc(ctx, "kube-controller-manager", time.Minute, probeURL(fmt.Sprintf("https://127.0.0.1:%d/healthz", kcmPort))); err != nil {
		return err
	}
	if err := n.waitProc(ctx, "kube-scheduler", time.Minute, probeURL(fmt.Sprintf("https://127.0.0.1:%d/healthz", schedPort))); err != nil {
		return err
	}
	// The ServiceAccount controller runs: namespaces get their default
	// ServiceAccount, which every pod without one needs.
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

// clientKubeconfig writes a kubeconfig for user with groups (an x509 client
// certificate from the client CA) and returns its path.
func (n *Node) clientKubeconfig(pki, name, user string, groups ...string) (string, error) {
	certPEM, keyPEM, err := issueClient(n.cp.ca, user, groups)
	if err != nil {
		return "", err
	}
	path := filepath.Join(pki, name+".kubeconfig")
	err = writeKubeconfig(path, n.cp.APIServerURL, n.cp.Config.CAData, user, map[string]string{
		"client-certificate-data": b64(certPEM),
		"client-key-data":         b64(keyPEM),
	})
	return path, err
}

// freePorts picks n distinct free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var out []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a free port: %w", err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// ImportImages imports OCI image archives into the node's containerd (the
// k8s.io namespace the CRI uses), as `ctr images import` does on a real node.
func (n *Node) ImportImages(ctx context.Context, archives ...string) error {
	for _, a := range archives {
		if _, err := n.ctr(ctx, "images", "import", "--platform", "linux/"+runtime.GOARCH, a); err != nil {
			return fmt.Errorf("import image %s: %w", a, err)
		}
	}
	return nil
}

// TrustRegistry lets the node's containerd pull from the plain-HTTP
// registry at host (host:port on loopback), as a registry mirror entry in
// its certs.d (config_path) does on a real node; containerd reads it at
// every pull.
func (n *Node) TrustRegistry(host string) error {
	dir := filepath.Join(filepath.Dir(n.State.ContainerdSocket), "certs.d", host)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("trust registry %s: %w", host, err)
	}
	cfg := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+host, "http://"+host)
	if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(cfg), 0o600); err != nil {
		return fmt.Errorf("trust registry %s: %w", host, err)
	}
	return nil
}
