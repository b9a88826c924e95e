package lab

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cozystack/cozy-health/test/harness"
)

// Faults lists every fault a node takes, and whether it needs an argument.
var Faults = map[string]bool{
	"etcd-stop": false, "etcd-start": false,
	"agent-stop": false, "agent-start": false,
	"fsync-slow": false, "fsync-ok": false,
	"cilium-fail": false, "cilium-ok": false,
	"ovs-down": false, "ovs-up": false,
	"ovn-central-stop": false, "ovn-central-start": false,
	"ovn-nb-stop": false, "ovn-nb-start": false,
	"ovn-sb-leave": false, "ovn-sb-rejoin": false,
	"ovn-nb-freeze": false, "ovn-nb-thaw": false,
	"cilium-unreachable": true, "cilium-reachable": true,
	"etcd-metrics-absent": false, "etcd-metrics-present": false,
	"linstor-offline": false, "linstor-online": false,
	"drbd-outdated": true, "drbd-uptodate": true,
	"drbd-detached": true, "drbd-attached": true,
	"drbd-standalone": true, "drbd-connected": true,
	"talos-hang": false, "talos-ok": false,
	"talos-unpatched": false, "talos-patched": false,
	"partition": false, "partition-heal": false,
	// partition-from takes the replica (index or aggregator-N) the node
	// is cut from alone; partition-heal repairs it too.
	"partition-from": true,
	// A node's kubelet (its Lease in kube-node-lease), the node as a whole
	// (agent and kubelet: what a node that is down shows), and planned
	// maintenance (cordon; with the argument "talos", as Talos cordons).
	"kubelet-stop": false, "kubelet-start": false,
	"node-down": false, "node-up": false,
	"cordon": false, "uncordon": false,
}

// labWide are the faults that act on the whole lab and take no node.
var labWide = map[string]bool{
	"leader-kill": true, "aggregator-start": true,
	"etcd-db-near-quota": true, "etcd-db-ok": true,
}

// LabWide tells whether fault acts on the whole lab (no --node).
func LabWide(fault string) bool { return labWide[fault] }

// NearQuotaRatio is how full etcd-db-near-quota makes every member's
// database: above the agent's 80 % (Degraded), below the quota.
const NearQuotaRatio = 0.85

// Fault applies a fault to node of the lab in dir. leader-kill takes no node.
func Fault(ctx context.Context, dir, node, fault, arg string) (string, error) {
	s, err := LoadState(dir)
	if err != nil {
		return "", err
	}
	if fault == "leader-kill" {
		return leaderKill(ctx, s)
	}
	if fault == "aggregator-start" {
		return aggregatorsStart(s)
	}
	switch fault {
	case "etcd-db-near-quota":
		return etcdNearQuota(ctx, s)
	case "etcd-db-ok":
		return etcdShrink(ctx, s)
	}
	needsArg, ok := Faults[fault]
	if !ok {
		return "", fmt.Errorf("unknown fault %q", fault)
	}
	if needsArg && arg == "" {
		return "", fmt.Errorf("fault %s needs an argument (a resource or node name)", fault)
	}
	n, err := s.Node(node)
	if err != nil {
		return "", err
	}
	switch fault {
	case "cordon", "uncordon":
		if arg != "" && arg != "talos" {
			return "", fmt.Errorf("%s takes no argument or \"talos\", got %q", fault, arg)
		}
		return cordon(ctx, s, n.Name, fault == "cordon", arg == "talos")
	case "node-down":
		// A node that goes down: its agent and its kubelet both stop.
		msg, err := Fault(ctx, dir, node, "agent-stop", "")
		if err != nil {
			return "", err
		}
		k, err := controlFault(ctx, s.ControlSocket, node, "kubelet-stop", "")
		if err != nil {
			return "", err
		}
		return msg + "; " + k, nil
	case "node-up":
		k, err := controlFault(ctx, s.ControlSocket, node, "kubelet-start", "")
		if err != nil {
			return "", err
		}
		msg, err := Fault(ctx, dir, node, "agent-start", "")
		if err != nil {
			return "", err
		}
		return k + "; " + msg, nil
	case "etcd-stop":
		if err := stopPid(n.EtcdPid, 10*time.Second); err != nil {
			return "", err
		}
		return fmt.Sprintf("stopped etcd member %s (pid %d)", n.Name, n.EtcdPid), nil
	case "etcd-start":
		if alive(n.EtcdPid) {
			return fmt.Sprintf("etcd member %s already runs (pid %d)", n.Name, n.EtcdPid), nil
		}
		p, err := startProc(s.Dir, "etcd-"+n.Name, n.EtcdArgs, s.Detached)
		if err != nil {
			return "", err
		}
		n.EtcdPid = p.Pid
		return fmt.Sprintf("started etcd member %s (pid %d)", n.Name, p.Pid), s.save()
	case "talos-unpatched":
		if err := os.Rename(n.Talosconfig, n.Talosconfig+".unpatched"); err != nil {
			return "", fmt.Errorf("talos-unpatched on %s: %w", n.Name, err)
		}
		return fmt.Sprintf("the agent on %s has no talosconfig (%s gone, as before the Talos access patch): its etcd checks cannot ask Talos", n.Name, n.Talosconfig), nil
	case "talos-patched":
		if err := os.Rename(n.Talosconfig+".unpatched", n.Talosconfig); err != nil {
			return "", fmt.Errorf("talos-patched on %s: %w", n.Name, err)
		}
		return fmt.Sprintf("the agent on %s has its talosconfig again (%s)", n.Name, n.Talosconfig), nil
	case "agent-stop":
		if err := stopPid(n.AgentPid, 10*time.Second); err != nil {
			return "", err
		}
		return fmt.Sprintf("stopped the agent on %s (pid %d)", n.Name, n.AgentPid), nil
	case "agent-start":
		if alive(n.AgentPid) {
			return fmt.Sprintf("the agent on %s already runs (pid %d)", n.Name, n.AgentPid), nil
		}
		p, err := startProcEnv(s.Dir, "agent-"+n.Name, n.AgentArgs, n.AgentEnv, s.Detached)
		if err != nil {
			return "", err
		}
		n.AgentPid = p.Pid
		return fmt.Sprintf("started the agent on %s (pid %d)", n.Name, p.Pid), s.save()
	}
	return controlFault(ctx, s.ControlSocket, node, fault, arg)
}

// controlFault asks the lab daemon, over its unix socket, to change the
// state of a source server.
func controlFault(ctx context.Context, socket, node, fault, arg string) (string, error) {
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}, Timeout: 5 * time.Second}
	q := url.Values{"node": {node}, "fault": {fault}, "arg": {arg}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://lab/v1/fault?"+q.Encode(), nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("reach the lab daemon at %s: %w", socket, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("fault %s on %s: %s", fault, node, strings.TrimSpace(string(body)))
	}
	return strings.TrimSpace(string(body)), nil
}

// LeaderIdentity returns the holder of the aggregators' Lease.
func LeaderIdentity(ctx context.Context, s *State) (string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Kubeconfig)
	if err != nil {
		return "", fmt.Errorf("load kubeconfig: %w", err)
	}
	c, err := coordinationv1.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	lease, err := c.Leases(PlatformNamespace).Get(ctx, LeaseName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("get lease %s/%s: %w", PlatformNamespace, LeaseName, err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		return "", fmt.Errorf("lease %s/%s has no holder", PlatformNamespace, LeaseName)
	}
	return *lease.Spec.HolderIdentity, nil
}

func leaderKill(ctx context.Context, s *State) (string, error) {
	id, err := LeaderIdentity(ctx, s)
	if err != nil {
		return "", err
	}
	for _, a := range s.Aggregators {
		if a.Name == id {
			if !alive(a.Pid) {
				return "", fmt.Errorf("leader %s (pid %d) is not running", a.Name, a.Pid)
			}
			killPid(a.Pid)
			return fmt.Sprintf("killed the leader %s (pid %d) with SIGKILL", a.Name, a.Pid), nil
		}
	}
	return "", fmt.Errorf("lease holder %q is not one of the lab's aggregators", id)
}

func aggregatorsStart(s *State) (string, error) {
	var started []string
	for i := range s.Aggregators {
		a := &s.Aggregators[i]
		if alive(a.Pid) {
			continue
		}
		p, err := startProcEnv(s.Dir, a.Name, a.Args, a.Env, s.Detached)
		if err != nil {
			return "", err
		}
		a.Pid = p.Pid
		started = append(started, fmt.Sprintf("%s (pid %d)", a.Name, p.Pid))
	}
	if len(started) == 0 {
		return "every aggregator already runs", nil
	}
	return "started " + strings.Join(started, ", "), s.save()
}

// runningEtcd are the client URLs of the lab's etcd members that run.
func runningEtcd(s *State) ([]string, error) {
	var eps []string
	for _, n := range s.Nodes {
		if alive(n.EtcdPid) {
			eps = append(eps, n.EtcdClient)
		}
	}
	if len(eps) == 0 {
		return nil, fmt.Errorf("no etcd member of the lab runs")
	}
	return eps, nil
}

// etcdQuota reads a member's own etcd_server_quota_backend_bytes, the
// quota the agent judges against.
func etcdQuota(ctx context.Context, metricsURL string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("read etcd metrics: %w", err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("parse etcd metrics: %w", err)
	}
	f, ok := fams["etcd_server_quota_backend_bytes"]
	if !ok || len(f.GetMetric()) == 0 {
		return 0, fmt.Errorf("etcd at %s exposes no etcd_server_quota_backend_bytes", metricsURL)
	}
	return int64(f.GetMetric()[0].GetGauge().GetValue()), nil
}

// etcdNearQuota fills the lab's etcd with real writes until every member's
// database is NearQuotaRatio of its quota (the size is replicated: they
// grow together).
func etcdNearQuota(ctx context.Context, s *State) (string, error) {
	eps, err := runningEtcd(s)
	if err != nil {
		return "", err
	}
	quota, err := etcdQuota(ctx, s.Nodes[0].EtcdRealMetrics)
	if err != nil {
		return "", err
	}
	start := time.Now()
	size, err := harness.EtcdFill(ctx, eps, int64(float64(quota)*NearQuotaRatio))
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("wrote real keys under %s until etcd's database is %d bytes, %.0f%% of its %d-byte quota (etcd_server_quota_backend_bytes), in %s",
		harness.EtcdFillPrefix, size, 100*float64(size)/float64(quota), quota, time.Since(start).Round(100*time.Millisecond)), nil
}

// etcdShrink deletes what etcdNearQuota wrote, compacts and defragments
// every member.
func etcdShrink(ctx context.Context, s *State) (string, error) {
	eps, err := runningEtcd(s)
	if err != nil {
		return "", err
	}
	sizes, err := harness.EtcdShrink(ctx, eps)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("deleted %s*, compacted and defragmented every member: databases now %v bytes", harness.EtcdFillPrefix, sizes), nil
}
