package rollup

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/aggregator/internal/quorum"
	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

var defaultCfg = Config{DefaultInterval: 5 * time.Second, FreshForMultiple: 6}

const (
	H = report.StatusHealthy
	G = report.StatusDegraded
	D = report.StatusDown
	U = report.StatusUnknown
)

// node builds one node's entry: received `ago` before t0, with
// observations, of a Node labelled control-plane (most test nodes host raft
// members); worker makes it a worker.
func node(name string, ago time.Duration, obs ...report.Observation) state.Entry {
	return state.Entry{
		Report:     &report.NodeReport{NodeName: name, AgentInstanceID: "i-" + name, Sequence: 1, SentAt: t0.Add(-ago), Interval: 5 * time.Second, Observations: obs},
		ReceivedAt: t0.Add(-ago),
		Role:       state.RoleControlPlane,
	}
}

// worker is e on a Node without the control-plane label.
func worker(e state.Entry) state.Entry {
	e.Role = state.RoleWorker
	return e
}

// memberAs is an etcd-member observation with status s and reason.
func memberAs(s report.Status, reason string) report.Observation {
	o := member(s, false)
	o.Reason = reason
	return o
}

// raftOf is the reader's view of every node of s at now.
func raftOf(s state.Snapshot, now time.Time, cfg Config) []quorum.Node {
	names := s.Names()
	claims := make([]*quorum.Claims, len(names))
	for i, n := range names {
		claims[i] = quorum.ClaimsOf(s[n].Report)
	}
	return raftNodes(names, claims, s, now, cfg)
}

func ob(comp, check string, s report.Status, reason string) report.Observation {
	return report.Observation{Component: comp, Check: check, Status: s, Reason: reason, Message: check + " is " + s.String()}
}

func member(s report.Status, learner bool) report.Observation {
	o := ob(report.ComponentEtcd, report.CheckEtcdMember, s, "Member"+s.String())
	l := 0.0
	if learner {
		l = 1
	}
	o.Attributes = map[string]float64{report.AttrIsLearner: l}
	return o
}

func membership(voting, learners int) report.Observation {
	o := ob(report.ComponentEtcd, report.CheckEtcdMembership, H, "MembersListed")
	o.Attributes = map[string]float64{report.AttrVotingMembers: float64(voting), report.AttrLearnerMembers: float64(learners)}
	return o
}

func drbd(res string, s report.Status, reason string) report.Observation {
	o := ob(report.ComponentLinstor, report.CheckDRBDResource, s, reason)
	o.ResourceRef = &report.ResourceRef{Kind: report.KindResource, Name: res}
	return o
}

// ovnMember is an ovn-central-member observation of database db with
// raftServers servers.
func ovnMember(db string, s report.Status, reason string, raftServers int) report.Observation {
	o := ob(report.ComponentKubeOVN, report.CheckOVNCentralMember, s, reason)
	o.ResourceRef = &report.ResourceRef{Kind: report.KindOVNDatabase, Name: db}
	if raftServers > 0 {
		o.Attributes = map[string]float64{report.AttrRaftServers: float64(raftServers)}
	}
	return o
}

const (
	nb = "OVN_Northbound"
	sb = "OVN_Southbound"
)

func snap(entries ...state.Entry) state.Snapshot {
	s := state.Snapshot{}
	for _, e := range entries {
		s[e.Report.NodeName] = e
	}
	return s
}

// etcdNodes builds n control-plane nodes a,b,c,... with the given member
// statuses; learners marks learner indexes; membership, when >= 0, is the
// voting count every fresh node reports.
func etcdNodes(statuses []report.Status, learners map[int]bool, stale map[int]bool, voting int) state.Snapshot {
	s := state.Snapshot{}
	for i, st := range statuses {
		name := fmt.Sprintf("cp-%d", i+1)
		obs := []report.Observation{member(st, learners[i])}
		if voting >= 0 {
			obs = append(obs, membership(voting, len(learners)))
		}
		ago := time.Second
		if stale[i] {
			ago = 20 * time.Second
		}
		e := node(name, ago, obs...)
		s[name] = e
	}
	return s
}

type goldenCase struct {
	name       string
	snap       state.Snapshot
	cfg        Config
	components []string // rendered; all when empty
	maxListed  int
}

func cases() []goldenCase {
	healthyNode := func(name string, ago time.Duration) state.Entry {
		return node(name, ago,
			member(H, false), membership(3, 0),
			ob(report.ComponentEtcd, report.CheckFsyncLatency, H, "LatencyOK"),
			ob(report.ComponentDisk, report.CheckFsyncProbe, H, "LatencyOK"),
			ob(report.ComponentCilium, report.CheckCiliumAgent, H, "AgentHealthy"),
			ob(report.ComponentKubeOVN, report.CheckKubeOVNPinger, H, "PingOK"),
			ovnMember(nb, H, "ClusterMember", 3), ovnMember(sb, H, "ClusterMember", 3),
			ob(report.ComponentLinstor, report.CheckLinstorSatellite, H, "Online"),
			ob(report.ComponentNode, report.CheckTalosServices, H, "ServicesRunning"),
		)
	}
	// ovnNode is a node of kube-ovn: its ovs-ovn, and its ovn-central
	// members of NB and SB (none when the status is zero).
	ovnNode := func(name string, ago time.Duration, nbs, sbs report.Status, nbReason string) state.Entry {
		obs := []report.Observation{ob(report.ComponentKubeOVN, report.CheckOVS, H, "Running")}
		if nbs != 0 {
			o := ovnMember(nb, nbs, nbReason, 3)
			if nbs == D {
				o.Attributes = nil // a member that does not run reports no servers
			}
			obs = append(obs, o)
		}
		if sbs != 0 {
			obs = append(obs, ovnMember(sb, sbs, "ClusterMember", 3))
		}
		return node(name, ago, obs...)
	}
	ciliumNode := func(name string, ago time.Duration, s report.Status, reason string) state.Entry {
		return node(name, ago, ob(report.ComponentCilium, report.CheckCiliumAgent, s, reason))
	}
	kubeOVNOnly := []string{report.ComponentKubeOVN}
	ciliumOnly := []string{report.ComponentCilium}
	etcdOnly := []string{report.ComponentEtcd}
	none := map[int]bool{}
	return []goldenCase{
		{name: "no-nodes", snap: snap()},
		{name: "all-healthy", snap: snap(healthyNode("a", time.Second), healthyNode("b", 2*time.Second), healthyNode("c", 3*time.Second))},
		{name: "precedence", components: []string{report.ComponentDisk, report.ComponentCilium, report.ComponentKubeOVN, report.ComponentLinstor, report.ComponentNode}, snap: snap(
			// disk: Healthy+Unknown -> Unknown; cilium: Degraded+Unknown -> Degraded;
			// kube-ovn: Down+Degraded+Unknown -> Down; linstor: Healthy only on a;
			// node: no talos-services at all -> Healthy by heartbeat alone.
			node("a", time.Second,
				ob(report.ComponentDisk, report.CheckFsyncProbe, H, "LatencyOK"),
				ob(report.ComponentCilium, report.CheckCiliumAgent, G, "EndpointsUnreachable"),
				ob(report.ComponentKubeOVN, report.CheckKubeOVNPinger, D, "PingFailed"),
				ob(report.ComponentLinstor, report.CheckLinstorSatellite, H, "Online")),
			node("b", time.Second,
				ob(report.ComponentDisk, report.CheckFsyncProbe, U, report.ReasonCheckTimeout),
				ob(report.ComponentCilium, report.CheckCiliumAgent, U, report.ReasonCheckFailed),
				ob(report.ComponentKubeOVN, report.CheckKubeOVNPinger, G, "PingSlow")),
			node("c", time.Second,
				ob(report.ComponentDisk, report.CheckFsyncProbe, H, "LatencyOK"),
				ob(report.ComponentDisk, report.CheckDiskstats, H, "LatencyOK"),
				ob(report.ComponentKubeOVN, report.CheckKubeOVNPinger, U, report.ReasonCheckPanicked)),
		)},
		{name: "node-worst-check-wins", components: []string{report.ComponentDisk}, snap: snap(
			node("a", time.Second, ob(report.ComponentDisk, report.CheckFsyncProbe, G, "Slow"), ob(report.ComponentDisk, report.CheckDiskstats, D, "DeviceErrors")),
			node("b", time.Second, ob(report.ComponentDisk, report.CheckFsyncProbe, U, report.ReasonCheckTimeout), ob(report.ComponentDisk, report.CheckDiskstats, H, "LatencyOK")),
		)},
		{name: "heartbeat-expiry", snap: snap(
			healthyNode("a", time.Second),
			healthyNode("b", 15*time.Second), // exactly at the grace: still fresh
			healthyNode("c", 15*time.Second+time.Millisecond),
		)},
		{name: "heartbeat-grace-flag", cfg: Config{HeartbeatGrace: 30 * time.Second, DefaultInterval: 5 * time.Second, FreshForMultiple: 6}, components: []string{report.ComponentDisk, report.ComponentNode}, snap: snap(
			healthyNode("a", 29*time.Second),
			healthyNode("b", 31*time.Second),
		)},
		// c is a Kubernetes Node whose agent never reported to this replica:
		// the node component lists it Unknown (no last report time), the
		// others do not know it; as an etcd member it is one voting member
		// on no reporting node.
		{name: "kubernetes-node-never-reported", snap: func() state.Snapshot {
			s := snap(healthyNode("a", time.Second), healthyNode("b", 2*time.Second))
			s["c"] = state.Entry{ReceivedAt: t0.Add(-time.Second)}
			return s
		}()},
		{name: "all-stale-is-nodata", snap: snap(healthyNode("a", time.Minute), healthyNode("b", time.Minute))},
		{name: "drbd-fold", components: []string{report.ComponentLinstor}, snap: snap(
			node("a", time.Second, drbd("pvc-1", H, "UpToDate"), drbd("pvc-2", G, "Outdated"), drbd("pvc-3", D, "Failed"), ob(report.ComponentLinstor, report.CheckLinstorSatellite, H, "Online")),
			node("b", time.Second, drbd("pvc-1", H, "UpToDate"), drbd("pvc-2", H, "Diskless")),
		)},
		{name: "etcd-other-check-degrades", components: etcdOnly, snap: snap(
			node("cp-1", time.Second, member(H, false), membership(3, 0), ob(report.ComponentEtcd, report.CheckFsyncLatency, D, "WALFsyncSlow")),
			node("cp-2", time.Second, member(H, false), membership(3, 0), ob(report.ComponentEtcd, report.CheckFsyncLatency, U, report.ReasonCheckTimeout)),
			node("cp-3", time.Second, member(H, false), membership(3, 0)),
		)},
		// The soak's false green: node-3's etcd metrics endpoint gone, its
		// fsync latency unknown; the quorum is intact, etcd is not Healthy.
		{name: "etcd-other-check-unknown", components: etcdOnly, snap: snap(
			node("cp-1", time.Second, member(H, false), membership(3, 0), ob(report.ComponentEtcd, report.CheckFsyncLatency, H, "WALFsyncFast")),
			node("cp-2", time.Second, member(H, false), membership(3, 0), ob(report.ComponentEtcd, report.CheckFsyncLatency, H, "WALFsyncFast")),
			node("cp-3", time.Second, member(H, false), membership(3, 0), ob(report.ComponentEtcd, report.CheckFsyncLatency, U, "MetricsEndpointUnreachable")),
		)},
		// Quorum with 1, 3 and 5 members, learners and Unknowns.
		{name: "quorum-1-healthy", components: etcdOnly, snap: etcdNodes([]report.Status{H}, none, none, 1)},
		{name: "quorum-1-down", components: etcdOnly, snap: etcdNodes([]report.Status{D}, none, none, 1)},
		{name: "quorum-1-unknown", components: etcdOnly, snap: etcdNodes([]report.Status{U}, none, none, 1)},
		{name: "quorum-1-learner-only", components: etcdOnly, snap: etcdNodes([]report.Status{H}, map[int]bool{0: true}, none, -1)},
		{name: "quorum-3-healthy", components: etcdOnly, snap: etcdNodes([]report.Status{H, H, H}, none, none, 3)},
		{name: "quorum-3-one-down", components: etcdOnly, snap: etcdNodes([]report.Status{H, H, D}, none, none, 3)},
		{name: "quorum-3-one-unknown", components: etcdOnly, snap: etcdNodes([]report.Status{H, U, H}, none, none, 3)},
		{name: "quorum-3-one-stale", components: etcdOnly, snap: etcdNodes([]report.Status{H, H, H}, none, map[int]bool{2: true}, 3)},
		{name: "quorum-3-two-down", components: etcdOnly, snap: etcdNodes([]report.Status{H, D, D}, none, none, 3)},
		{name: "quorum-3-learner-does-not-vote", components: etcdOnly, snap: etcdNodes([]report.Status{H, H, D, H}, map[int]bool{3: true}, none, 3)},
		{name: "quorum-3-learner-down-ignored", components: etcdOnly, snap: etcdNodes([]report.Status{H, H, H, D}, map[int]bool{3: true}, none, 3)},
		{name: "quorum-3-member-not-reporting", components: etcdOnly, snap: etcdNodes([]report.Status{H, H}, none, none, 3)},
		{name: "quorum-3-fallback-count", components: etcdOnly, snap: etcdNodes([]report.Status{H, H, U, H}, map[int]bool{3: true}, none, -1)},
		{name: "quorum-5-healthy", components: etcdOnly, snap: etcdNodes([]report.Status{H, H, H, H, H}, none, none, 5)},
		{name: "quorum-5-two-unknown", components: etcdOnly, snap: etcdNodes([]report.Status{H, U, H, U, H}, none, none, 5)},
		{name: "quorum-5-three-bad", components: etcdOnly, snap: etcdNodes([]report.Status{H, U, D, H, G}, none, none, 5)},
		{name: "quorum-5-learners-and-unknown", components: etcdOnly, snap: etcdNodes([]report.Status{H, H, U, H, H, D, D}, map[int]bool{3: true, 4: true}, map[int]bool{6: true}, 5)},
		// The issue's case: one member stopped, another node's agent
		// silent. The apiserver that accepts the write has quorum, so the
		// loss is not proven: Quorum Unknown (QuorumUndetermined), etcd
		// Degraded (a member is known bad), never Down.
		{name: "quorum-3-one-down-one-silent", components: etcdOnly, snap: etcdNodes([]report.Status{H, D, H}, none, map[int]bool{2: true}, 3)},
		{name: "quorum-3-two-silent", components: etcdOnly, snap: etcdNodes([]report.Status{H, H, H}, none, map[int]bool{1: true, 2: true}, 3)},
		{name: "quorum-3-loss-proven", components: etcdOnly, snap: etcdNodes([]report.Status{D, D, U}, none, none, 3)},
		// Issue 22 item 1: capacity is not failure. etcd's DB is
		// replicated, so every member crosses the near-quota line
		// together: all vote, etcd is Degraded with the members' reason.
		{name: "etcd-all-near-quota", components: etcdOnly, snap: snap(
			node("cp-1", time.Second, memberAs(G, "DBSizeNearQuota"), membership(3, 0)),
			node("cp-2", time.Second, memberAs(G, "DBSizeNearQuota"), membership(3, 0)),
			node("cp-3", time.Second, memberAs(G, "MemberErrors"), membership(3, 0)))},
		// A NOSPACE alarm is its own verdict: members under it still vote
		// (no QuorumLost), etcd refuses writes cluster-wide: Down.
		{name: "etcd-nospace", components: etcdOnly, snap: snap(
			node("cp-1", time.Second, memberAs(D, "AlarmNOSPACE"), membership(3, 0), ob(report.ComponentEtcd, report.CheckEtcdAlarms, D, "AlarmNOSPACE")),
			node("cp-2", time.Second, memberAs(D, "AlarmNOSPACE"), membership(3, 0), ob(report.ComponentEtcd, report.CheckEtcdAlarms, D, "AlarmNOSPACE")),
			node("cp-3", time.Second, memberAs(D, "AlarmNOSPACE"), membership(3, 0), ob(report.ComponentEtcd, report.CheckEtcdAlarms, D, "AlarmNOSPACE")))},
		// One member's alarms say NOSPACE, the two others none: no
		// majority, Degraded naming it, never Down.
		{name: "etcd-nospace-one-claim", components: etcdOnly, snap: snap(
			node("cp-1", time.Second, member(H, false), membership(3, 0), ob(report.ComponentEtcd, report.CheckEtcdAlarms, D, "AlarmNOSPACE")),
			node("cp-2", time.Second, member(H, false), membership(3, 0), ob(report.ComponentEtcd, report.CheckEtcdAlarms, H, "NoAlarms")),
			node("cp-3", time.Second, member(H, false), membership(3, 0), ob(report.ComponentEtcd, report.CheckEtcdAlarms, H, "NoAlarms")))},
		// A CORRUPT alarm on a member: that member is lost.
		{name: "etcd-corrupt-member", components: etcdOnly, snap: snap(
			node("cp-1", time.Second, member(H, false), membership(3, 0)),
			node("cp-2", time.Second, member(H, false), membership(3, 0)),
			node("cp-3", time.Second, memberAs(D, "AlarmCORRUPT"), membership(3, 0)))},
		// Issue 22 item 2: a control-plane node that reports but has no
		// etcd member observation (its etcd checks did not run) is an
		// unknown voting member, named; with no size reported it counts.
		{name: "etcd-control-plane-without-member", components: etcdOnly, snap: snap(
			node("cp-1", time.Second, member(H, false)),
			node("cp-2", time.Second, member(H, false)),
			node("cp-3", time.Second, ob(report.ComponentNode, report.CheckTalosServices, H, "ServicesRunning")))},
		// Talos patch not applied: every control-plane agent's etcd checks
		// read Unknown (no talosconfig): etcd Unknown, never Healthy.
		{name: "etcd-talos-unpatched", components: etcdOnly, snap: snap(
			node("cp-1", time.Second, memberAs(U, report.ReasonInputMissing)),
			node("cp-2", time.Second, memberAs(U, report.ReasonInputMissing)),
			node("cp-3", time.Second, memberAs(U, report.ReasonInputMissing)))},
		// Issue 22 item 6: NB/SB membership grew to 4 servers with no status
		// change: 3/4, QuorumAtRisk (the cache must see it too:
		// TestCacheSeesEveryQuorumFact).
		{name: "ovn-central-membership-grew", components: kubeOVNOnly, snap: snap(
			node("a", time.Second, ovnMember(nb, H, "ClusterMember", 4), ovnMember(sb, H, "ClusterMember", 4)),
			node("b", time.Second, ovnMember(nb, H, "ClusterMember", 4), ovnMember(sb, H, "ClusterMember", 4)),
			node("c", time.Second, ovnMember(nb, H, "ClusterMember", 4), ovnMember(sb, H, "ClusterMember", 4)))},
		// Issue 27 item 1, adversarial: a compromised worker's reports
		// beside honest ones (TestAdversarial holds the table).
		{name: "adversarial-worker-fakes-lost-etcd", components: etcdOnly, snap: snap(
			node("cp-1", time.Second, member(H, false), membership(3, 0)),
			node("cp-2", time.Second, member(H, false), membership(3, 0)),
			node("cp-3", time.Second, member(H, false), membership(3, 0)),
			worker(node("w", time.Second, member(D, false), member(D, false), member(D, false), member(D, false), membership(7, 0),
				ob(report.ComponentEtcd, report.CheckEtcdAlarms, D, "AlarmNOSPACE"))))},
		{name: "adversarial-worker-fakes-healthy-etcd", components: etcdOnly, snap: snap(
			node("cp-1", time.Second, member(H, false), membership(3, 0)),
			node("cp-2", time.Second, member(D, false), membership(3, 0)),
			node("cp-3", time.Second, member(D, false), membership(3, 0)),
			worker(node("w", time.Second, member(H, false), member(H, false), membership(3, 0))))},
		{name: "adversarial-control-plane-two-members", components: etcdOnly, snap: snap(
			node("cp-1", time.Second, member(H, false), membership(3, 0)),
			node("cp-2", time.Second, member(D, false), membership(3, 0)),
			node("cp-3", time.Second, member(D, false), member(H, false), membership(3, 0)))},
		{name: "adversarial-control-plane-inflates-size", components: etcdOnly, snap: snap(
			node("cp-1", time.Second, member(H, false), membership(3, 0)),
			node("cp-2", time.Second, member(H, false), membership(3, 0)),
			node("cp-3", time.Second, member(H, false), membership(9, 0)))},
		{name: "adversarial-size-disputed", components: etcdOnly, snap: snap(
			node("cp-1", time.Second, member(H, false), membership(3, 0)),
			node("cp-2", time.Second, member(D, false), membership(9, 0)),
			node("cp-3", 20*time.Second, member(H, false), membership(3, 0)))},
		// Issue 34 item 6: a control-plane node (two of five) claims a
		// smaller cluster while the other members are Down or silent and
		// claim no size: the count is never below the members listed.
		{name: "adversarial-control-plane-shrinks-size-others-down", components: etcdOnly, snap: snap(
			node("cp-1", time.Second, member(H, false), membership(1, 0)),
			node("cp-2", time.Second, member(D, false)),
			node("cp-3", time.Second, member(D, false)))},
		{name: "adversarial-control-plane-shrinks-size-others-silent", components: etcdOnly, snap: snap(
			node("cp-1", time.Second, member(H, false), membership(1, 0)),
			node("cp-2", 20*time.Second, member(H, false), membership(3, 0)),
			node("cp-3", 20*time.Second, member(H, false), membership(3, 0)))},
		{name: "adversarial-two-control-planes-shrink-size", components: etcdOnly, snap: snap(
			node("cp-1", time.Second, member(H, false), membership(2, 0)),
			node("cp-2", time.Second, member(H, false), membership(2, 0)),
			node("cp-3", time.Second, member(D, false)),
			node("cp-4", time.Second, member(D, false)),
			node("cp-5", time.Second, member(D, false)))},
		{name: "adversarial-control-plane-shrinks-ovn", components: kubeOVNOnly, snap: snap(
			node("a", time.Second, ob(report.ComponentKubeOVN, report.CheckOVS, H, "Running"),
				ovnMember(nb, H, "ClusterMember", 1), ovnMember(sb, H, "ClusterMember", 3)),
			node("b", time.Second, ob(report.ComponentKubeOVN, report.CheckOVS, H, "Running"),
				ovnMember(nb, D, "MemberNotRunning", 0), ovnMember(sb, H, "ClusterMember", 3)),
			node("c", time.Second, ob(report.ComponentKubeOVN, report.CheckOVS, H, "Running"),
				ovnMember(nb, D, "MemberNotRunning", 0), ovnMember(sb, H, "ClusterMember", 3)))},
		{name: "adversarial-worker-fakes-ovn", components: kubeOVNOnly, snap: snap(
			ovnNode("a", time.Second, H, H, "ClusterMember"), ovnNode("b", time.Second, D, D, "MemberNotRunning"),
			ovnNode("c", time.Second, D, D, "MemberNotRunning"),
			worker(node("w", time.Second, ovnMember(nb, H, "ClusterMember", 3), ovnMember(nb, H, "ClusterMember", 3), ovnMember(sb, H, "ClusterMember", 3))))},
		// ovn-central: NB and SB raft clusters of 3 on a, b, c; d runs
		// ovs-ovn only.
		{name: "ovn-central-healthy", components: kubeOVNOnly, snap: snap(
			ovnNode("a", time.Second, H, H, "ClusterMember"), ovnNode("b", time.Second, H, H, "ClusterMember"),
			ovnNode("c", time.Second, H, H, "ClusterMember"), ovnNode("d", time.Second, 0, 0, ""))},
		{name: "ovn-central-member-lost", components: kubeOVNOnly, snap: snap(
			ovnNode("a", time.Second, H, H, "ClusterMember"), ovnNode("b", time.Second, H, H, "ClusterMember"),
			ovnNode("c", time.Second, D, H, "MemberNotRunning"), ovnNode("d", time.Second, 0, 0, ""))},
		{name: "ovn-central-nb-without-quorum", components: kubeOVNOnly, snap: snap(
			ovnNode("a", time.Second, D, H, "NoLeader"), ovnNode("b", time.Second, D, H, "MemberNotRunning"),
			ovnNode("c", time.Second, D, H, "MemberNotRunning"), ovnNode("d", time.Second, 0, 0, ""))},
		{name: "ovn-central-member-down-one-silent", components: kubeOVNOnly, snap: snap(
			ovnNode("a", time.Second, H, H, "ClusterMember"), ovnNode("b", time.Second, D, H, "MemberNotRunning"),
			ovnNode("c", 20*time.Second, H, H, "ClusterMember"), ovnNode("d", time.Second, 0, 0, ""))},
		{name: "ovn-central-no-member-reported", components: kubeOVNOnly, snap: snap(
			ovnNode("a", time.Second, 0, 0, ""), ovnNode("b", time.Second, 0, 0, ""))},
		// Node-local: one node's failure is that node's; Down for the
		// cluster only when every node is.
		{name: "node-local-one-node-down", components: ciliumOnly, snap: snap(
			ciliumNode("a", time.Second, D, "AgentUnreachable"), ciliumNode("b", time.Second, H, "AgentHealthy"), ciliumNode("c", time.Second, H, "AgentHealthy"))},
		{name: "node-local-all-nodes-down", components: ciliumOnly, snap: snap(
			ciliumNode("a", time.Second, D, "AgentUnreachable"), ciliumNode("b", time.Second, D, "AgentUnreachable"), ciliumNode("c", time.Second, D, "AgentUnreachable"))},
		{name: "node-local-down-and-silent", components: ciliumOnly, snap: snap(
			ciliumNode("a", time.Second, D, "AgentUnreachable"), ciliumNode("b", time.Second, D, "AgentUnreachable"), ciliumNode("c", 20*time.Second, H, "AgentHealthy"))},
		{name: "node-local-unknown-only", components: ciliumOnly, snap: snap(
			ciliumNode("a", time.Second, U, report.ReasonCheckTimeout), ciliumNode("b", time.Second, H, "AgentHealthy"), ciliumNode("c", 20*time.Second, H, "AgentHealthy"))},
		{name: "compaction-cap", components: []string{report.ComponentDisk}, maxListed: 3, snap: func() state.Snapshot {
			s := state.Snapshot{}
			for i := range 8 {
				st := H
				if i%2 == 1 {
					st = G
				}
				if i == 6 {
					st = U
				}
				n := node(fmt.Sprintf("n%02d", i), time.Second, ob(report.ComponentDisk, report.CheckFsyncProbe, st, "Probe"+st.String()))
				s[n.Report.NodeName] = n
			}
			return s
		}()},
	}
}

func render(out map[string]*status.Component, components []string) string {
	if len(components) == 0 {
		components = report.NodeComponents
	}
	var b strings.Builder
	ts := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	for _, comp := range components {
		cs := out[comp]
		fmt.Fprintf(&b, "component %s: overall=%s reason=%s observedAt=%s freshUntil=%s issues=%d degradedNodes=%q\n",
			cs.Component, cs.Overall, cs.Reason, ts(cs.ObservedAt), ts(cs.FreshUntil), cs.Issues, strings.Join(cs.DegradedNodes, ","))
		names := make([]string, 0, len(cs.Nodes))
		for n := range cs.Nodes {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			ns := cs.Nodes[n]
			fmt.Fprintf(&b, "  node %s: %s reason=%s lastReportAt=%s message=%q\n", n, ns.Status, ns.Reason, ts(ns.LastReportAt), ns.Message)
		}
		for _, c := range cs.Conditions {
			ref := "-"
			if c.Node != "" {
				ref = "Node/" + c.Node
			}
			if c.Resource != nil {
				ref = c.Resource.Kind + "/" + c.Resource.Name
				if c.Node != "" {
					ref += " (on Node/" + c.Node + ")"
				}
			}
			fmt.Fprintf(&b, "  condition %s=%s (%s) ref=%s reason=%s message=%q\n", c.Type, c.ConditionStatus(), c.Severity, ref, c.Reason, c.Message)
		}
	}
	return b.String()
}

func TestGolden(t *testing.T) {
	for _, tc := range cases() {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			if cfg.DefaultInterval == 0 {
				cfg = defaultCfg
			}
			max := tc.maxListed
			if max == 0 {
				max = DefaultMaxListed
			}
			out := Compute(tc.snap, t0, cfg)
			for _, cs := range out {
				Compact(cs, max)
			}
			got := render(out, tc.components)
			path := filepath.Join("testdata", tc.name+".golden")
			if *update {
				require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
				return
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run go test ./aggregator/internal/rollup -update")
			assert.Equal(t, string(want), got)
		})
	}
}

// TestComputeIsPure checks that the same inputs give the same output and
// that the snapshot is not modified.
func TestComputeIsPure(t *testing.T) {
	for _, tc := range cases() {
		a := render(Compute(tc.snap, t0, defaultCfg), nil)
		b := render(Compute(tc.snap, t0, defaultCfg), nil)
		assert.Equal(t, a, b, tc.name)
	}
}

// TestContractInvariants checks the contract's rules on every golden case,
// independently of the golden files.
func TestContractInvariants(t *testing.T) {
	for _, tc := range cases() {
		out := Compute(tc.snap, t0, defaultCfg)
		for comp, cs := range out {
			fresh := 0
			for _, e := range tc.snap {
				if !defaultCfg.Stale(e, t0) && (len(observationsOf(e.Report, comp)) > 0 || comp == report.ComponentNode) {
					fresh++
				}
			}
			if fresh == 0 {
				assert.Equal(t, U, cs.Overall, "%s/%s: no fresh data must be Unknown", tc.name, comp)
				assert.Equal(t, report.ReasonNoData, cs.Reason, "%s/%s", tc.name, comp)
			}
			for name, ns := range cs.Nodes {
				if defaultCfg.Stale(tc.snap[name], t0) {
					assert.Equal(t, U, ns.Status, "%s/%s/%s", tc.name, comp, name)
					assert.Equal(t, report.ReasonHeartbeatMissed, ns.Reason)
					if tc.snap[name].Report == nil {
						assert.Zero(t, ns.LastReportAt, "%s/%s/%s: never heard", tc.name, comp, name)
					} else {
						assert.Equal(t, tc.snap[name].ReceivedAt, ns.LastReportAt)
					}
				}
			}
			if comp != report.ComponentEtcd && fresh > 0 {
				checkNodesProjection(t, tc.name+"/"+comp, cs)
			}
			for _, c := range cs.Conditions {
				if c.Type != TypeQuorum && c.Type != TypeData {
					assert.NotEmpty(t, c.Node, "%s/%s: node-level condition %s must be pinned to its node", tc.name, comp, c.Type)
				}
			}
		}
	}
}

// checkNodesProjection: a node-local component is Down only when every
// node is Down or a rule of its own (a Quorum condition) is Down; a node
// Down or Degraded makes it at least Degraded; Unknown nodes alone make it
// Unknown, never Degraded or Down; Healthy needs every node Healthy.
func checkNodesProjection(t *testing.T, what string, cs *status.Component) {
	t.Helper()
	var down, bad, unknown int
	for _, ns := range cs.Nodes {
		switch ns.Status {
		case D:
			down++
		case G:
			bad++
		case U:
			unknown++
		}
	}
	rule := H
	for _, c := range cs.Conditions {
		if c.Type == TypeQuorum {
			rule = report.Worse(rule, c.Severity)
		}
	}
	if cs.Overall == D {
		assert.True(t, (down > 0 && down == len(cs.Nodes)) || rule == D, "%s: Down needs every node Down or its own rule Down", what)
	}
	if down+bad > 0 {
		assert.GreaterOrEqual(t, cs.Overall.Rank(), G.Rank(), "%s: a node Down or Degraded makes the component at least Degraded", what)
	}
	if down+bad == 0 && rule.Rank() < G.Rank() {
		assert.LessOrEqual(t, cs.Overall.Rank(), U.Rank(), "%s: Unknown nodes alone never make it Degraded or Down", what)
		if unknown > 0 {
			assert.Equal(t, U, cs.Overall, "%s", what)
		}
	}
	if cs.Overall == H {
		assert.Zero(t, down+bad+unknown, "%s: Healthy needs every node Healthy", what)
	}
}

func TestConditionType(t *testing.T) {
	for in, want := range map[string]string{
		report.CheckFsyncLatency:     "FsyncLatency",
		report.CheckKubeOVNPinger:    "KubeOvnPinger",
		report.CheckDRBDResource:     "DrbdResource",
		report.CheckEtcdMember:       "EtcdMember",
		report.CheckLinstorSatellite: "LinstorSatellite",
		"already_Camel.case":         "AlreadyCamelCase",
		"42-things":                  "Check42Things",
		"":                           "Check",
	} {
		assert.Equal(t, want, ConditionType(in), in)
	}
}

func TestQuorumTable(t *testing.T) {
	// The projection alone, as a table: V voting members, statuses of the
	// members that report.
	for _, tc := range []struct {
		statuses []report.Status
		learners map[int]bool
		voting   int
		want     report.Status
	}{
		{[]report.Status{H}, nil, 1, H},
		{[]report.Status{U}, nil, 1, U},
		{[]report.Status{D}, nil, 1, D},
		{[]report.Status{H, H, H}, nil, 3, H},
		{[]report.Status{H, H, U}, nil, 3, G},
		{[]report.Status{H, U, U}, nil, 3, U}, // undetermined, nobody known bad
		{[]report.Status{H, H, G}, nil, 3, G},
		{[]report.Status{G, G, G}, nil, 3, G}, // all vote but warn (near quota): Degraded, never Down
		{[]report.Status{H, D, G}, nil, 3, G}, // a warning member votes: 2 of 3
		{[]report.Status{H, D, U}, nil, 3, G}, // undetermined, one known bad: never a false red
		{[]report.Status{D, U, U}, nil, 3, G},
		{[]report.Status{H, D, D}, nil, 3, D}, // loss proven
		{[]report.Status{D, D, U}, nil, 3, D},
		{[]report.Status{H, H, H, U}, map[int]bool{3: true}, 3, H},
		{[]report.Status{H, H, U, H}, map[int]bool{3: true}, 3, G},
		{[]report.Status{H, H, H, H, H}, nil, 5, H},
		{[]report.Status{H, H, H, U, D}, nil, 5, G},
		{[]report.Status{H, H, U, U, D}, nil, 5, G},
		{[]report.Status{H, H, D, D, D}, nil, 5, D},
		{[]report.Status{H, H, H, H, H, H}, map[int]bool{3: true, 4: true}, 5, G},
		{[]report.Status{H, H, H, H}, nil, 5, G}, // one voting member reports nothing
		{[]report.Status{H, D}, nil, 5, G},       // three on no reporting node: undetermined, one known bad
		{[]report.Status{D, D, D}, nil, 5, D},    // two on no reporting node cannot make three
	} {
		s := etcdNodes(tc.statuses, tc.learners, nil, tc.voting)
		q, _, conds := etcdQuorum(raftOf(s, t0, defaultCfg), nil)
		assert.Equal(t, tc.want, q, "%v learners=%v V=%d: %s", tc.statuses, tc.learners, tc.voting, conds[0].Message)
	}
}

func observationsOf(r *report.NodeReport, comp string) []report.Observation {
	var out []report.Observation
	for _, o := range r.Observations {
		if o.Component == comp {
			out = append(out, o)
		}
	}
	return out
}

// TestComputeCachedEqualsCompute: the memo changes nothing, through a
// sequence where reports change, nodes go stale and nodes leave.
func TestComputeCachedEqualsCompute(t *testing.T) {
	cache := NewCache()
	all := cases()
	for i, tc := range all {
		now := t0.Add(time.Duration(i) * time.Second)
		want := render(Compute(tc.snap, now, defaultCfg), nil)
		got := render(ComputeCached(tc.snap, now, defaultCfg, cache), nil)
		assert.Equal(t, want, got, tc.name)
		// Same snapshot again, later: served from the memo.
		later := now.Add(20 * time.Second)
		assert.Equal(t, render(Compute(tc.snap, later, defaultCfg), nil), render(ComputeCached(tc.snap, later, defaultCfg, cache), nil), tc.name)
		assert.Len(t, cache.byNode, len(tc.snap), "the memo holds only the snapshot's nodes")
	}
}

// TestSameJudgement: what a report may change without changing the
// rollup (the numbers in healthy messages, attributes nobody judges), and
// what it may not. Where two reports judge the same, they fold into the
// same facts.
func TestSameJudgement(t *testing.T) {
	base := func() *report.NodeReport {
		return node("cp-1", time.Second,
			member(H, false), membership(3, 0),
			drbd("pvc-1", H, "UpToDate"), drbd("pvc-2", G, "Outdated"),
			ob(report.ComponentDisk, report.CheckFsyncProbe, H, "LatencyOK"),
		).Report
	}
	for _, tc := range []struct {
		name   string
		change func(r *report.NodeReport)
		same   bool
	}{
		{"nothing", func(*report.NodeReport) {}, true},
		{"healthy message", func(r *report.NodeReport) { r.Observations[4].Message = "fdatasync p99 2.7ms" }, true},
		{"unjudged attribute", func(r *report.NodeReport) { r.Observations[1].Attributes[report.AttrLearnerMembers] = 2 }, true},
		{"sequence and times", func(r *report.NodeReport) { r.Sequence, r.SentAt = 9, r.SentAt.Add(time.Minute) }, true},
		{"status", func(r *report.NodeReport) { r.Observations[4].Status = G }, false},
		{"reason", func(r *report.NodeReport) { r.Observations[4].Reason = "LatencyHigh" }, false},
		{"message of a non-healthy one", func(r *report.NodeReport) { r.Observations[3].Message = "now Inconsistent" }, false},
		{"resource", func(r *report.NodeReport) {
			r.Observations[3].ResourceRef = &report.ResourceRef{Kind: report.KindResource, Name: "pvc-9"}
		}, false},
		{"learner", func(r *report.NodeReport) { r.Observations[0].Attributes[report.AttrIsLearner] = 1 }, false},
		{"voting members", func(r *report.NodeReport) { r.Observations[1].Attributes[report.AttrVotingMembers] = 5 }, false},
		{"voting members gone", func(r *report.NodeReport) { delete(r.Observations[1].Attributes, report.AttrVotingMembers) }, false},
		{"one observation fewer", func(r *report.NodeReport) { r.Observations = r.Observations[:4] }, false},
		{"order", func(r *report.NodeReport) {
			r.Observations[2], r.Observations[3] = r.Observations[3], r.Observations[2]
		}, false},
	} {
		a, b := base(), base()
		tc.change(b)
		assert.Equal(t, tc.same, sameJudgement(a, b), tc.name)
		if tc.same {
			assert.Equal(t, factsOf("cp-1", a).comps, factsOf("cp-1", b).comps, "%s: same judgement, same facts", tc.name)
		}
	}
}

func TestNextStale(t *testing.T) {
	s := snap(node("a", time.Second), node("b", 14*time.Second), node("c", 20*time.Second))
	assert.Equal(t, t0.Add(time.Second+time.Nanosecond), defaultCfg.NextStale(s, t0), "b, heard 14 s ago, is the next past its 15 s grace")
	assert.True(t, defaultCfg.Stale(s["b"], defaultCfg.NextStale(s, t0)))
	assert.False(t, defaultCfg.Stale(s["b"], defaultCfg.NextStale(s, t0).Add(-time.Nanosecond)))
	assert.True(t, defaultCfg.NextStale(snap(node("c", 20*time.Second)), t0).IsZero(), "no fresh node, no deadline")
}

// TestCacheSeesEveryQuorumFact: a fact the quorum rule reads changes while
// every status stays the same (issue 22 item 6: ovn-central's raftServers
// 3 -> 4; etcd's votingMembers; a learner flag; the Node's role): the
// cache's fast path must not retime the old answer. Before the cache
// compared the reader's claims, raftServers was not compared and the
// rollup kept Quorum Healthy 3/3.
func TestCacheSeesEveryQuorumFact(t *testing.T) {
	ovnOf := func(servers int) state.Snapshot {
		return snap(
			node("a", time.Second, ovnMember(nb, H, "ClusterMember", servers), ovnMember(sb, H, "ClusterMember", servers)),
			node("b", time.Second, ovnMember(nb, H, "ClusterMember", servers), ovnMember(sb, H, "ClusterMember", servers)),
			node("c", time.Second, ovnMember(nb, H, "ClusterMember", servers), ovnMember(sb, H, "ClusterMember", servers)))
	}
	etcdOf := func(voting int, learner bool, role state.Role) state.Snapshot {
		s := etcdNodes([]report.Status{H, H, H}, map[int]bool{2: learner}, nil, voting)
		e := s["cp-3"]
		e.Role = role
		s["cp-3"] = e
		return s
	}
	for _, tc := range []struct {
		name        string
		before, now state.Snapshot
	}{
		{"ovn raftServers 3 -> 4", ovnOf(3), ovnOf(4)},
		{"etcd votingMembers 3 -> 5", etcdOf(3, false, state.RoleControlPlane), etcdOf(5, false, state.RoleControlPlane)},
		{"etcd learner", etcdOf(3, false, state.RoleControlPlane), etcdOf(3, true, state.RoleControlPlane)},
		{"control-plane label removed", etcdOf(3, false, state.RoleControlPlane), etcdOf(3, false, state.RoleWorker)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := NewCache()
			ComputeCached(tc.before, t0, defaultCfg, cache)
			_, unchanged := cache.Unchanged(tc.now, t0, defaultCfg)
			assert.False(t, unchanged, "a fact the quorum rule reads changed: the cache must recompute")
			assert.Equal(t, render(Compute(tc.now, t0, defaultCfg), nil), render(ComputeCached(tc.now, t0, defaultCfg, cache), nil))
		})
	}
}

// TestAdversarial is issue 27's table: a compromised node's reports beside
// honest ones. A worker's claims about etcd and ovn-central are not
// believed at all (the result equals the honest nodes' alone); a
// control-plane node's lies about the cluster (a second member, a larger
// size) cannot make the component greener than the honest facts, nor turn
// a healthy cluster Down. Every rejected claim is handed to the auditor.
func TestAdversarial(t *testing.T) {
	byName := map[string]goldenCase{}
	for _, tc := range cases() {
		byName[tc.name] = tc
	}
	for _, tc := range []struct {
		golden    string
		comp      string
		adversary string // comma-separated when several collude
		worker    bool
		want      report.Status
		reason    string
		rejected  []string // kind/reason
	}{
		{"adversarial-worker-fakes-lost-etcd", report.ComponentEtcd, "w", true, H, ReasonQuorumHealthy,
			[]string{"etcd-member/not_control_plane", "etcd-membership/not_control_plane", "etcd-alarms/not_control_plane"}},
		{"adversarial-worker-fakes-healthy-etcd", report.ComponentEtcd, "w", true, D, ReasonQuorumLost,
			[]string{"etcd-member/not_control_plane", "etcd-membership/not_control_plane"}},
		{"adversarial-worker-fakes-ovn", report.ComponentKubeOVN, "w", true, D, ReasonQuorumLost,
			[]string{"ovn-central-member/not_control_plane", "ovn-central-member/not_control_plane"}}, // NB and SB
		{"adversarial-control-plane-two-members", report.ComponentEtcd, "cp-3", false, G, ReasonQuorumUndetermined,
			[]string{"etcd-member/duplicate_member"}},
		{"adversarial-control-plane-inflates-size", report.ComponentEtcd, "cp-3", false, H, ReasonQuorumHealthy, nil},
		{"adversarial-size-disputed", report.ComponentEtcd, "cp-2", false, G, ReasonQuorumUndetermined, nil},
		// Issue 34 item 6: a smaller size than the members listed is
		// rejected; the members listed are the count.
		{"adversarial-control-plane-shrinks-size-others-down", report.ComponentEtcd, "cp-1", false, D, ReasonQuorumLost,
			[]string{"etcd-membership/below_members_seen"}},
		{"adversarial-control-plane-shrinks-size-others-silent", report.ComponentEtcd, "cp-1", false, U, ReasonQuorumUndetermined,
			[]string{"etcd-membership/below_members_seen"}},
		{"adversarial-two-control-planes-shrink-size", report.ComponentEtcd, "cp-1,cp-2", false, D, ReasonQuorumLost,
			[]string{"etcd-membership/below_members_seen", "etcd-membership/below_members_seen"}},
		{"adversarial-control-plane-shrinks-ovn", report.ComponentKubeOVN, "a", false, D, ReasonQuorumLost,
			[]string{"ovn-central-member/below_members_seen"}},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			s := byName[tc.golden].snap
			require.NotNil(t, s, "golden case %s", tc.golden)
			cache := NewCache()
			var got []string
			cache.SetRejected(func(r quorum.Rejection, _ string) {
				assert.Contains(t, strings.Split(tc.adversary, ","), r.Node)
				got = append(got, r.Kind+"/"+r.Reason)
			})
			out := ComputeCached(s, t0, defaultCfg, cache)[tc.comp]
			assert.Equal(t, tc.want, out.Overall)
			assert.Equal(t, tc.reason, out.Reason)
			assert.ElementsMatch(t, tc.rejected, got)
			if tc.worker {
				honest := state.Snapshot{}
				for n, e := range s {
					if n != tc.adversary {
						honest[n] = e
					}
				}
				h := Compute(honest, t0, defaultCfg)[tc.comp]
				assert.Equal(t, h.Overall, out.Overall, "a worker's claims change nothing")
				assert.Equal(t, h.Reason, out.Reason)
			}
		})
	}
}
