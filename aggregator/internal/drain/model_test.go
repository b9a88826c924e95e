package drain

import (
	"fmt"
	"math/rand/v2"
	"testing"

	lapi "github.com/LINBIT/golinstor/client"
	"github.com/LINBIT/golinstor/devicelayerkind"

	"github.com/cozystack/cozy-health/pkg/linstorapi"
	"github.com/cozystack/cozy-health/pkg/report"
)

// A model of the drain verdict written apart from the rules (issue 34,
// case 10), from first principles: draining node N is safe only if, with N
// gone,
//   - every raft cluster in which N hosts a voting member (etcd,
//     ovn-central) keeps a strict majority of its true voting members known
//     good (a member known good: its node reports on time and says it
//     votes); a node that hosts no voting member changes no quorum;
//   - every LINSTOR resource keeps at least one data copy (a diskful
//     replica, not detached, UpToDate, whose node serves and whose
//     satellite the controller sees ONLINE) connected to enough peers for
//     DRBD quorum (a strict majority of the resource's replicas, counting
//     itself and only peers that serve), and N's copy is not one side of a
//     split brain (two UpToDate copies StandAlone toward each other).
// The facts are generated from upstream's enums: DiskState.java, the
// DrbdConnection and Node.connection_status enums of
// docs/rest_v1_openapi.yaml (linstor-server v1.33.3), golinstor v0.63.0's
// connectionstatus and resource flags (DRBD_DISKLESS, TIE_BREAKER); etcd
// member states as the agent reports them; OVN roles (voter, joining).
// Size claims may lie. The property: the rules never answer safe where
// the model does not.

// Replica kinds of the model.
const (
	kindDiskful = iota
	kindDiskless
	kindTieBreaker
)

// Node liveness of the model.
const (
	nodeServes = iota
	nodeStale
	nodeCordoned
)

type modelReplica struct {
	kind, live int
	disk, sat  string
	// peers: the DRBD connection state toward each other replica by
	// index, as this replica's satellite reports it ("" absent).
	peers []string
}

type linstorModel struct{ reps []modelReplica }

var disconnectedStates = func() map[string]bool {
	m := map[string]bool{}
	for _, s := range linstorapi.DRBDConnectionStates {
		if s != "Connected" && s != "Unknown" {
			m[s] = true
		}
	}
	return m
}()

// oracleLinstorSafe is the model's answer for draining replica target.
func oracleLinstorSafe(m linstorModel, target int) bool {
	need := len(m.reps)/2 + 1
	serves := func(i int) bool {
		r := m.reps[i]
		return i != target && r.live == nodeServes && r.sat == "ONLINE" && r.disk != ""
	}
	copyOf := func(i int) bool { return serves(i) && m.reps[i].kind == kindDiskful && m.reps[i].disk == "UpToDate" }
	up := func(i, j int) bool {
		a, b := m.reps[i].peers[j], m.reps[j].peers[i]
		return (a == "Connected" || b == "Connected") && !disconnectedStates[a] && !disconnectedStates[b]
	}
	t := m.reps[target]
	if t.kind == kindDiskful && t.disk == "UpToDate" {
		for j := range m.reps {
			if j != target && copyOf(j) && !up(target, j) && (t.peers[j] == "StandAlone" || m.reps[j].peers[target] == "StandAlone") {
				return false // split brain
			}
		}
	}
	for i := range m.reps {
		if !copyOf(i) {
			continue
		}
		n := 1
		for j := range m.reps {
			if j != i && serves(j) && up(i, j) {
				n++
			}
		}
		if n >= need {
			return true
		}
	}
	return false
}

// rulesLinstor is the rules' answer for draining node target of m: the
// view built from golinstor's types as the controller fills them, read by
// linstorapi.Replicas, judged by the LINSTOR rules.
func rulesLinstor(m linstorModel, target int) Verdict {
	names := make([]string, len(m.reps))
	for i := range m.reps {
		names[i] = fmt.Sprintf("worker-%d", i+1)
	}
	var view []linstorapi.Resource
	var lnodes []linstorapi.Node
	nodes := map[string]NodeInfo{}
	for i, r := range m.reps {
		var flags []string
		switch r.kind {
		case kindDiskless:
			flags = []string{"DRBD_DISKLESS"}
		case kindTieBreaker:
			flags = []string{"DRBD_DISKLESS", "TIE_BREAKER"}
		}
		conns := map[string]lapi.DrbdConnection{}
		for j, msg := range r.peers {
			if j != i && msg != "" {
				conns[names[j]] = lapi.DrbdConnection{Connected: msg == "Connected", Message: msg}
			}
		}
		view = append(view, linstorapi.Resource{ResourceWithVolumes: lapi.ResourceWithVolumes{
			Resource: lapi.Resource{Name: "pvc-m", NodeName: names[i], Flags: flags,
				LayerObject: &lapi.ResourceLayer{Type: devicelayerkind.Drbd, Drbd: &lapi.DrbdResource{Connections: conns}}},
			Volumes: []lapi.Volume{{State: lapi.VolumeState{DiskState: r.disk}}}}})
		lnodes = append(lnodes, linstorapi.Node{Name: names[i], Type: "SATELLITE", ConnectionStatus: r.sat})
		switch r.live {
		case nodeServes:
			nodes[names[i]] = fresh(names[i])
		case nodeStale:
			nodes[names[i]] = stale(names[i])
		default:
			nodes[names[i]] = cordoned(names[i])
		}
	}
	s := NewSnapshot(nodes, t0).WithControllerView(linstorapi.Replicas(view, lnodes), "")
	res := EvaluateRules([]Rule{linstorLastReplicaRule{}, linstorQuorumRule{}}, names[target], s, t0)
	return res.Verdict
}

var (
	modelKinds = []int{kindDiskful, kindDiskless, kindTieBreaker}
	modelLive  = []int{nodeServes, nodeStale, nodeCordoned}
	modelDisks = append([]string{""}, linstorapi.DiskStates...)
	modelConns = append([]string{""}, linstorapi.DRBDConnectionStates...)
)

// randomLinstor draws a model of n replicas; bias makes the draws lean
// toward the healthy values, where safe answers are.
func randomLinstor(rng *rand.Rand, n int) linstorModel {
	pick := func(healthy string, all []string) string {
		if rng.IntN(3) > 0 {
			return healthy
		}
		return all[rng.IntN(len(all))]
	}
	m := linstorModel{reps: make([]modelReplica, n)}
	for i := range m.reps {
		r := &m.reps[i]
		r.kind = kindDiskful
		if rng.IntN(3) == 0 {
			r.kind = modelKinds[rng.IntN(len(modelKinds))]
		}
		r.live = nodeServes
		if rng.IntN(5) == 0 {
			r.live = modelLive[rng.IntN(len(modelLive))]
		}
		r.sat = pick("ONLINE", linstorapi.ConnectionStatuses)
		r.disk = pick("UpToDate", modelDisks)
		if r.kind != kindDiskful && r.disk == "UpToDate" {
			r.disk = "Diskless"
		}
		r.peers = make([]string, n)
		for j := range r.peers {
			if j != i {
				r.peers[j] = pick("Connected", modelConns)
			}
		}
	}
	return m
}

// TestDrainModelLinstor: the rules never say safe where the model does not,
// over every value of every enum (each varied on one replica of a healthy
// resource, every target) and over random draws on 3 and 5 nodes.
func TestDrainModelLinstor(t *testing.T) {
	checked, safeBoth, safeModelOnly := 0, 0, 0
	check := func(m linstorModel) {
		for target := range m.reps {
			checked++
			got, want := rulesLinstor(m, target), oracleLinstorSafe(m, target)
			if got == Safe && !want {
				t.Fatalf("the rules say safe to drain replica %d where the model does not: %+v", target, m.reps)
			}
			switch {
			case got == Safe:
				safeBoth++
			case want:
				safeModelOnly++
			}
		}
	}
	healthy := func(n int) linstorModel {
		m := linstorModel{reps: make([]modelReplica, n)}
		for i := range m.reps {
			m.reps[i] = modelReplica{kind: kindDiskful, live: nodeServes, disk: "UpToDate", sat: "ONLINE", peers: make([]string, n)}
			for j := range m.reps[i].peers {
				if j != i {
					m.reps[i].peers[j] = "Connected"
				}
			}
		}
		if n == 3 {
			m.reps[2].kind, m.reps[2].disk = kindTieBreaker, "Diskless"
		}
		return m
	}
	for _, n := range []int{3, 5} {
		// Every enum value on one replica, with every kind and liveness.
		for i := 0; i < n; i++ {
			for _, kind := range modelKinds {
				for _, live := range modelLive {
					for _, disk := range modelDisks {
						for _, sat := range linstorapi.ConnectionStatuses {
							m := healthy(n)
							m.reps[i].kind, m.reps[i].live, m.reps[i].disk, m.reps[i].sat = kind, live, disk, sat
							check(m)
						}
					}
				}
				// Every connection state on each side of each pair.
				for j := 0; j < n; j++ {
					if j == i {
						continue
					}
					for _, a := range modelConns {
						for _, b := range modelConns {
							m := healthy(n)
							m.reps[i].kind = kind
							if kind != kindDiskful {
								m.reps[i].disk = "Diskless"
							}
							m.reps[i].peers[j], m.reps[j].peers[i] = a, b
							check(m)
						}
					}
				}
			}
		}
	}
	exhaustive := checked
	rng := rand.New(rand.NewPCG(34, 10))
	draws := 20000
	if testing.Short() {
		draws = 2000
	}
	for k := 0; k < draws; k++ {
		check(randomLinstor(rng, 3+2*rng.IntN(2)))
	}
	t.Logf("LINSTOR: %d drain evaluations checked against the model (%d enumerated, %d random on 3 and 5 replicas): %d safe by both, %d safe by the model only (the rules more cautious), none safe by the rules only",
		checked, exhaustive, checked-exhaustive, safeBoth, safeModelOnly)
	if safeBoth == 0 {
		t.Fatal("the rules never said safe: the model test proves nothing")
	}
}

// Raft model: n control-plane nodes, each hosting a member.
type raftMember struct {
	status  report.Status
	learner bool
	// live: 0 reports on time, 1 stale, 2 never reported.
	live int
	// size is the voting-member count the node claims (0: none).
	size int
}

// oracleRaftSafe: draining a node that hosts no voting member (a learner,
// a joining server) changes no quorum; otherwise, with target gone, a
// strict majority of the true voting members is known good.
func oracleRaftSafe(ms []raftMember, target int) bool {
	if ms[target].learner {
		return true
	}
	voting, good := 0, 0
	for i, m := range ms {
		if m.learner {
			continue
		}
		voting++
		if i != target && m.live == 0 && (m.status == report.StatusHealthy || m.status == report.StatusDegraded) {
			good++
		}
	}
	return good >= voting/2+1
}

func raftNodes(ms []raftMember, ovnDB string) (map[string]NodeInfo, []string) {
	nodes := map[string]NodeInfo{}
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = fmt.Sprintf("node-%d", i+1)
		var obs []report.Observation
		if ovnDB == "" {
			obs = append(obs, etcdMember(m.status, m.learner))
			if m.size > 0 {
				obs = append(obs, membership(m.size, 0))
			}
		} else {
			o := ovn(ovnDB, m.status, m.size)
			if m.size == 0 {
				delete(o.Attributes, report.AttrRaftServers)
			}
			if m.learner {
				o.Reason = "MemberJoining"
			}
			obs = append(obs, o)
		}
		switch m.live {
		case 0:
			nodes[names[i]] = fresh(names[i], obs...)
		case 1:
			nodes[names[i]] = stale(names[i], obs...)
		default:
			nodes[names[i]] = silent(names[i])
		}
	}
	return nodes, names
}

func randomRaft(rng *rand.Rand, n int) []raftMember {
	statuses := []report.Status{report.StatusHealthy, report.StatusDegraded, report.StatusDown, report.StatusUnknown}
	ms := make([]raftMember, n)
	voting := 0
	for i := range ms {
		ms[i].learner = rng.IntN(6) == 0
		if !ms[i].learner {
			voting++
		}
	}
	for i := range ms {
		m := &ms[i]
		m.status = report.StatusHealthy
		if rng.IntN(2) == 0 {
			m.status = statuses[rng.IntN(len(statuses))]
		}
		if rng.IntN(4) == 0 {
			m.live = 1 + rng.IntN(2)
		}
		switch rng.IntN(4) {
		case 0: // no claim
		case 1: // a lie, any count
			m.size = 1 + rng.IntN(2*n)
		default:
			m.size = voting
		}
	}
	return ms
}

// TestDrainModelRaft: etcd and ovn-central, 3 and 5 members, every member
// state, learners and joining servers, silent and stale nodes, honest and
// lying size claims.
func TestDrainModelRaft(t *testing.T) {
	rng := rand.New(rand.NewPCG(34, 6))
	draws := 20000
	if testing.Short() {
		draws = 2000
	}
	checked, safeBoth := 0, 0
	for k := 0; k < draws; k++ {
		n := 3 + 2*rng.IntN(2)
		ms := randomRaft(rng, n)
		db := ""
		rule := RuleEtcdQuorum
		if k%2 == 1 {
			db, rule = "OVN_Northbound", RuleOVNCentralQuorum
		}
		nodes, names := raftNodes(ms, db)
		s := NewSnapshot(nodes, t0)
		for target := range ms {
			checked++
			var rs []Rule
			if db == "" {
				rs = []Rule{etcdQuorumRule{}}
			} else {
				rs = []Rule{ovnCentralQuorumRule{}}
			}
			got := EvaluateRules(rs, names[target], s, t0)
			if got.Verdict == Safe && !oracleRaftSafe(ms, target) {
				t.Fatalf("%s: the rules say safe to drain %s where the model does not: %+v; reasons %+v", rule, names[target], ms, got.Reasons)
			}
			if got.Verdict == Safe {
				safeBoth++
			}
		}
	}
	t.Logf("raft: %d drain evaluations (etcd and ovn-central NB, 3 and 5 members) checked against the model: %d safe by both, none safe by the rules only", checked, safeBoth)
	if safeBoth == 0 {
		t.Fatal("the rules never said safe: the model test proves nothing")
	}
}

// FuzzDrainModel: the same property on models the fuzzer draws.
func FuzzDrainModel(f *testing.F) {
	f.Add(uint64(1), uint64(2), true)
	f.Add(uint64(34), uint64(10), false)
	f.Fuzz(func(t *testing.T, a, b uint64, five bool) {
		rng := rand.New(rand.NewPCG(a, b))
		n := 3
		if five {
			n = 5
		}
		m := randomLinstor(rng, n)
		for target := range m.reps {
			if rulesLinstor(m, target) == Safe && !oracleLinstorSafe(m, target) {
				t.Fatalf("LINSTOR: the rules say safe to drain replica %d where the model does not: %+v", target, m.reps)
			}
		}
		ms := randomRaft(rng, n)
		nodes, names := raftNodes(ms, "")
		s := NewSnapshot(nodes, t0)
		for target := range ms {
			if EvaluateRules([]Rule{etcdQuorumRule{}}, names[target], s, t0).Verdict == Safe && !oracleRaftSafe(ms, target) {
				t.Fatalf("etcd: the rules say safe to drain %s where the model does not: %+v", names[target], ms)
			}
		}
	})
}
