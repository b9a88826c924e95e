package view

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hv "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func obj(ns, name string, overall hv.Status, freshFor time.Duration) hv.Health {
	h := hv.Health{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: hv.HealthSpec{Component: name}}
	if overall != "" {
		fu := metav1.NewTime(now.Add(freshFor))
		h.Status = hv.HealthStatus{Overall: overall, FreshUntil: &fu}
	}
	return h
}

func fixture() []hv.Health {
	etcd := obj("cozy-system", "etcd", hv.StatusDegraded, time.Minute)
	etcd.Status.Issues = 1
	etcd.Status.Nodes = map[string]hv.NodeState{
		"node-1": {Status: hv.StatusHealthy},
		"node-2": {Status: hv.StatusDown, Reason: "ServiceNotRunning", Message: "etcd service is Finished"},
	}
	etcd.Status.Conditions = []hv.HealthCondition{
		{Type: "Quorum", Status: hv.ConditionTrue, Reason: "QuorumAtRisk"},
		{Type: "EtcdMember", Status: hv.ConditionFalse, Reason: "ServiceNotRunning", Message: "etcd on node-2 is not running", ResourceRef: &hv.ResourceRef{Kind: "Node", Name: "node-2"}},
		{Type: "Heartbeat", Status: hv.ConditionUnknown, Reason: "HeartbeatMissed", ResourceRef: &hv.ResourceRef{Kind: "Node", Name: "node-3"}},
	}
	// linstor said Healthy but is past freshUntil: it must read Unknown (stale).
	linstor := obj("cozy-system", "linstor", hv.StatusHealthy, -time.Minute)
	linstor.Status.Nodes = map[string]hv.NodeState{"node-1": {Status: hv.StatusHealthy}}
	cilium := obj("cozy-system", "cilium", hv.StatusHealthy, time.Minute)
	cilium.Status.Nodes = map[string]hv.NodeState{"node-1": {Status: hv.StatusHealthy}, "node-2": {Status: hv.StatusHealthy}}
	disk := obj("cozy-system", "disk", hv.StatusDown, time.Minute)
	disk.Status.Nodes = map[string]hv.NodeState{"node-1": {Status: hv.StatusDown, Reason: "FsyncSlow"}}
	tenant := obj("tenant-foo", "control-plane", hv.StatusHealthy, time.Minute)
	empty := obj("tenant-bar", "backups", "", 0)
	return []hv.Health{cilium, linstor, tenant, etcd, empty, disk}
}

func TestEffectiveNeverGreenWhenStale(t *testing.T) {
	h := obj("ns", "x", hv.StatusHealthy, -time.Second)
	s := Effective(&h, now)
	assert.Equal(t, hv.StatusUnknown, s.Status)
	assert.True(t, s.Stale)
	assert.Equal(t, "Unknown (stale)", s.Label())
	// Exactly at freshUntil it is still fresh.
	h = obj("ns", "x", hv.StatusHealthy, 0)
	assert.Equal(t, hv.StatusHealthy, Effective(&h, now).Status)
	// No freshUntil at all: stale.
	h.Status.FreshUntil = nil
	assert.Equal(t, "Unknown (stale)", Effective(&h, now).Label())
	h = obj("ns", "x", "", 0)
	assert.Equal(t, "Unknown (no status)", Effective(&h, now).Label())
}

func TestTreeProblemsFirst(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, Tree(&b, fixture(), now))
	out := b.String()
	t.Log("\n" + out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var names []string
	for _, l := range lines[1:] {
		names = append(names, strings.Fields(strings.TrimLeft(l, "│├└─ "))[0])
	}
	// Namespaces by their worst object; objects worst first; an object's
	// problems (nodes, then conditions) under it, worst first.
	assert.Equal(t, []string{
		"cozy-system",
		"disk", "node",
		"etcd", "node", "EtcdMember", "Heartbeat",
		"linstor",
		"cilium",
		"tenant-bar", "backups",
		"tenant-foo", "control-plane",
	}, names)
	assert.Regexp(t, `└─ node node-1\s+Down\s+FsyncSlow`, out)
	assert.Regexp(t, `├─ node node-2\s+Down\s+ServiceNotRunning: etcd service is Finished`, out)
	assert.Regexp(t, `EtcdMember Node/node-2\s+False\s+ServiceNotRunning: etcd on node-2 is not running`, out)
	assert.Regexp(t, `linstor\s+Unknown \(stale\)\s+past freshUntil 2026-11-30T11:59:00Z; last said Healthy`, out)
	assert.Regexp(t, `backups\s+Unknown \(no status\)`, out)
	assert.Regexp(t, `(?m)^cozy-system\s+Down`, out)
	assert.NotContains(t, out, "node-1  Healthy", "healthy nodes are not listed")
}

func TestNodesAndNode(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, Nodes(&b, fixture(), now))
	out := b.String()
	t.Log("\n" + out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4)
	assert.Regexp(t, `^node-1\s+Down\s+disk=Down\(FsyncSlow\) linstor=Unknown \(stale\) cilium=Healthy etcd=Healthy$`, lines[1])
	assert.Regexp(t, `^node-2\s+Down\s+etcd=Down\(ServiceNotRunning\) cilium=Healthy$`, lines[2])
	assert.Regexp(t, `^node-3\s+Unknown\s+etcd=Unknown$`, lines[3])

	b.Reset()
	found, err := Node(&b, "node-2", fixture(), now)
	require.NoError(t, err)
	assert.True(t, found)
	out = b.String()
	t.Log("\n" + out)
	assert.Regexp(t, `NODE node-2\s+Down`, out)
	assert.Regexp(t, `cozy-system/etcd\s+Down\s+ServiceNotRunning: etcd service is Finished\n\s+EtcdMember\s+False\s+ServiceNotRunning: etcd on node-2 is not running`, out)
	assert.Less(t, strings.Index(out, "cozy-system/etcd"), strings.Index(out, "cozy-system/cilium"))

	b.Reset()
	found, err = Node(&b, "node-1", fixture(), now)
	require.NoError(t, err)
	assert.True(t, found)
	assert.Regexp(t, `cozy-system/linstor\s+Unknown \(stale\)\s+past freshUntil`, b.String())

	b.Reset()
	found, err = Node(&b, "nope", fixture(), now)
	require.NoError(t, err)
	assert.False(t, found)
}

// TestBackupConditionShowsAge: a backup condition's message names instants
// (it must not move at every judgement); the tree adds its observedAge.
func TestBackupConditionShowsAge(t *testing.T) {
	h := obj("tenant-foo", "backups", hv.StatusDegraded, time.Minute)
	last := metav1.NewTime(now.Add(-50 * time.Hour))
	h.Status.Conditions = []hv.HealthCondition{{Type: "Backup", Status: hv.ConditionFalse, Reason: "BackupStale",
		Message:          "last successful backup at 2026-11-28T10:00:00Z, stale since 2026-11-29T22:00:00Z (maxAge 36h0m0s)",
		ResourceRef:      &hv.ResourceRef{Kind: "Cluster.postgresql.cnpg.io", Namespace: "tenant-foo", Name: "db"},
		LastSuccessfulAt: &last, MaxAge: &metav1.Duration{Duration: 36 * time.Hour}, ObservedAge: &metav1.Duration{Duration: 50*time.Hour + 20*time.Second}}}
	var b bytes.Buffer
	require.NoError(t, Tree(&b, []hv.Health{h}, now))
	assert.Contains(t, b.String(), "BackupStale: last successful backup at 2026-11-28T10:00:00Z, stale since 2026-11-29T22:00:00Z (maxAge 36h0m0s); age 50h0m0s")
}
