// Command cozy-health-lab runs a whole cozy-health cluster on one machine —
// a real kube-apiserver + etcd, a real N-member management etcd, per-node
// Talos/Cilium/kube-ovn/LINSTOR sources in their real wire shapes, real agent
// and aggregator processes — and injects faults into it. `make demo` runs its
// demo subcommand; `make lab` its up subcommand.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/cozystack/cozy-health/test/harness/realnode"
	"github.com/cozystack/cozy-health/test/lab"
)

// exitError carries a specific exit code out of a command.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	var ee exitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		os.Exit(ee.code)
	default:
		fmt.Fprintln(os.Stderr, "cozy-health-lab:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "cozy-health-lab",
		Short:         "A whole cozy-health cluster on one machine, with faults on demand",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	var dir string
	root.PersistentFlags().StringVar(&dir, "dir", "", "directory holding the lab (required); nothing is written outside it")

	var o lab.Options
	up := &cobra.Command{
		Use:   "up",
		Short: "Start a lab and leave it running",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Dir, o.Detach, o.Log = dir, true, logf
			l, err := lab.Up(cmd.Context(), o)
			if err != nil {
				return err
			}
			printWhere(l.State)
			return nil
		},
	}
	up.Flags().IntVar(&o.Nodes, "nodes", 3, "number of simulated nodes")
	up.Flags().IntVar(&o.Voters, "voters", 3, "voting etcd members; the others join as learners")
	up.Flags().BoolVar(&o.LearnersAsVoters, "learners-as-voters", false, "members beyond --voters join as voters instead of learners")
	up.Flags().DurationVar(&o.Interval, "interval", 0, "agents' report interval (default 2s in the lab)")

	var nodeName, chartBin string
	upNode := &cobra.Command{
		Use:   "up-node",
		Short: "Start a control plane with one real kubelet node (containerd, runc, kube-proxy, CoreDNS) and leave it running (root)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := lab.UpNode(cmd.Context(), lab.NodeOptions{Dir: dir, NodeName: nodeName, ChartBin: chartBin, Log: logf})
			if err != nil {
				return err
			}
			printWhereNode(s)
			return nil
		},
	}
	upNode.Flags().StringVar(&nodeName, "node-name", "node-1", "the kubelet's node name")
	upNode.Flags().StringVar(&chartBin, "chart-bin", "", "directory with cozy-health-agent and cozy-health-aggregator (make build): import their images and helm install the chart")

	down := &cobra.Command{
		Use:   "down",
		Short: "Stop everything the lab started, by pid (a real-node lab also puts the host back as it was)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			s, err := lab.LoadState(dir)
			if err != nil {
				return err
			}
			if err := lab.DownDir(dir); err != nil {
				return err
			}
			if s.RealNode != "" {
				logf("lab in %s stopped and the host restored; its logs stay in %s and %s/node", dir, dir, dir)
				return nil
			}
			logf("lab in %s stopped; its logs stay in %s/logs", dir, dir)
			return nil
		},
	}

	var node string
	fault := &cobra.Command{
		Use:   "fault [--node NODE] FAULT [RESOURCE|NODE]",
		Short: "Inject or revert a fault in a running lab",
		Long: `Faults on a node (--node): etcd-stop, etcd-start, agent-stop, agent-start,
fsync-slow, fsync-ok, cilium-fail, cilium-ok, cilium-unreachable NODE,
cilium-reachable NODE, ovs-down, ovs-up, ovn-central-stop, ovn-central-start
(the node's NB and SB raft members, on node-1..3: real ovsdb-servers of
Debian's ovn-central where it is installed, stopped by SIGTERM; set
COZY_HEALTH_LAB_OVN=stand-in for the stand-in), ovn-nb-stop, ovn-nb-start
(its NB member only), ovn-sb-leave, ovn-sb-rejoin (cluster/leave of its SB
member, and a fresh join), ovn-nb-freeze, ovn-nb-thaw (SIGSTOP/SIGCONT of its
NB server), etcd-metrics-absent, etcd-metrics-present,
linstor-offline, linstor-online, drbd-outdated RES, drbd-uptodate RES,
drbd-detached RES, drbd-attached RES (the node's replica loses its disk:
Diskless though diskful, no data copy), drbd-standalone RES, drbd-connected
RES (the node's replica and its peers StandAlone toward each other: a split
brain),
talos-hang, talos-ok, talos-unpatched, talos-patched (the node's talosconfig
gone, as before the Talos access patch), partition, partition-heal (the node's
uplink relay to the aggregators drops every byte, open and new connections;
healed, the connections that lived through it are closed).
On the node running real Open vSwitch daemons (node-1 where Debian's
openvswitch-switch and ovn-host are installed): DAEMON-stop (SIGTERM),
DAEMON-kill (SIGKILL), DAEMON-freeze (SIGSTOP), DAEMON-thaw, DAEMON-start for
DAEMON ovs-vswitchd, ovn-controller or ovs-ovsdb (the Open_vSwitch
ovsdb-server); there ovs-down/ovs-up stop and start all three.
Lab-wide faults: leader-kill (SIGKILL the Lease holder), aggregator-start
(restart any aggregator that is not running), etcd-db-near-quota (real writes
until every etcd member's database is 85% of its quota), etcd-db-ok (delete,
compact, defragment).

fsync-slow adds slow observations to the etcd member's real WAL fsync and
backend commit histograms as the agent scrapes them (a proxy in front of the
member's /metrics); it does not slow the disk.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			arg := ""
			if len(args) == 2 {
				arg = args[1]
			}
			if !lab.LabWide(args[0]) && node == "" {
				return fmt.Errorf("fault %s needs --node", args[0])
			}
			msg, err := lab.Fault(cmd.Context(), dir, node, args[0], arg)
			if err != nil {
				return err
			}
			logf("%s", msg)
			return nil
		},
	}
	fault.Flags().StringVar(&node, "node", "", "node to act on (node-1, node-2, ...)")

	kubectl := &cobra.Command{
		Use:                "kubectl [ARGS...]",
		Short:              "Run the lab's kubectl with the lab's kubeconfig",
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			// Flag parsing is off so kubectl gets every flag: take --dir by hand.
			d, rest, err := takeDir(args, dir)
			if err != nil {
				return err
			}
			code, err := lab.RunKubectl(cmd.Context(), d, rest, os.Stdout, os.Stderr)
			if err != nil {
				return err
			}
			if code != 0 {
				return exitError{code}
			}
			return nil
		},
	}

	var listenFDs int
	serve := &cobra.Command{
		Use:    "serve",
		Short:  "Run the lab's source servers (started by up; not for direct use)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			listeners, err := lab.InheritedListeners(listenFDs)
			if err != nil {
				return err
			}
			return lab.Serve(cmd.Context(), dir, listeners)
		},
	}
	serve.Flags().IntVar(&listenFDs, "listen-fds", 0, "number of listening sockets handed over as descriptors 3, 4, ... (by up)")

	demo := &cobra.Command{
		Use:   "demo",
		Short: "Start a lab, break it, show Health objects react, restore it, tear it down",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Dir, o.Detach, o.Log = dir, true, logf
			return lab.Demo(cmd.Context(), o, os.Stdout)
		},
	}
	demo.Flags().IntVar(&o.Nodes, "nodes", 3, "number of simulated nodes")

	for _, c := range []*cobra.Command{up, upNode, down, fault, serve, demo} {
		_ = c.MarkPersistentFlagRequired("dir")
	}
	root.AddCommand(up, upNode, down, fault, kubectl, serve, demo)
	return root
}

// takeDir removes --dir DIR / --dir=DIR from args.
func takeDir(args []string, dflt string) (string, []string, error) {
	dir := dflt
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--dir":
			if i+1 >= len(args) {
				return "", nil, errors.New("--dir needs a value")
			}
			dir = args[i+1]
			i++
		case len(a) > 6 && a[:6] == "--dir=":
			dir = a[6:]
		default:
			rest = append(rest, a)
		}
	}
	if dir == "" {
		return "", nil, errors.New("--dir is required")
	}
	return dir, rest, nil
}

func printWhere(s *lab.State) {
	fmt.Printf(`
cozy-health lab is up in %[1]s
  state:       %[1]s/lab.json (addresses and pids of everything)
  kubeconfig:  %[2]s
  logs:        %[1]s/logs/
  aggregators:`, s.Dir, s.Kubeconfig)
	for _, a := range s.Aggregators {
		fmt.Printf("\n    %s  grpc %s  http %s  metrics http://%s/metrics  pid %d", a.Name, a.GRPC, a.HTTP, a.Metrics, a.Pid)
	}
	fmt.Printf("\n  nodes:")
	for _, n := range s.Nodes {
		fmt.Printf("\n    %s  agent pid %d  etcd pid %d  talos %s", n.Name, n.AgentPid, n.EtcdPid, n.Talos)
	}
	fmt.Printf(`

Try:
  bin/cozy-health-lab kubectl --dir %[1]s get chz -A
  bin/cozy-health-lab fault --dir %[1]s --node node-2 etcd-stop
  bin/cozy-health-lab kubectl --dir %[1]s get health etcd -n cozy-system -o yaml
  bin/cozy-health-lab fault --dir %[1]s --node node-2 etcd-start
Stop it:
  bin/cozy-health-lab down --dir %[1]s
`, s.Dir)
}

func printWhereNode(s *lab.State) {
	fmt.Printf(`
cozy-health lab with a real node is up in %[1]s
  state:       %[1]s/lab.json, %[1]s/node/node.json (pids, what it changed on the host)
  kubeconfig:  %[2]s
  node:        %[3]s (kubelet, containerd, kube-proxy, coredns logs in %[1]s/node/)
  pod network: bridge %[4]s, pods in %[5]s, the apiserver and cluster DNS on %[6]s

Try:
  bin/cozy-health-lab kubectl --dir %[1]s get nodes -o wide
  bin/cozy-health-lab kubectl --dir %[1]s get pods -A
  bin/cozy-health-lab kubectl --dir %[1]s get chz -A        (with the chart installed)
  KUBECONFIG=%[2]s bin/kubectl-health drain-check %[3]s
Stop it (stops every process, restores sysctls, paths, cgroups, mounts, nftables, the bridge):
  bin/cozy-health-lab down --dir %[1]s
`, s.Dir, s.Kubeconfig, s.RealNode, realnode.Bridge, realnode.PodCIDR, realnode.Address)
}
