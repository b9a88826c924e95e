package realnode

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cozystack/cozy-health/test/harness"
)

// starter brings the node's processes up once the bridge and the control
// plane are there; each step is one method, listed in order in Node.start.
type starter struct {
	n    *Node
	st   *State
	bin  string // the NodeBin tool directory
	dir  string // the node's directory, Dir/node
	pki  string // the control plane's certificates, Dir/pki
	logf func(string, ...any)

	kubeletKubeconfig, proxyKubeconfig string
	ports                              ports
}

// ports are the loopback ports the node's processes listen on, picked
// together so that they are distinct.
type ports struct {
	kubelet, kubeletHealthz, proxyHealthz, proxyMetrics, dnsReady, controllerManager, scheduler int
}

// start starts containerd, the kubelet, kube-proxy, CoreDNS,
// kube-controller-manager and kube-scheduler from the NodeBin directory bin
// and returns when each answers and the controllers created the default
// ServiceAccount.
func (n *Node) start(ctx context.Context, bin string, logf func(string, ...any)) error {
	s := &starter{
		n: n, st: n.State, bin: bin, logf: logf,
		dir: filepath.Join(n.State.Dir, "node"),
		pki: filepath.Join(n.State.Dir, "pki"),
	}
	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{"directories", s.makeDirs},
		{"containerd", s.startContainerd},
		{"sandbox image", s.importSandboxImage},
		{"pod network", s.writeCNIConfig},
		{"identities", s.writeKubeconfigs},
		{"ports", s.pickPorts},
		{"kubelet", s.startKubelet},
		{"kube-proxy", s.startKubeProxy},
		{"cluster DNS", s.startCoreDNS},
		{"controllers", s.startControllers},
		{"readiness", s.waitReady},
	}
	for _, step := range steps {
		if err := step.run(ctx); err != nil {
			return fmt.Errorf("start node %s: %s: %w", n.State.Name, step.name, err)
		}
	}
	return nil
}

// makeDirs creates the node's directories: containerd's state and registry
// configuration, the CNI configuration and addresses, the kubelet's root,
// pod logs and volume plugins.
func (s *starter) makeDirs(context.Context) error {
	for _, d := range []string{"containerd", "cni/net.d", "cni/ipam", "kubelet", "pod-logs", "volume-plugins", "containerd/certs.d/_default"} {
		if err := os.MkdirAll(filepath.Join(s.dir, d), 0o700); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	return nil
}

// writeKubeconfigs writes the identities: the kubelet as
// system:node:<name>, kube-proxy as system:kube-proxy (bound to
// system:node-proxier by default); the controllers and CoreDNS use the admin
// kubeconfig.
func (s *starter) writeKubeconfigs(context.Context) error {
	s.kubeletKubeconfig = filepath.Join(s.pki, "kubelet.kubeconfig")
	if err := s.n.cp.WriteUserKubeconfig(s.kubeletKubeconfig, "system:node:"+s.st.Name, "system:nodes"); err != nil {
		return err
	}
	s.proxyKubeconfig = filepath.Join(s.pki, "kube-proxy.kubeconfig")
	return s.n.cp.WriteUserKubeconfig(s.proxyKubeconfig, "system:kube-proxy")
}

// pickPorts picks the processes' ports.
func (s *starter) pickPorts(context.Context) error {
	p, err := freePorts(7)
	if err != nil {
		return err
	}
	s.ports = ports{
		kubelet: p[0], kubeletHealthz: p[1], proxyHealthz: p[2], proxyMetrics: p[3],
		dnsReady: p[4], controllerManager: p[5], scheduler: p[6],
	}
	s.st.KubeletPort = s.ports.kubelet
	return nil
}

// startKubelet starts the kubelet and waits until its Node is Ready.
func (s *starter) startKubelet(ctx context.Context) error {
	cfgPath := filepath.Join(s.dir, "kubelet.yaml")
	if err := os.WriteFile(cfgPath, []byte(s.kubeletConfig()), 0o600); err != nil {
		return err
	}
	if err := s.n.spawn("kubelet", filepath.Join(s.bin, "kubelet"), []string{
		"--config=" + cfgPath,
		"--kubeconfig=" + s.kubeletKubeconfig,
		"--root-dir=" + filepath.Join(s.dir, "kubelet"),
		"--cert-dir=" + filepath.Join(s.dir, "kubelet", "pki"),
		"--hostname-override=" + s.st.Name,
		"--node-ip=" + s.st.Address,
		"--oom-score-adj=0",
		"--v=1",
	}); err != nil {
		return err
	}
	cs := s.n.cp.Clientset()
	if err := s.n.waitProc(ctx, "kubelet", 2*time.Minute, func(ctx context.Context) error {
		node, err := cs.CoreV1().Nodes().Get(ctx, s.st.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("node %s not Ready", s.st.Name)
	}); err != nil {
		return err
	}
	s.logf("kubelet: node %s Ready", s.st.Name)
	return nil
}

// startKubeProxy starts kube-proxy (nftables mode); waitReady waits for it.
func (s *starter) startKubeProxy(context.Context) error {
	cfgPath := filepath.Join(s.dir, "kube-proxy.yaml")
	if err := os.WriteFile(cfgPath, []byte(s.kubeProxyConfig()), 0o600); err != nil {
		return err
	}
	return s.n.spawn("kube-proxy", filepath.Join(s.bin, "kube-proxy"), []string{"--config=" + cfgPath, "--v=1"})
}

// startCoreDNS starts the cluster DNS on the bridge's address; waitReady
// waits for it.
func (s *starter) startCoreDNS(context.Context) error {
	corePath := filepath.Join(s.dir, "Corefile")
	if err := os.WriteFile(corePath, []byte(s.corefile()), 0o600); err != nil {
		return err
	}
	return s.n.spawn("coredns", filepath.Join(s.bin, "coredns"), []string{"-conf", corePath})
}

// startControllers starts kube-controller-manager (every controller, the
// ServiceAccount token signer's key the apiserver verifies) and
// kube-scheduler as the admin; waitReady waits for them.
func (s *starter) startControllers(context.Context) error {
	servingCA := filepath.Join(s.st.Dir, "apiserver-certs", "apiserver.crt")
	if err := s.n.spawn("kube-controller-manager", filepath.Join(s.bin, "kube-controller-manager"), []string{
		"--kubeconfig=" + s.n.cp.Kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(s.ports.controllerManager),
		"--leader-elect=false",
		"--root-ca-file=" + servingCA,
		"--service-account-private-key-file=" + filepath.Join(s.pki, "sa.key"),
		"--use-service-account-credentials=false",
		"--cluster-name=cozy-health-harness",
		"--controllers=*",
		"--v=1",
	}); err != nil {
		return err
	}
	return s.n.spawn("kube-scheduler", filepath.Join(s.bin, "kube-scheduler"), []string{
		"--kubeconfig=" + s.n.cp.Kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(s.ports.scheduler),
		"--leader-elect=false",
		"--v=1",
	})
}

// waitReady waits until kube-proxy, CoreDNS and the controllers answer
// their health endpoints and the ServiceAccount controller runs: namespaces
// get their default ServiceAccount, which every pod without one needs.
func (s *starter) waitReady(ctx context.Context) error {
	for _, p := range []struct {
		name, url string
	}{
		{"kube-proxy", fmt.Sprintf("http://127.0.0.1:%d/healthz", s.ports.proxyHealthz)},
		{"coredns", fmt.Sprintf("http://127.0.0.1:%d/ready", s.ports.dnsReady)},
		{"kube-controller-manager", fmt.Sprintf("https://127.0.0.1:%d/healthz", s.ports.controllerManager)},
		{"kube-scheduler", fmt.Sprintf("https://127.0.0.1:%d/healthz", s.ports.scheduler)},
	} {
		if err := s.n.waitProc(ctx, p.name, time.Minute, probeURL(p.url)); err != nil {
			return err
		}
	}
	cs := s.n.cp.Clientset()
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

// insecure probes the health endpoints of processes this harness just
// started on loopback, whose serving certificates are self-signed.
var insecure = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // readiness of processes this harness just started on loopback

// probeURL is a probe for waitProc: GET url must answer 200.
func probeURL(url string) func(context.Context) error {
	return func(ctx context.Context) error { return harness.GetOK(ctx, insecure, url) }
}

// spawn starts one of the node's processes, its log in the node's
// directory, and records it in node.json.
func (n *Node) spawn(name, bin string, args []string) error {
	log := filepath.Join(n.State.Dir, "node", name+".log")
	pid, err := harness.Spawn(log, name, bin, args, n.State.Detached)
	if err != nil {
		return err
	}
	n.State.Procs = append(n.State.Procs, Proc{Name: name, Pid: pid, Log: log})
	return n.State.save()
}

// logTail is the end of the named process's log.
func (n *Node) logTail(name string) []byte {
	b, _ := os.ReadFile(filepath.Join(n.State.Dir, "node", name+".log"))
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return b
}

func (n *Node) procDone(name string) error {
	if pidAlive(n.State.Pid(name)) {
		return nil
	}
	return fmt.Errorf("%s exited; log tail:\n%s", name, n.logTail(name))
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
			return fmt.Errorf("%s not ready: %w (last: %v); log tail:\n%s", name, ctx.Err(), last, n.logTail(name))
		case <-time.After(200 * time.Millisecond):
		}
	}
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
