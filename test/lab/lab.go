// Package lab runs a whole cozy-health cluster on one machine, all on
// loopback and all real: the control plane from test/harness with the CRD,
// Nodes and agent Pods; a real N-member management etcd (one member per
// simulated node); per node a Talos MachineService shim answering from that
// node's real etcd member, and Cilium (agent and cilium-health sockets),
// kube-ovn (ovs-ovn's OVSDB and unixctl sockets, ovn-central's NB/SB raft
// members' control sockets) and LINSTOR servers in their real wire shapes
// with settable state; one real agent process per
// node; three real aggregator replicas with leader election. Faults act on it
// while it runs. `make demo` and the e2e tests are built on it.
package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cozystack/cozy-health/pkg/client/clientset/versioned"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/test/harness"
	"github.com/cozystack/cozy-health/test/harness/realnode"
)

// Namespaces and names the lab uses, the same as a real install.
const (
	PlatformNamespace   = "cozy-system"
	AgentNamespace      = "cozy-health"
	AgentServiceAccount = "cozy-health-agent"
	TokenAudience       = "health.cozystack.io"
	LeaseName           = "cozy-health-aggregator"
	Aggregators         = 3
)

// AggregatorServiceAccount is the aggregators' ServiceAccount (the chart's):
// their peer sync authenticates with its token.
const AggregatorServiceAccount = "cozy-health-aggregator"

// Options configure Up.
type Options struct {
	// Dir holds everything the lab writes; nothing is written outside it.
	Dir string
	// Nodes is the number of simulated nodes (>= 1).
	Nodes int
	// Voters is the number of voting etcd members (default 3, at most
	// Nodes); the other members join as learners unless LearnersAsVoters.
	Voters           int
	LearnersAsVoters bool
	// Detach makes every process outlive the caller (cozy-health-lab up);
	// otherwise they die with it (tests) and the source servers run in-process.
	Detach bool
	// BinDir holds cozy-health-agent, cozy-health-aggregator and
	// cozy-health-lab (default $COZY_HEALTH_BIN, then ./bin of the repo).
	BinDir string
	// Interval is the agents' report interval (default 2s in the lab so the
	// demo moves quickly; production default is 5s).
	Interval time.Duration
	// LeaseDuration of the aggregators' Lease (default 6s).
	LeaseDuration time.Duration
	// EtcdQuotaBytes is the observed etcd's --quota-backend-bytes (default
	// DefaultEtcdQuotaBytes): small, so that etcd-db-near-quota fills it with
	// real writes in seconds. The agents read it from etcd's own metrics;
	// the chart's 2 GiB is only their fallback.
	EtcdQuotaBytes int64
	// MaintenanceWindow, when set, is the aggregators'
	// --maintenance-window (the chart leaves it at the aggregator's 15m):
	// the soak's rolling maintenance scales it with the alerts' `for`.
	MaintenanceWindow time.Duration
	// Log receives progress lines.
	Log func(format string, args ...any)
}

// DefaultEtcdQuotaBytes is the lab etcd's quota (32 MiB).
const DefaultEtcdQuotaBytes = 32 << 20

// Node is one simulated node as lab.json records it.
type Node struct {
	Name         string `json:"name"`
	AgentPid     int    `json:"agentPid"`
	EtcdPid      int    `json:"etcdPid"`
	Talos        string `json:"talos"`
	Talosconfig  string `json:"talosconfig"`
	EtcdMetrics  string `json:"etcdMetrics"`
	CiliumSocket string `json:"ciliumSocket"`
	CiliumHealth string `json:"ciliumHealthSocket"`
	// OVSRun and OVNRun are the node's /run/openvswitch and /var/run/ovn;
	// OVNDBDir its OVN_DIR (/var/lib/ovn in Cozystack).
	OVSRun   string `json:"ovsRun"`
	OVNRun   string `json:"ovnRun"`
	OVNDBDir string `json:"ovnDBDir"`
	// OVNCentral tells whether the node hosts ovn-central's NB and SB
	// members (the first three nodes, like the etcd voters).
	OVNCentral bool `json:"ovnCentral"`
	// RealOVS tells whether the node runs real Open vSwitch daemons
	// (Debian's ovsdb-server, ovs-vswitchd, ovn-controller) in OVSRun and
	// OVNRun: the first ovn-central node when ovn-central is real.
	RealOVS         bool   `json:"realOVS,omitempty"`
	LinstorURL      string `json:"linstorURL"`
	EtcdClient      string `json:"etcdClientURL"`
	EtcdRealMetrics string `json:"etcdRealMetrics"`
	Learner         bool   `json:"learner"`
	TokenFile       string `json:"tokenFile"`
	// AgentMetrics is the agent's --metrics-addr (host:port, loopback).
	AgentMetrics string `json:"agentMetrics"`
	// Uplinks are the node's way to the aggregators, one loopback address
	// per replica (in Aggregators' order): its agent dials these, the lab
	// daemon relays them to the replicas, and the partition fault cuts
	// them.
	Uplinks   []string `json:"uplinks,omitempty"`
	AgentArgs []string `json:"agentArgs"`
	AgentEnv  []string `json:"agentEnv"`
	EtcdArgs  []string `json:"etcdArgs"`
}

// Aggregator is one replica as lab.json records it.
type Aggregator struct {
	Name    string `json:"name"`
	GRPC    string `json:"grpc"`
	HTTP    string `json:"http"`
	Metrics string `json:"metrics"`
	// Guard is the drain guard's TLS listener (--guard-addr), which the
	// lab's webhook configuration calls (guard.go).
	Guard string   `json:"guard"`
	Pid   int      `json:"pid"`
	Args  []string `json:"args"`
	Env   []string `json:"env"`
}

// State is lab.json: where everything is.
type State struct {
	Dir        string `json:"dir"`
	Detached   bool   `json:"detached"`
	Kubeconfig string `json:"kubeconfig"`
	Kubectl    string `json:"kubectl"`
	// APIServerURL is the lab apiserver's https URL (the agents read their
	// own Node there).
	APIServerURL  string       `json:"apiserverURL"`
	CAFile        string       `json:"caFile"`
	ControlSocket string       `json:"controlSocket"`
	APIServerPid  int          `json:"apiserverPid"`
	EtcdPid       int          `json:"controlPlaneEtcdPid"`
	DaemonPid     int          `json:"daemonPid"`
	Aggregators   []Aggregator `json:"aggregators"`
	Nodes         []Node       `json:"nodes"`
	// RealNode names the real kubelet node of a lab started by UpNode
	// (`make lab-node`); its processes and host changes are in
	// DIR/node/node.json.
	RealNode string `json:"realNode,omitempty"`
}

// Node returns the node named name.
func (s *State) Node(name string) (*Node, error) {
	for i := range s.Nodes {
		if s.Nodes[i].Name == name {
			return &s.Nodes[i], nil
		}
	}
	return nil, fmt.Errorf("lab has no node %q", name)
}

// statePath is where lab.json lives.
func statePath(dir string) string { return filepath.Join(dir, "lab.json") }

// LoadState reads DIR/lab.json.
func LoadState(dir string) (*State, error) {
	b, err := os.ReadFile(statePath(dir))
	if err != nil {
		return nil, fmt.Errorf("read lab state (is a lab up in %s?): %w", dir, err)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("decode %s: %w", statePath(dir), err)
	}
	return &s, nil
}

// save writes lab.json atomically.
func (s *State) save() error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encode lab state: %w", err)
	}
	tmp := statePath(s.Dir) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write lab state: %w", err)
	}
	return os.Rename(tmp, statePath(s.Dir))
}

// Lab is a running lab.
type Lab struct {
	State      *State
	cp         *harness.ControlPlane
	opts       Options
	stopDaemon func()
}

func (o *Options) defaults() error {
	if o.Dir == "" {
		return errors.New("lab: --dir is required")
	}
	if o.Nodes < 1 {
		return fmt.Errorf("lab: --nodes must be at least 1, got %d", o.Nodes)
	}
	if o.Voters == 0 {
		o.Voters = 3
	}
	if o.Voters > o.Nodes {
		o.Voters = o.Nodes
	}
	if o.Interval == 0 {
		o.Interval = 2 * time.Second
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration = 6 * time.Second
	}
	if o.EtcdQuotaBytes == 0 {
		o.EtcdQuotaBytes = DefaultEtcdQuotaBytes
	}
	if o.BinDir == "" {
		o.BinDir = os.Getenv("COZY_HEALTH_BIN")
	}
	if o.BinDir == "" {
		o.BinDir = filepath.Join(harness.RepoRoot(), "bin")
	}
	for _, b := range []string{"cozy-health-agent", "cozy-health-aggregator"} {
		if _, err := os.Stat(filepath.Join(o.BinDir, b)); err != nil {
			return fmt.Errorf("lab: %s not found in %s (run make build): %w", b, o.BinDir, err)
		}
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	abs, err := filepath.Abs(o.Dir)
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	o.Dir = abs
	return nil
}

// Up starts a lab and returns when every platform Health object exists.
func Up(ctx context.Context, o Options) (l *Lab, err error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(statePath(o.Dir)); err == nil {
		return nil, fmt.Errorf("lab: %s already holds a lab; run down first", o.Dir)
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("lab: create %s: %w", o.Dir, err)
	}
	// The chart says how agents and aggregators are started: a chart that
	// does not render stops the lab before anything starts.
	chart, err := renderChart(o)
	if err != nil {
		return nil, err
	}
	l = &Lab{opts: o, State: &State{Dir: o.Dir, Detached: o.Detach}}
	started := l
	defer func() {
		if err != nil {
			_ = started.Down()
		}
	}()

	o.Log("starting kube-apiserver + etcd %s (the lab's Kubernetes)", harness.KubernetesVersion)
	cp, err := harness.StartControlPlane(ctx, harness.Options{Dir: filepath.Join(o.Dir, "k8s"), Detach: o.Detach})
	if err != nil {
		return nil, err
	}
	l.cp = cp
	s := l.State
	s.EtcdPid, s.APIServerPid = cp.Pids()
	s.Kubeconfig = filepath.Join(o.Dir, "kubeconfig")
	if err := copyFile(cp.Kubeconfig, s.Kubeconfig); err != nil {
		return nil, err
	}
	s.Kubectl = cp.Binary("kubectl")
	s.APIServerURL = cp.APIServerURL
	if err := s.save(); err != nil {
		return nil, err
	}
	if err := cp.InstallCRDs(ctx); err != nil {
		return nil, err
	}
	if err := cp.InstallAdapterCRDs(ctx, LabAdapterCRDs...); err != nil {
		return nil, err
	}
	for _, ns := range []string{PlatformNamespace, AgentNamespace} {
		if err := cp.EnsureNamespace(ctx, ns); err != nil {
			return nil, err
		}
	}
	if err := cp.CreateServiceAccount(ctx, AgentNamespace, AgentServiceAccount); err != nil {
		return nil, err
	}

	// The aggregators keep their own CA and serving certificate (the chart's
	// default TLS mode) and publish the CA in a ConfigMap; the agents'
	// ConfigMap volume is this directory.
	s.CAFile = filepath.Join(o.Dir, "ca", "ca.crt")

	names := make([]string, o.Nodes)
	for i := range names {
		names[i] = "node-" + strconv.Itoa(i+1)
	}
	o.Log("starting the management etcd under observation: %d members (%d voting), quota %d bytes", o.Nodes, o.Voters, o.EtcdQuotaBytes)
	cluster, err := harness.StartEtcdCluster(ctx, harness.EtcdClusterOptions{
		Dir: filepath.Join(o.Dir, "etcd"), Names: names, Voters: o.Voters,
		LearnersAsVoters: o.LearnersAsVoters, Detach: o.Detach, Logf: o.Log,
		ExtraArgs: []string{"--quota-backend-bytes=" + strconv.FormatInt(o.EtcdQuotaBytes, 10)},
	})
	if err != nil {
		return nil, err
	}
	for i, m := range cluster.Members {
		s.Nodes = append(s.Nodes, Node{
			Name: m.Name, EtcdPid: cluster.Pid(i), EtcdArgs: m.Args(cluster),
			EtcdClient: m.ClientURL, EtcdRealMetrics: strings.TrimSuffix(m.MetricsURL, "/metrics"), Learner: m.Learner,
		})
	}
	if err := s.save(); err != nil {
		return nil, err
	}

	for i := range s.Nodes {
		n := &s.Nodes[i]
		pod := "cozy-health-agent-" + n.Name
		if _, err := cp.CreateNodeAndPod(ctx, n.Name, AgentNamespace, pod, AgentServiceAccount); err != nil {
			return nil, err
		}
		// Ready, as its kubelet would report it: the aggregators' warm-up
		// (and so their readiness) waits for every Ready node's report.
		if err := cp.SetNodeReady(ctx, n.Name, true); err != nil {
			return nil, err
		}
		// Every lab node hosts an etcd member and an ovn-central member:
		// label it control-plane, as Talos does, or the aggregator does not
		// believe its member claims (a node cannot set this label itself).
		patch := []byte(`{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}}}`)
		if _, err := cp.Clientset().CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return nil, fmt.Errorf("lab: label node %s control-plane: %w", n.Name, err)
		}
		tok, err := cp.PodBoundToken(ctx, AgentNamespace, AgentServiceAccount, pod, []string{TokenAudience}, 48*time.Hour)
		if err != nil {
			return nil, err
		}
		n.TokenFile = filepath.Join(o.Dir, "nodes", n.Name, "token")
		if err := os.MkdirAll(filepath.Dir(n.TokenFile), 0o700); err != nil {
			return nil, fmt.Errorf("lab: %w", err)
		}
		if err := os.WriteFile(n.TokenFile, []byte(tok), 0o600); err != nil {
			return nil, fmt.Errorf("lab: write token: %w", err)
		}
		if err := l.nodeRole(ctx, chart, n.Name, pod); err != nil {
			return nil, err
		}
	}

	o.Log("starting per-node sources: Talos MachineService shims, Cilium and cilium-health, kube-ovn's OVS/OVN sockets and ovn-central raft members, LINSTOR")
	if err := l.startDaemon(ctx); err != nil {
		return nil, err
	}

	if err := l.aggregatorToken(ctx); err != nil {
		return nil, err
	}
	o.Log("starting %d aggregator replicas (leader election on Lease %s/%s)", Aggregators, PlatformNamespace, LeaseName)
	// Every replica's addresses first: each one's --peers lists them all.
	for i := 0; i < Aggregators; i++ {
		a, err := aggregatorAddrs(i)
		if err != nil {
			return nil, err
		}
		s.Aggregators = append(s.Aggregators, a)
	}
	for i := range s.Aggregators {
		a := &s.Aggregators[i]
		if a.Args, a.Env, err = l.aggregatorProcess(chart, a); err != nil {
			return nil, err
		}
		if err := l.startAggregator(a); err != nil {
			return nil, err
		}
	}
	for i := range s.Aggregators {
		if err := l.waitAggregator(ctx, i, chart); err != nil {
			return nil, err
		}
	}
	if err := s.save(); err != nil {
		return nil, err
	}
	o.Log("waiting for the aggregators' CA (ConfigMap %s/%s)", AgentNamespace, caConfigMap)
	if err := l.syncCA(ctx); err != nil {
		return nil, err
	}
	o.Log("installing the drain guard: webhook %s on pods/eviction calling %s", GuardWebhook, l.guardURLs())
	if err := l.installGuard(ctx); err != nil {
		return nil, err
	}
	o.Log("starting %d agents (the real binary, one per node)", len(s.Nodes))
	for i := range s.Nodes {
		n := &s.Nodes[i]
		if n.AgentMetrics, err = harness.FreeAddr(); err != nil {
			return nil, err
		}
		if n.AgentArgs, n.AgentEnv, err = l.agentProcess(chart, n); err != nil {
			return nil, err
		}
		if err := l.StartAgent(n.Name); err != nil {
			return nil, err
		}
	}
	for i := range s.Nodes {
		if err := l.waitAgent(ctx, chart, s.Nodes[i].Name); err != nil {
			return nil, err
		}
	}
	if err := s.save(); err != nil {
		return nil, err
	}
	o.Log("waiting for the Health objects")
	if err := l.waitHealthObjects(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

// aggregatorAddrs names replica i and picks its loopback addresses.
func aggregatorAddrs(i int) (Aggregator, error) {
	a := Aggregator{Name: "aggregator-" + strconv.Itoa(i)}
	var err error
	for _, p := range []*string{&a.GRPC, &a.HTTP, &a.Metrics, &a.Guard} {
		if *p, err = harness.FreeAddr(); err != nil {
			return a, err
		}
	}
	return a, nil
}

// aggregatorToken creates the aggregators' ServiceAccount (the chart's)
// and writes a token of it for the agents' audience where the chart's
// projected token volume is (aggregatorTokenDir): the replicas' peer sync
// sends it, and their PeerService reviews it.
func (l *Lab) aggregatorToken(ctx context.Context) error {
	if err := l.cp.CreateServiceAccount(ctx, AgentNamespace, AggregatorServiceAccount); err != nil {
		return err
	}
	secs := int64((48 * time.Hour) / time.Second)
	tr, err := l.cp.Clientset().CoreV1().ServiceAccounts(AgentNamespace).CreateToken(ctx, AggregatorServiceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{TokenAudience}, ExpirationSeconds: &secs},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("lab: request a token of %s/%s: %w", AgentNamespace, AggregatorServiceAccount, err)
	}
	dir := l.aggregatorTokenDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(tr.Status.Token), 0o600); err != nil {
		return fmt.Errorf("lab: write token: %w", err)
	}
	return nil
}

// aggregatorTokenDir stands in for the aggregators' projected token
// volume (file "token").
func (l *Lab) aggregatorTokenDir() string { return filepath.Join(l.State.Dir, "aggregator-token") }

func (l *Lab) startAggregator(a *Aggregator) error {
	p, err := startProcEnv(l.State.Dir, a.Name, a.Args, a.Env, l.opts.Detach)
	if err != nil {
		return err
	}
	a.Pid = p.Pid
	return nil
}

// waitAggregator waits until aggregator i serves its probes, starting it
// again on fresh addresses if it lost one (see waitServing).
func (l *Lab) waitAggregator(ctx context.Context, i int, chart *chartRelease) error {
	a := &l.State.Aggregators[i]
	return l.waitServing(ctx, a.Name,
		func() (string, int) { return "http://" + a.HTTP + "/healthz", a.Pid },
		func() error {
			// The other replicas' --peers keep its old gRPC address: their
			// peer calls to it fail (counted, logged); the agents reach it
			// through their relays (lab.json).
			fresh, err := aggregatorAddrs(i)
			if err != nil {
				return err
			}
			*a = fresh
			if a.Args, a.Env, err = l.aggregatorProcess(chart, a); err != nil {
				return err
			}
			return l.startAggregator(a)
		})
}

// waitAgent waits until node's agent serves its metrics, starting it again
// on a fresh address if it lost it (see waitServing).
func (l *Lab) waitAgent(ctx context.Context, chart *chartRelease, node string) error {
	n, err := l.State.Node(node)
	if err != nil {
		return err
	}
	return l.waitServing(ctx, "agent-"+n.Name,
		func() (string, int) { return "http://" + n.AgentMetrics + "/metrics", n.AgentPid },
		func() error {
			if n.AgentMetrics, err = harness.FreeAddr(); err != nil {
				return err
			}
			if n.AgentArgs, n.AgentEnv, err = l.agentProcess(chart, n); err != nil {
				return err
			}
			return l.StartAgent(n.Name)
		})
}

// waitServing waits until the process name answers on its URL (probe
// returns the URL and the pid). The lab picks the addresses a binary binds
// and the binary binds them a moment later; one that another process took
// in between makes it exit ("address already in use"), and again starts it
// on fresh addresses (up to three times).
func (l *Lab) waitServing(ctx context.Context, name string, probe func() (url string, pid int), again func() error) error {
	for attempt := 1; ; attempt++ {
		url, pid := probe()
		err := waitHTTP(ctx, url, pid)
		if err == nil {
			return nil
		}
		log := filepath.Join(l.State.Dir, "logs", name+".log")
		last := lastLine(log)
		if attempt == 3 || !strings.Contains(last, "address already in use") {
			return fmt.Errorf("lab: %s: %w: %s (log: %s)", name, err, last, log)
		}
		l.opts.Log("%s lost a port to another process (%s); starting it on fresh addresses", name, last)
		if err := again(); err != nil {
			return err
		}
	}
}

// waitHTTP waits until url answers 200, while pid runs.
func waitHTTP(ctx context.Context, url string, pid int) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := client.Get(url)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if !alive(pid) {
			return fmt.Errorf("exited (pid %d)", pid)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("no answer on %s", url)
}

// StartAgent starts (or restarts) the agent of node.
func (l *Lab) StartAgent(node string) error {
	n, err := l.State.Node(node)
	if err != nil {
		return err
	}
	if alive(n.AgentPid) {
		return nil
	}
	p, err := startProcEnv(l.State.Dir, "agent-"+n.Name, n.AgentArgs, n.AgentEnv, l.opts.Detach)
	if err != nil {
		return err
	}
	n.AgentPid = p.Pid
	return l.State.save()
}

// waitHealthObjects waits until every node-local component's Health object
// exists with a status.
func (l *Lab) waitHealthObjects(ctx context.Context) error {
	cs, err := l.healthClient()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		list, err := cs.HealthV1alpha1().Healths(PlatformNamespace).List(ctx, metav1.ListOptions{})
		if err == nil {
			have := map[string]bool{}
			for _, h := range list.Items {
				if h.Status.Overall != "" {
					have[h.Name] = true
				}
			}
			missing := 0
			for _, c := range report.NodeComponents {
				if !have[c] {
					missing++
				}
			}
			if missing == 0 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("lab: Health objects did not appear (aggregator logs in %s/logs): %w", l.State.Dir, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (l *Lab) healthClient() (versioned.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.State.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("lab: load kubeconfig: %w", err)
	}
	return versioned.NewForConfig(cfg)
}

// Down stops everything a lab started, by pid. It removes nothing outside
// the lab's directory (and nothing inside it either: logs stay to be read).
func (l *Lab) Down() error {
	if l.stopDaemon != nil {
		l.stopDaemon()
	}
	return DownDir(l.State.Dir)
}

// DownDir stops the lab recorded in dir/lab.json.
func DownDir(dir string) error {
	s, err := LoadState(dir)
	if err != nil {
		return err
	}
	if s.RealNode != "" {
		if err := realnode.StopClusterDir(dir); err != nil {
			return err
		}
		return os.Rename(statePath(dir), statePath(dir)+".down")
	}
	var pids []int
	for _, n := range s.Nodes {
		pids = append(pids, n.AgentPid)
	}
	for _, a := range s.Aggregators {
		pids = append(pids, a.Pid)
	}
	pids = append(pids, s.DaemonPid)
	for _, n := range s.Nodes {
		pids = append(pids, n.EtcdPid)
	}
	pids = append(pids, s.APIServerPid, s.EtcdPid)
	for _, pid := range pids {
		if err := stopPid(pid, 10*time.Second); err != nil {
			return err
		}
	}
	return os.Rename(statePath(dir), statePath(dir)+".down")
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("read %s: %w", src, err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", dst, err)
	}
	return nil
}

// freshMultiple is the smallest multiple of interval that covers three lease
// durations: a failover after a SIGKILL takes one lease duration plus the
// new leader's retry period and first write.
func freshMultiple(interval, lease time.Duration) int {
	m := int((3*lease + interval - 1) / interval)
	if m < 3 {
		m = 3
	}
	return m
}

// nodeRole makes node a control-plane Node (every lab node hosts an etcd
// member) and gives its agent what the chart's kube-api-access volume
// holds: a token of the agent's ServiceAccount for the API server and the
// apiserver's CA; the chart's agent ClusterRole lets it get Nodes.
func (l *Lab) nodeRole(ctx context.Context, chart *chartRelease, node, pod string) error {
	cs := l.cp.Clientset()
	patch := []byte(`{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}}}`)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("lab: label Node %s control-plane: %w", node, err)
	}
	if chart.agentRole != nil {
		if _, err := cs.RbacV1().ClusterRoles().Create(ctx, chart.agentRole, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("lab: the chart's agent ClusterRole: %w", err)
		}
	}
	if chart.agentRoleBinding != nil {
		if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, chart.agentRoleBinding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("lab: the chart's agent ClusterRoleBinding: %w", err)
		}
	}
	tok, err := l.cp.PodBoundToken(ctx, AgentNamespace, AgentServiceAccount, pod, nil, 48*time.Hour)
	if err != nil {
		return err
	}
	dir := filepath.Join(l.State.Dir, "nodes", node, "kube-api")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(tok), 0o600); err != nil {
		return fmt.Errorf("lab: write token: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), l.cp.Config.CAData, 0o600); err != nil {
		return fmt.Errorf("lab: write CA: %w", err)
	}
	return nil
}
