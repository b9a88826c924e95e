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
	// AttrDBSizeBytes, AttrDBQuotaBytes, AttrRaftIndex, AttrRaftTerm.
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
	// CheckCiliumHealth (component cilium): the agent's /v1/healthz.
	CheckCiliumHealth = "cilium-health"
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
)

// Vocabulary of kube-ovn's ovn-central raft membership, read by the drain
// pre-check's ovn-central rule. The agent does NOT emit it yet: until it
// does, no node reports an ovn-central member and the rule finds none.
const (
	// CheckOVNCentralMember (component kube-ovn): this node's ovn-central
	// raft member of one clustered OVSDB database, as `ovn-appctl
	// cluster/status <db>` on the node's ovnnb_db.ctl / ovnsb_db.ctl sees it;
	// one observation per database with ResourceRef{Kind: KindOVNDatabase,
	// Name: "OVN_Northbound" | "OVN_Southbound"}. Healthy when Status is
	// "cluster member" and Role is leader or follower; Down when the server
	// is not a cluster member or its status says failed/disconnected.
	// Not sent on nodes that host no ovn-central member. Attributes:
	// AttrRaftServers, AttrIsLeader.
	CheckOVNCentralMember = "ovn-central-member"
	// AttrRaftServers: servers listed under `Servers:` of `cluster/status`,
	// i.e. the voting size of the raft cluster as this member sees it.
	AttrRaftServers = "raftServers"
	// KindOVNDatabase: an OVN clustered OVSDB database (OVN_Northbound,
	// OVN_Southbound).
	KindOVNDatabase = "OVNDatabase"
)
