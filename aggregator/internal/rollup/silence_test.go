package rollup

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
)

// kubeletLease gives e a kubelet Lease of 40 s renewed `ago` before t0.
func kubeletLease(e state.Entry, ago time.Duration) state.Entry {
	e.Kube.LeaseRenewedAt, e.Kube.LeaseDuration = t0.Add(-ago), 40*time.Second
	return e
}

// cordoned puts e's node in maintenance since `ago` before t0.
func cordoned(e state.Entry, ago time.Duration) state.Entry {
	e.Kube.Cordoned, e.Kube.MaintenanceSince = true, t0.Add(-ago)
	return e
}

// heartbeatOf is node's Heartbeat condition in cs, or nil.
func heartbeatOf(cs *status.Component, node string) *status.Condition {
	for i := range cs.Conditions {
		if c := &cs.Conditions[i]; c.Type == TypeHeartbeat && c.Node == node {
			return c
		}
	}
	return nil
}

// silenceCondition is the component-level Silence condition of cs, or nil.
func silenceCondition(cs *status.Component) *status.Condition {
	for i := range cs.Conditions {
		if c := &cs.Conditions[i]; c.Type == TypeSilence && c.Node == "" {
			return c
		}
	}
	return nil
}

// TestSilenceExplained: a silent node's entries stay Unknown (no evidence
// either way) in every component, and the reason says what Kubernetes
// shows of the node: its kubelet still renewing its Lease (AgentSilent),
// the Lease expired too (NodeUnreachable), no Lease seen
// (HeartbeatMissed), the node cordoned (PlannedMaintenance on the entry,
// the kubelet's fact on the Heartbeat condition). The expectations are
// written from what each fact means, not read back from the code: a
// kubelet Lease of 40 s renewed 10 s ago is alive, renewed 60 s ago is
// not.
func TestSilenceExplained(t *testing.T) {
	const silentFor = 60 * time.Second // past any grace of a 5 s interval
	etcdOK := member(H, false)
	for _, tc := range []struct {
		name       string
		silent     state.Entry
		entry      string // the silent node's entries' reason
		heartbeat  string // its Heartbeat conditions' reason
		msgContain string
	}{
		{"no kubelet Lease seen", node("c", silentFor, etcdOK), report.ReasonHeartbeatMissed, report.ReasonHeartbeatMissed, "no valid report since"},
		{"kubelet renews", kubeletLease(node("c", silentFor, etcdOK), 10*time.Second), report.ReasonAgentSilent, report.ReasonAgentSilent, "its kubelet renews its Lease"},
		{"kubelet Lease expired", kubeletLease(node("c", silentFor, etcdOK), silentFor), report.ReasonNodeUnreachable, report.ReasonNodeUnreachable, "its kubelet Lease expired"},
		{"kubelet Lease renewed exactly its duration ago", kubeletLease(node("c", silentFor, etcdOK), 40*time.Second), report.ReasonAgentSilent, report.ReasonAgentSilent, "renews"},
		{"cordoned, kubelet down", cordoned(kubeletLease(node("c", silentFor, etcdOK), silentFor), time.Minute), report.ReasonPlannedMaintenance, report.ReasonNodeUnreachable, "planned maintenance: the node is cordoned"},
		{"cordoned, kubelet up", cordoned(kubeletLease(node("c", silentFor, etcdOK), time.Second), time.Minute), report.ReasonPlannedMaintenance, report.ReasonAgentSilent, "planned maintenance"},
		{"cordoned, no Lease", cordoned(node("c", silentFor, etcdOK), time.Minute), report.ReasonPlannedMaintenance, report.ReasonHeartbeatMissed, "planned maintenance"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := snap(node("a", time.Second, etcdOK), node("b", time.Second, etcdOK), tc.silent)
			for _, cached := range []bool{false, true} {
				var out map[string]*status.Component
				if cached {
					out = ComputeCached(s, t0, defaultCfg, NewCache())
				} else {
					out = Compute(s, t0, defaultCfg)
				}
				for _, comp := range report.NodeComponents {
					cs := out[comp]
					ns, ok := cs.Nodes["c"]
					if !ok {
						continue // a component the node never reported
					}
					assert.Equal(t, U, ns.Status, "%s: a silent node's entry is Unknown, never Healthy nor Down", comp)
					assert.Equal(t, tc.entry, ns.Reason, comp)
					assert.Contains(t, ns.Message, tc.msgContain, comp)
					hb := heartbeatOf(cs, "c")
					require.NotNil(t, hb, comp)
					assert.Equal(t, U, hb.Severity, comp)
					assert.Equal(t, tc.heartbeat, hb.Reason, comp)
					assert.Nil(t, silenceCondition(cs), "one silent node of three is not many")
				}
			}
		})
	}
}

// TestMaintenanceOfAFreshNode: a cordoned node that still reports keeps
// every fact in its conditions; its entries that are Unknown or Down say
// PlannedMaintenance (the reason read stays in the message); a Healthy or
// Degraded entry is left as read.
func TestMaintenanceOfAFreshNode(t *testing.T) {
	s := snap(node("a", time.Second, member(H, false)), node("b", time.Second, member(H, false)),
		cordoned(node("c", time.Second, memberAs(D, "ServiceNotRunning"), ob(report.ComponentCilium, "cilium-agent", G, "EndpointsNotReady")), time.Minute))
	out := Compute(s, t0, defaultCfg)
	etcd := out[report.ComponentEtcd]
	assert.Equal(t, D, etcd.Nodes["c"].Status, "the fact stays Down")
	assert.Equal(t, report.ReasonPlannedMaintenance, etcd.Nodes["c"].Reason)
	assert.Contains(t, etcd.Nodes["c"].Message, "ServiceNotRunning", "the reason read stays in the message")
	found := false
	for _, c := range etcd.Conditions {
		if c.Node == "c" && c.Severity == D {
			found = true
			assert.Equal(t, "ServiceNotRunning", c.Reason, "conditions keep the facts")
		}
	}
	assert.True(t, found, "the Down condition of c is still there")
	assert.Equal(t, G, out[report.ComponentCilium].Nodes["c"].Status)
	assert.Equal(t, "EndpointsNotReady", out[report.ComponentCilium].Nodes["c"].Reason, "a Degraded entry is left as read")
	assert.Equal(t, H, etcd.Nodes["a"].Status)
	assert.NotEqual(t, report.ReasonPlannedMaintenance, etcd.Nodes["a"].Reason, "another node is not in maintenance")
}

// TestManyNodesSilent: with Kubernetes' own zone rule (more than 2 nodes,
// and at least 55 % of them), nodes that fell silent within one window
// are one event: each reads ManyNodesSilent, and one Silence condition on
// the node object says it once. Fewer, or spread over more than the
// window, are each their own silence. A node in maintenance, and a node
// never heard, do not count.
func TestManyNodesSilent(t *testing.T) {
	cfg := defaultCfg // grace 15 s at the 5 s interval: the default window
	const long = 2 * time.Minute
	mk := func(n int, silent map[int]time.Duration, mod func(i int, e state.Entry) state.Entry) state.Snapshot {
		s := state.Snapshot{}
		for i := range n {
			ago := time.Second
			if d, ok := silent[i]; ok {
				ago = d
			}
			e := kubeletLease(node(fmt.Sprintf("n%02d", i), ago, member(H, false)), time.Second)
			if mod != nil {
				e = mod(i, e)
			}
			s[e.Report.NodeName] = e
		}
		return s
	}
	together := func(idx ...int) map[int]time.Duration {
		m := map[int]time.Duration{}
		for k, i := range idx {
			m[i] = long + time.Duration(k)*time.Second // within 15 s of each other
		}
		return m
	}
	for _, tc := range []struct {
		name  string
		snap  state.Snapshot
		group []string
	}{
		{"3 of 4 together", mk(4, together(0, 1, 2), nil), []string{"n00", "n01", "n02"}},
		{"2 of 3 together: not more than 2", mk(3, together(0, 1), nil), nil},
		{"3 of 6 together: under 55 %", mk(6, together(0, 1, 2), nil), nil},
		{"4 of 6 together", mk(6, together(0, 1, 2, 3), nil), []string{"n00", "n01", "n02", "n03"}},
		{"3 of 4 spread over a minute", mk(4, map[int]time.Duration{0: long, 1: long + 30*time.Second, 2: long + 60*time.Second}, nil), nil},
		{"3 of 4 together, one in maintenance", mk(4, together(0, 1, 2), func(i int, e state.Entry) state.Entry {
			if i == 2 {
				return cordoned(e, time.Minute)
			}
			return e
		}), nil},
		{"3 of 4 together, kubelets down too", mk(4, together(0, 1, 2), func(i int, e state.Entry) state.Entry {
			if i < 3 {
				return kubeletLease(e, long)
			}
			return e
		}), []string{"n00", "n01", "n02"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := Compute(tc.snap, t0, cfg)
			node := out[report.ComponentNode]
			cond := silenceCondition(node)
			in := map[string]bool{}
			for _, n := range tc.group {
				in[n] = true
			}
			if tc.group == nil {
				assert.Nil(t, cond)
			} else {
				require.NotNil(t, cond)
				assert.Equal(t, report.ReasonManyNodesSilent, cond.Reason)
				assert.Equal(t, U, cond.Severity, "the observer's path: no evidence either way")
				assert.Contains(t, cond.Message, fmt.Sprintf("%d of %d nodes", len(tc.group), len(tc.snap)))
				for _, comp := range report.NodeComponents {
					if comp != report.ComponentNode {
						assert.Nil(t, silenceCondition(out[comp]), "one condition, on the node object only")
					}
				}
			}
			for name, e := range tc.snap {
				hb := heartbeatOf(out[report.ComponentEtcd], name)
				switch {
				case in[name]:
					require.NotNil(t, hb)
					assert.Equal(t, report.ReasonManyNodesSilent, hb.Reason, name)
					assert.Equal(t, report.ReasonManyNodesSilent, out[report.ComponentEtcd].Nodes[name].Reason, name)
				case !defaultCfg.Stale(e, t0):
					assert.Nil(t, hb, name)
				default:
					require.NotNil(t, hb, name)
					assert.NotEqual(t, report.ReasonManyNodesSilent, hb.Reason, name)
				}
			}
		})
	}
}

// TestLeaseExpiryIsAChange: the explanation of a silent node changes by
// the clock when its kubelet Lease expires, with no report and no state
// change: NextStale wakes the engine then, and the memo does not answer
// "unchanged" past it.
func TestLeaseExpiryIsAChange(t *testing.T) {
	silent := kubeletLease(node("c", time.Minute, member(H, false)), 10*time.Second) // expires at t0+30s
	s := snap(node("a", 0, member(H, false)), node("b", 0, member(H, false)), silent)
	expiry := silent.Kube.LeaseExpiry()
	cache := NewCache()
	first := ComputeCached(s, t0, defaultCfg, cache)
	assert.Equal(t, report.ReasonAgentSilent, first[report.ComponentEtcd].Nodes["c"].Reason)

	nodes := map[string]state.Entry(s)
	next := defaultCfg.NextStale(nodes, t0)
	assert.False(t, next.After(expiry.Add(time.Nanosecond)), "NextStale %s wakes no later than the Lease's expiry %s", next, expiry)

	_, unchanged := cache.Unchanged(nodes, t0.Add(time.Second), defaultCfg)
	assert.True(t, unchanged, "nothing changed a second later")
	_, unchanged = cache.UnchangedSince(nodes, nil, expiry.Add(time.Second), defaultCfg)
	assert.False(t, unchanged, "past the Lease's expiry the explanation changed")
	later := ComputeCached(s, expiry.Add(time.Second), defaultCfg, cache)
	assert.Equal(t, report.ReasonNodeUnreachable, later[report.ComponentEtcd].Nodes["c"].Reason)
}
