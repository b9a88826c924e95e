package soak

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/cozystack/cozy-health/test/lab"
)

// Fault is one entry of the catalog: how to apply and repair it on the
// nodes the schedule draws, what the truth is meanwhile, and its bound
// class.
type Fault struct {
	Name string
	// Targets is how many nodes the fault acts on: 1, 2, or 0 for a third
	// of the nodes (rounded up); the leader kill acts on no node.
	Targets int
	Class   string
	// Short marks the faults of the short variant (make test): quick to
	// detect and to repair on a loaded machine.
	Short bool
	// RealOVS marks a fault of the real Open vSwitch daemons: drawn only
	// when the lab runs them, on the node that does.
	RealOVS bool
	Apply   func(ctx context.Context, e *env, nodes []string) error
	Repair  func(ctx context.Context, e *env, nodes []string) error
	// Truth is the truth while the fault is on, given every node and the
	// targets.
	Truth func(all, nodes []string) Truth
}

// env is what faults act on.
type env struct {
	dir  string
	logf func(format string, args ...any)
}

func (e *env) lab(ctx context.Context, node, fault, arg string) error {
	msg, err := lab.Fault(ctx, e.dir, node, fault, arg)
	if err != nil {
		return fmt.Errorf("fault %s on %s: %w", fault, node, err)
	}
	e.logf("%s", msg)
	return nil
}

// labFault applies the lab fault f on every target.
func labFault(f, arg string) func(context.Context, *env, []string) error {
	return func(ctx context.Context, e *env, nodes []string) error {
		for _, n := range nodes {
			if err := e.lab(ctx, n, f, arg); err != nil {
				return err
			}
		}
		return nil
	}
}

// signalAgents sends sig to the agents of nodes (SIGKILL: killed; SIGSTOP:
// frozen, its connection open and silent; SIGCONT: thawed).
func signalAgents(sig syscall.Signal) func(context.Context, *env, []string) error {
	return func(_ context.Context, e *env, nodes []string) error {
		s, err := lab.LoadState(e.dir)
		if err != nil {
			return err
		}
		for _, name := range nodes {
			n, err := s.Node(name)
			if err != nil {
				return err
			}
			if err := syscall.Kill(n.AgentPid, sig); err != nil {
				return fmt.Errorf("signal %s to the agent of %s (pid %d): %w", sig, name, n.AgentPid, err)
			}
			e.logf("sent %s to the agent of %s (pid %d)", sig, name, n.AgentPid)
			if sig == syscall.SIGKILL {
				waitGone(n.AgentPid)
			}
		}
		return nil
	}
}

// waitGone waits (up to 5 s) until pid is reaped, so the lab's
// agent-start sees it gone.
func waitGone(pid int) {
	for i := 0; i < 50; i++ {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func others(all, nodes []string) []string {
	var out []string
	for _, a := range all {
		hit := false
		for _, n := range nodes {
			hit = hit || a == n
		}
		if !hit {
			out = append(out, a)
		}
	}
	return out
}

func drainOf(all []string, sets map[string]Set) map[string]Set {
	out := map[string]Set{}
	for _, n := range all {
		if s, ok := sets[n]; ok {
			out[n] = s
		}
	}
	return out
}

// silentBecause is silentEntries with the reason each silent node's
// entries must carry (issue 36): reason(node), or not judged when reason
// is nil.
func silentBecause(reason func(node string) string) func(all, nodes []string) Truth {
	return func(all, nodes []string) Truth {
		t := silentEntries(all, nodes)
		if reason != nil {
			t.Reasons = map[string]string{}
			for _, n := range nodes {
				t.Reasons[n] = reason(n)
			}
		}
		return t
	}
}

// because is a reason for every node.
func because(r string) func(string) string { return func(string) string { return r } }

// The reasons a silent node's entries carry (rollup/silence.go).
const (
	ReasonAgentSilent        = "AgentSilent"
	ReasonNodeUnreachable    = "NodeUnreachable"
	ReasonManyNodesSilent    = "ManyNodesSilent"
	ReasonPlannedMaintenance = "PlannedMaintenance"
)

// silentEntries is the truth while the agents of nodes are silent: their
// entries go Unknown (HeartbeatMissed). etcd and ovn-central: with one of
// three members unknown and two known healthy a quorum holds (Degraded);
// with more unknown it hinges on them (Unknown, or Degraded). A
// node-local component with an Unknown node reads Unknown or Degraded.
// Draining a silent node is unknown (its own data is missing); draining
// another may be blocked or unknown (quorum hinges on the silent ones),
// never safe.
func silentEntries(all, nodes []string) Truth {
	t := Truth{Components: map[string]Set{}, Drain: map[string]Set{}}
	for _, c := range Components {
		if c == "linstor" {
			// Read from the LINSTOR controller by the aggregator, not by
			// the agents: a silent agent leaves it as healthy as it is.
			continue
		}
		t.Components[c] = Set{Unknown, Degraded}
	}
	for _, n := range nodes {
		t.Drain[n] = Set{Undecide}
	}
	for _, n := range others(all, nodes) {
		t.Drain[n] = Set{Undecide, Blocked}
	}
	// Their own entries: Unknown (HeartbeatMissed), never Healthy, never
	// Down: nothing is known about them (linstor's come from the
	// controller, not from them).
	t.Entries = map[string]map[string]Set{}
	for _, c := range Components {
		if c == "linstor" {
			continue
		}
		t.Entries[c] = map[string]Set{}
		for _, n := range nodes {
			t.Entries[c][n] = Set{Unknown}
		}
	}
	return t
}

// ovsDaemonFault is a fault of one real Open vSwitch daemon on the node
// that runs them (lab: the first ovn-central node, where Debian's
// openvswitch-switch and ovn-host are installed): stop (SIGTERM) and kill
// (SIGKILL) make the node's kube-ovn entry Down (the daemon not running,
// or the database socket gone or not listening), freeze (SIGSTOP) Unknown
// (the daemon's control socket or the database does not answer within
// the check deadline). kube-ovn as a whole is Degraded (one node Down) or
// Unknown/Degraded (one node Unknown). The drain rules read ovn-central's
// quorum, not the node's OVS: every drain stays safe.
func ovsDaemonFault(daemon, action string) Fault {
	repair := "start"
	entry, comp := Set{Down}, Set{Degraded}
	if action == "freeze" {
		repair = "thaw"
		entry, comp = Set{Unknown}, Set{Unknown, Degraded}
	}
	return Fault{
		Name: daemon + "-" + action, Targets: 1, Class: ClassSource, RealOVS: true,
		Apply: labFault(daemon+"-"+action, ""), Repair: labFault(daemon+"-"+repair, ""),
		Truth: func(_, nodes []string) Truth {
			return Truth{
				Components: map[string]Set{"kube-ovn": comp},
				Entries:    map[string]map[string]Set{"kube-ovn": {nodes[0]: entry}},
			}
		},
	}
}

func init() {
	for _, d := range []string{"ovs-vswitchd", "ovn-controller", "ovs-ovsdb"} {
		for _, a := range []string{"stop", "kill", "freeze"} {
			Catalog = append(Catalog, ovsDaemonFault(d, a))
		}
	}
}

// Catalog is every fault the soak draws from, in a fixed order (the seed
// permutes it).
var Catalog = []Fault{
	{
		Name: "etcd-stop", Targets: 1, Class: ClassSource, Short: true,
		Apply: labFault("etcd-stop", ""), Repair: labFault("etcd-start", ""),
		// 2 of 3 voters healthy: quorum holds, Degraded. Draining another
		// voter leaves 1 of 3: blocked. Draining the stopped one removes
		// no healthy voter: safe (blocked is conservative, accepted).
		Truth: func(all, nodes []string) Truth {
			d := map[string]Set{nodes[0]: {Safe, Blocked}}
			for _, o := range others(all, nodes) {
				d[o] = Set{Blocked}
			}
			return Truth{Components: map[string]Set{"etcd": {Degraded}}, Drain: d}
		},
	},
	{
		Name: "etcd-quorum-lost", Targets: 2, Class: ClassSource,
		Apply: labFault("etcd-stop", ""), Repair: labFault("etcd-start", ""),
		// 1 of 3 voters: the loss is proven, Down; no drain is safe.
		Truth: func(all, _ []string) Truth {
			d := map[string]Set{}
			for _, n := range all {
				d[n] = Set{Blocked, Undecide}
			}
			return Truth{Components: map[string]Set{"etcd": {Down}}, Drain: d}
		},
	},
	{
		Name: "fsync-slow", Targets: 1, Class: ClassSource,
		Apply: labFault("fsync-slow", ""), Repair: labFault("fsync-ok", ""),
		// A slow member still votes: capacity, not failure. The drain
		// rules do not read fsync latency: every verdict accepted
		// except that none is judged here.
		Truth: func(all, _ []string) Truth {
			d := map[string]Set{}
			for _, n := range all {
				d[n] = Set{Safe, Blocked, Undecide}
			}
			return Truth{Components: map[string]Set{"etcd": {Degraded}}, Drain: d}
		},
	},
	{
		Name: "etcd-metrics-absent", Targets: 1, Class: ClassSource,
		Apply: labFault("etcd-metrics-absent", ""), Repair: labFault("etcd-metrics-present", ""),
		// The node's etcd entry is Unknown (MetricsEndpointUnreachable):
		// no evidence about its fsync latency, never Healthy.
		Truth: func(all, _ []string) Truth {
			d := map[string]Set{}
			for _, n := range all {
				d[n] = Set{Safe, Blocked, Undecide}
			}
			return Truth{Components: map[string]Set{"etcd": {Unknown, Degraded}}, Drain: d}
		},
	},
	{
		Name: "talos-hang", Targets: 1, Class: ClassSource, Short: true,
		Apply: labFault("talos-hang", ""), Repair: labFault("talos-ok", ""),
		// A source hanging: the node's etcd entry Unknown (CheckTimeout);
		// its member is unknown, 2 of 3 known healthy. The node component
		// reads Talos too.
		Truth: func(all, nodes []string) Truth {
			d := map[string]Set{nodes[0]: {Undecide, Blocked}}
			for _, o := range others(all, nodes) {
				d[o] = Set{Undecide, Blocked}
			}
			return Truth{Components: map[string]Set{"etcd": {Unknown, Degraded}, "node": {Healthy, Unknown, Degraded}}, Drain: d}
		},
	},
	{
		Name: "cilium-fail", Targets: 1, Class: ClassSource, Short: true,
		Apply: labFault("cilium-fail", ""), Repair: labFault("cilium-ok", ""),
		Truth: func(_, _ []string) Truth {
			return Truth{Components: map[string]Set{"cilium": {Degraded}}}
		},
	},
	{
		Name: "cilium-unreachable", Targets: 2, Class: ClassSource,
		Apply: func(ctx context.Context, e *env, n []string) error {
			return e.lab(ctx, n[0], "cilium-unreachable", n[1])
		},
		Repair: func(ctx context.Context, e *env, n []string) error {
			return e.lab(ctx, n[0], "cilium-reachable", n[1])
		},
		Truth: func(_, _ []string) Truth {
			return Truth{Components: map[string]Set{"cilium": {Degraded}}}
		},
	},
	{
		Name: "ovs-down", Targets: 1, Class: ClassSource,
		Apply: labFault("ovs-down", ""), Repair: labFault("ovs-up", ""),
		Truth: func(_, _ []string) Truth {
			return Truth{Components: map[string]Set{"kube-ovn": {Degraded}}}
		},
	},
	{
		Name: "ovn-central-stop", Targets: 1, Class: ClassSource,
		Apply: labFault("ovn-central-stop", ""), Repair: labFault("ovn-central-start", ""),
		// NB and SB keep quorum with 2 of 3: Degraded. Draining another
		// member's node leaves 1 of 3: blocked.
		Truth: func(all, nodes []string) Truth {
			d := map[string]Set{nodes[0]: {Safe, Blocked}}
			for _, o := range others(all, nodes) {
				d[o] = Set{Blocked}
			}
			return Truth{Components: map[string]Set{"kube-ovn": {Degraded}}, Drain: d}
		},
	},
	{
		Name: "ovn-nb-quorum-lost", Targets: 2, Class: ClassSource,
		Apply: labFault("ovn-nb-stop", ""), Repair: labFault("ovn-nb-start", ""),
		Truth: func(all, _ []string) Truth {
			d := map[string]Set{}
			for _, n := range all {
				d[n] = Set{Blocked, Undecide}
			}
			return Truth{Components: map[string]Set{"kube-ovn": {Down}}, Drain: d}
		},
	},
	{
		Name: "ovn-sb-leave", Targets: 1, Class: ClassSource,
		Apply: labFault("ovn-sb-leave", ""), Repair: labFault("ovn-sb-rejoin", ""),
		// The member that left is Down (MemberLeftCluster); the others
		// keep the SB database served.
		Truth: func(all, nodes []string) Truth {
			d := map[string]Set{nodes[0]: {Safe, Blocked}}
			for _, o := range others(all, nodes) {
				d[o] = Set{Safe, Blocked}
			}
			return Truth{Components: map[string]Set{"kube-ovn": {Degraded}}, Drain: d}
		},
	},
	{
		Name: "ovn-nb-freeze", Targets: 1, Class: ClassSource,
		Apply: labFault("ovn-nb-freeze", ""), Repair: labFault("ovn-nb-thaw", ""),
		// A source hanging: the frozen NB member is Unknown (StatusTimeout).
		Truth: func(all, nodes []string) Truth {
			d := map[string]Set{nodes[0]: {Undecide, Blocked}}
			for _, o := range others(all, nodes) {
				d[o] = Set{Undecide, Blocked}
			}
			return Truth{Components: map[string]Set{"kube-ovn": {Unknown, Degraded}}, Drain: d}
		},
	},
	{
		Name: "linstor-offline", Targets: 1, Class: ClassSource,
		Apply: labFault("linstor-offline", ""), Repair: labFault("linstor-online", ""),
		// The controller lost the satellite; DRBD on it may still
		// replicate (OFFLINE is the controller's view, not the disk
		// state), so whether draining a node that shares a resource with
		// it is safe is not something the truth knows: not judged.
		Truth: func(all, _ []string) Truth {
			d := map[string]Set{}
			for _, o := range all {
				d[o] = Set{Safe, Blocked, Undecide}
			}
			return Truth{Components: map[string]Set{"linstor": {Degraded}}, Drain: d}
		},
	},
	{
		Name: "drbd-outdated", Targets: 1, Class: ClassSource, Short: true,
		// The node's replica of the resource it leads (pvc-lab-i on
		// node-i and node-i+1) goes Outdated: the other diskful replica
		// is the last UpToDate one, its node blocked.
		Apply: resourceFault("drbd-outdated"), Repair: resourceFault("drbd-uptodate"),
		Truth: lastCopyOnPartner,
	},
	{
		Name: "drbd-detached", Targets: 1, Class: ClassSource,
		// The disk of node-i's replica of pvc-lab-i detaches (on-io-error
		// detach: Diskless though diskful): the other diskful replica is
		// the only data copy, its node blocked; the detached node itself
		// drains safely (the copy stays, connected to the tie-breaker).
		Apply: resourceFault("drbd-detached"), Repair: resourceFault("drbd-attached"),
		Truth: lastCopyOnPartner,
	},
	{
		Name: "drbd-standalone", Targets: 1, Class: ClassSource,
		// node-i's replica of pvc-lab-i and its peers StandAlone toward
		// each other, both diskful replicas UpToDate: a split brain. No
		// single good copy: draining either side is blocked, and draining
		// the tie-breaker leaves no copy connected to a quorum.
		Apply: resourceFault("drbd-standalone"), Repair: resourceFault("drbd-connected"),
		Truth: func(all, nodes []string) Truth {
			d := map[string]Set{}
			for _, o := range all {
				d[o] = Set{Blocked}
			}
			return Truth{Components: map[string]Set{"linstor": {Degraded}}, Drain: d}
		},
	},
	{
		Name: "agent-stop", Targets: 1, Class: ClassSilent,
		Apply: labFault("agent-stop", ""), Repair: labFault("agent-start", ""),
		// The lab's kubelet keeps renewing the node's Lease.
		Truth: silentBecause(because(ReasonAgentSilent)),
	},
	{
		Name: "agent-kill", Targets: 1, Class: ClassSilent, Short: true,
		Apply: signalAgents(syscall.SIGKILL), Repair: labFault("agent-start", ""),
		Truth: silentBecause(because(ReasonAgentSilent)),
	},
	{
		Name: "node-silent", Targets: 1, Class: ClassSilent, Short: true,
		Apply: signalAgents(syscall.SIGSTOP), Repair: signalAgents(syscall.SIGCONT),
		Truth: silentBecause(because(ReasonAgentSilent)),
	},
	{
		// A third of the nodes partitioned from the aggregators at once:
		// each node's uplink relay (test/lab/relay.go) drops every byte
		// between its agent and the replicas, open connections and new
		// ones; healed, the connections that lived through it are closed
		// and the agents reconnect. The agents keep running and retrying
		// into the wall.
		Name: "third-partitioned", Targets: 0, Class: ClassSilent, Short: true,
		Apply: labFault("partition", ""), Repair: labFault("partition-heal", ""),
		// Only the agents' uplinks are cut: their kubelets renew their
		// Leases, and a third of the nodes is not many.
		Truth: silentBecause(because(ReasonAgentSilent)),
	},
	{
		// Every node partitioned from the aggregators at once: more than
		// 2 nodes and at least 55 % fell silent within one heartbeat
		// grace, one event on the observer's path (ManyNodesSilent), not
		// three dead nodes.
		Name: "all-partitioned", Targets: Nodes, Class: ClassSilent,
		Apply: labFault("partition", ""), Repair: labFault("partition-heal", ""),
		Truth: silentBecause(because(ReasonManyNodesSilent)),
	},
	{
		// A node that goes down: its agent stops and its kubelet stops
		// renewing its Lease (10 s in the lab): AgentSilent until the
		// Lease expires, then NodeUnreachable.
		Name: "node-down", Targets: 1, Class: ClassSilent,
		Apply: labFault("node-down", ""), Repair: labFault("node-up", ""),
		Truth: silentBecause(because(ReasonNodeUnreachable)),
	},
	{
		// Not in the short variant: in 2 of about 6 short runs the sampler
		// recorded no sample at all during this phase (truth "never", 0 s
		// off it), a runner defect not yet found; the full soak keeps it.
		Name: "leader-kill", Targets: -1, Class: ClassLeader,
		Apply: func(ctx context.Context, e *env, _ []string) error { return e.lab(ctx, "", "leader-kill", "") },
		Repair: func(ctx context.Context, e *env, _ []string) error {
			return e.lab(ctx, "", "aggregator-start", "")
		},
		Truth: func(_, _ []string) Truth { return Baseline },
	},
}

// resourceFault applies lab fault f to the resource the target leads.
func resourceFault(f string) func(context.Context, *env, []string) error {
	return func(ctx context.Context, e *env, n []string) error {
		return e.lab(ctx, n[0], f, resourceOf(n[0]))
	}
}

// lastCopyOnPartner is the truth while the target's replica of its
// resource is no good copy: the partner holds the only one (its drain
// blocked), linstor Degraded; the other nodes' drains are not judged.
func lastCopyOnPartner(all, nodes []string) Truth {
	d := map[string]Set{}
	for _, o := range others(all, nodes) {
		d[o] = Set{Safe, Blocked, Undecide}
	}
	d[partnerOf(all, nodes[0])] = Set{Blocked}
	return Truth{Components: map[string]Set{"linstor": {Degraded}}, Drain: d}
}

// resourceOf is the LINSTOR resource node-i leads in the lab (pvc-lab-i).
func resourceOf(node string) string {
	var i int
	_, _ = fmt.Sscanf(node, "node-%d", &i)
	return fmt.Sprintf("pvc-lab-%d", i)
}

// partnerOf is the node holding the other diskful replica of node's
// resource: the next node in the ring.
func partnerOf(all []string, node string) string {
	for i, n := range all {
		if n == node {
			return all[(i+1)%len(all)]
		}
	}
	return ""
}
