package report

// The observation vocabulary shared by the agent (which produces it), the
// aggregator's rollup (which judges it) and the drain rules (which project
// it). Check names are kebab-case; the Health writer turns a check name into
// a condition type by CamelCasing it (fsync-latency -> FsyncLatency).
//
// Every node-local observation that is about the node itself carries
// ResourceRef{Kind: "Node", Name: <node>}; observations about another
// resource (a LINSTOR resource, a block device) carry that resource instead.
const (
	// CheckEtcdMember (component etcd): the local etcd member as Talos and
	// etcd see it (ServiceList "etcd" state and health, EtcdStatus of the
	// local member, alarms). Healthy when the member runs, is healthy, knows
	// a leader and has no alarm. Not sent on nodes that are not control-plane
	// nodes. Attributes: AttrMemberID, AttrIsLearner, AttrIsLeader,
	// AttrDBSizeBytes, AttrDBQuotaBytes, AttrDBQuotaFromEtcd, AttrRaftIndex,
	// AttrRaftTerm. Down when the member cannot vote (no leader, service not
	// running or unhealthy) or carries an alarm (AlarmNOSPACE); Degraded
	// when it votes but warns (DBSizeNearQuota, MemberErrors).
	CheckEtcdMember = "etcd-member"
	// CheckEtcdMembership (component etcd): the member list as this node's
	// member sees it. Attributes: AttrVotingMembers, AttrLearnerMembers.
	CheckEtcdMembership = "etcd-membership"
	// CheckEtcdAlarms (component etcd): EtcdAlarmList (NOSPACE, CORRUPT).
	CheckEtcdAlarms = "etcd-alarms"
	// CheckFsyncLatency (component etcd): p99 of etcd's WAL fsync and backend
	// commit histograms between scrapes. Attributes: AttrWALFsyncP99Seconds,
	// AttrBackendCommitP99Seconds.
	CheckFsyncLatency = "fsync-latency"
	// CheckTalosServices (component node): Talos ServiceList (etcd, kubelet,
	// cri) states and health.
	CheckTalosServices = "talos-services"
	// CheckFsyncProbe (component disk): the agent's own write+fdatasync probe.
	// Attributes: AttrFsyncP99Seconds.
	CheckFsyncProbe = "fsync-probe"
	// CheckDiskstats (component disk): per-device latency from
	// /proc/diskstats; ResourceRef{Kind: "BlockDevice", Name: "sda"}.
	CheckDiskstats = "diskstats"
	// CheckCiliumAgent (component cilium): the Cilium agent's own verdict,
	// GET /v1/healthz on /var/run/cilium/cilium.sock (what `cilium status`
	// prints as "Cilium: Ok", with its subsystems). Not Cilium's
	// cilium-health, the node-to-node prober: that is
	// CheckCiliumNodeConnectivity. Agents of 0.1.0 sent it as
	// "cilium-health" (see RenamedChecks).
	CheckCiliumAgent = "cilium-agent"
	// CheckKubeOVNPinger (component kube-ovn): the pinger's metrics.
	CheckKubeOVNPinger = "kube-ovn-pinger"
	// CheckLinstorSatellite (component linstor): this node's satellite as the
	// LINSTOR controller sees it (ONLINE or not).
	CheckLinstorSatellite = "linstor-satellite"
	// CheckDRBDResource (component linstor): one observation per resource on
	// this node, Healthy when UpToDate or Diskless, with
	// ResourceRef{Kind: "Resource", Name: <resource>}. Attributes:
	// AttrUpToDate, AttrDiskless, AttrReplicas (replicas of the resource in
	// the cluster, diskful and diskless), AttrUpToDateReplicas (as LINSTOR
	// sees them cluster-wide).
	CheckDRBDResource = "drbd-resource"
)

// RenamedChecks maps a check name an older agent may still send to the
// name it has now. The aggregator reads every report through CurrentCheck
// (pkg/wire), so during a rolling upgrade old and new agents' observations
// of one check land in one condition, one metric series and one alert
// label, instead of two conditions each counting part of the nodes. An
// entry goes when no supported agent sends the old name.
var RenamedChecks = map[string]string{
	// In 0.1.0 the Cilium agent's /v1/healthz was sent as "cilium-health",
	// the name of Cilium's node-to-node prober (CheckCiliumNodeConnectivity
	// reads that one); same source, same reasons, renamed only.
	"cilium-health": CheckCiliumAgent,
}

// CurrentCheck is the name check has now: itself, or its new name when an
// older agent sent it under a name it has since lost (RenamedChecks).
func CurrentCheck(check string) string {
	if n, ok := RenamedChecks[check]; ok {
		return n
	}
	return check
}

// Attribute names.
const (
	AttrMemberID                = "memberId"
	AttrIsLearner               = "isLearner"
	AttrIsLeader                = "isLeader"
	AttrDBSizeBytes             = "dbSizeBytes"
	AttrDBQuotaBytes            = "dbQuotaBytes"
	AttrRaftIndex               = "raftIndex"
	AttrRaftTerm                = "raftTerm"
	AttrVotingMembers           = "votingMembers"
	AttrLearnerMembers          = "learnerMembers"
	AttrWALFsyncP99Seconds      = "walFsyncP99Seconds"
	AttrBackendCommitP99Seconds = "backendCommitP99Seconds"
	AttrFsyncP99Seconds         = "fsyncP99Seconds"
	AttrUpToDate                = "upToDate"
	AttrDiskless                = "diskless"
	AttrReplicas                = "replicas"
	AttrUpToDateReplicas        = "upToDateReplicas"
)

// Resource kinds used in ResourceRef.
const (
	KindNode        = "Node"
	KindResource    = "Resource"
	KindBlockDevice = "BlockDevice"
)

// Attribute names added by the node agent for its disk and network checks
// (informational; the rollup does not read them).
const (
	// AttrWriteLatencySeconds: average write latency of a block device over
	// the interval (diskstats).
	AttrWriteLatencySeconds = "writeLatencySeconds"
	// AttrFlushLatencySeconds: average flush latency of a block device over
	// the interval, where the kernel reports flush counters (diskstats).
	AttrFlushLatencySeconds = "flushLatencySeconds"
	// AttrReadLatencySeconds: average read latency of a block device over
	// the interval (diskstats).
	AttrReadLatencySeconds = "readLatencySeconds"
	// AttrNodePingLossRatio: lost / sent node pings of kube-ovn's pinger
	// over the interval.
	AttrNodePingLossRatio = "nodePingLossRatio"
	// AttrInconsistentPortBindings: OVS ports missing from OVN-SB port
	// bindings (kube-ovn pinger).
	AttrInconsistentPortBindings = "inconsistentPortBindings"
	// AttrDBSizeInUseBytes: logically used etcd database size.
	AttrDBSizeInUseBytes = "dbSizeInUseBytes"
	// AttrDBQuotaFromEtcd: 1 when AttrDBQuotaBytes is etcd's own
	// etcd_server_quota_backend_bytes, 0 when it is the agent's configured
	// fallback (etcd's metrics unreadable).
	AttrDBQuotaFromEtcd = "dbQuotaFromEtcd"
)

// Vocabulary of kube-ovn as the agent reads it from the node's own OVS and
// OVN sockets, and of ovn-central's raft membership, which the drain
// pre-check's ovn-central rule and the kube-ovn quorum projection read.
const (
	// CheckOVNCentralMember (component kube-ovn): this node's ovn-central
	// raft member of one clustered OVSDB database, as `ovn-appctl -t
	// <ctl> cluster/status <db>` sees it on the node's ovnnb_db.ctl /
	// ovnsb_db.ctl; one observation per database with
	// ResourceRef{Kind: KindOVNDatabase, Name: "OVN_Northbound" |
	// "OVN_Southbound"}. Healthy when Status is "cluster member" and Role is
	// leader or follower with a known leader, or for a standalone database
	// whose storage status is ok. Down when the member cannot vote: without
	// a leader (a candidate: the cluster lost its quorum as this member sees
	// it), failed, left the cluster (`unknown cluster` while the database
	// file remains), not running or not listening where the node holds its
	// database file (kube-ovn's OVN_DIR, /var/lib/ovn in Cozystack:
	// ovnnb_db.db). Degraded when it votes but warns: a leader connected to
	// fewer than a majority (LeaderLostMajority), joining. Unknown when its
	// status cannot be read in time (each database within its own share of
	// the deadline). Not sent on nodes that host no member (no control
	// socket, no database file in a readable OVN_DIR).
	// Attributes: AttrRaftServers, AttrIsLeader, AttrRaftTerm,
	// AttrRaftConnectedPeers (absent when the member does not run). The
	// message names role, status, term, leader and the connected peers.
	CheckOVNCentralMember = "ovn-central-member"
	// AttrRaftServers: servers listed under `Servers:` of `cluster/status`,
	// i.e. the voting size of the raft cluster as this member sees it.
	AttrRaftServers = "raftServers"
	// AttrRaftConnectedPeers: the other servers this member has a live
	// raft connection with (`Connections:`, parenthesised ones are down).
	AttrRaftConnectedPeers = "raftConnectedPeers"
	// KindOVNDatabase: an OVN clustered OVSDB database (OVN_Northbound,
	// OVN_Southbound).
	KindOVNDatabase = "OVNDatabase"

	// CheckOVS (component kube-ovn): this node's ovs-ovn as its own sockets
	// tell it: ovsdb-server (OVSDB JSON-RPC, RFC 7047, on db.sock: the
	// Open_vSwitch and Interface tables), ovs-vswitchd and ovn-controller
	// (their unixctl control sockets: version, connection-status). Down
	// when ovsdb-server, ovs-vswitchd or ovn-controller does not run here
	// (the ovs-ovn pod of this node is missing, orphaned or crashed);
	// Degraded when ovn-controller is not connected to the southbound
	// database or interfaces carry errors (ports of pods that no longer
	// exist); Unknown when ovsdb-server (OVSDBUnresponsive, within half
	// the deadline) or a daemon (within a quarter) accepts but does not
	// answer, the others still reported. Attributes: AttrInterfaces,
	// AttrInterfacesWithErrors (absent when the table was not read).
	CheckOVS = "ovs"
	// AttrInterfaces: rows of the Open_vSwitch database's Interface table.
	AttrInterfaces = "interfaces"
	// AttrInterfacesWithErrors: interfaces ovs-vswitchd could not set up
	// (error column set, ofport -1).
	AttrInterfacesWithErrors = "interfacesWithErrors"
)

// Vocabulary of Cilium's node-to-node view.
const (
	// CheckCiliumNodeConnectivity (component cilium): cilium-health's
	// probes from this node to every other node (GET /v1beta/status on
	// /var/run/cilium/health.sock): the node's address (ICMP, and HTTP to
	// cilium-health's port 4240) and its health endpoint on the pod network.
	// One summary observation pinned to this node (Healthy when every
	// probed node answers; Degraded when some do not; Down when none does),
	// plus one Degraded observation per unreachable node X with
	// ResourceRef{Kind: Node, Name: X} (at most MaxUnreachableNodes), so the
	// fact "this node cannot reach X" names both nodes. Attributes of the
	// summary: AttrNodesProbed, AttrNodesUnreachable.
	CheckCiliumNodeConnectivity = "cilium-node-connectivity"
	// AttrNodesProbed: other nodes cilium-health probed.
	AttrNodesProbed = "nodesProbed"
	// AttrNodesUnreachable: probed nodes that did not answer.
	AttrNodesUnreachable = "nodesUnreachable"
	// MaxUnreachableNodes caps the per-node observations of one report.
	MaxUnreachableNodes = 16
)

// Vocabulary of a report folded to fit its budget (the agent's wire.Fit).
const (
	// ReasonObservationsFolded: a summary observation standing for
	// observations of its check left out of the report to fit its size
	// budget; its status is the worst of them and at least Unknown (their
	// facts are not in the report). Attributes: AttrFolded and the
	// AttrFolded<Status> counts.
	ReasonObservationsFolded = "ObservationsFolded"
	// AttrFolded: observations the summary stands for.
	AttrFolded = "folded"
	// AttrFoldedDown, AttrFoldedDegraded, AttrFoldedUnknown and
	// AttrFoldedHealthy: of those, how many had each status.
	AttrFoldedDown     = "foldedDown"
	AttrFoldedDegraded = "foldedDegraded"
	AttrFoldedUnknown  = "foldedUnknown"
	AttrFoldedHealthy  = "foldedHealthy"
)
