package lab

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/clientcmd"
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
	"talos-hang": false, "talos-ok": false,
}

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
