package status

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cozystack/cozy-health/pkg/report"
)

func TestTruncate(t *testing.T) {
	assert.Equal(t, "short", Truncate("short"))
	exact := strings.Repeat("a", MaxMessage)
	assert.Equal(t, exact, Truncate(exact))
	// A 2-byte rune straddling the cut is dropped whole.
	long := strings.Repeat("a", MaxMessage-4) + "é" + strings.Repeat("b", 10)
	got := Truncate(long)
	assert.LessOrEqual(t, len(got), MaxMessage)
	assert.Equal(t, strings.Repeat("a", MaxMessage-4)+"...", got)
}

func TestConditionStatus(t *testing.T) {
	for s, want := range map[report.Status]metav1.ConditionStatus{
		report.StatusHealthy: metav1.ConditionTrue, report.StatusUnknown: metav1.ConditionUnknown,
		report.StatusDegraded: metav1.ConditionFalse, report.StatusDown: metav1.ConditionFalse,
	} {
		assert.Equal(t, want, Condition{Severity: s}.ConditionStatus(), s.String())
	}
	assert.Empty(t, Condition{}.ResourceKey())
	assert.Equal(t, "Resource/ns/pvc-1", Condition{Resource: &report.ResourceRef{Kind: "Resource", Namespace: "ns", Name: "pvc-1"}}.ResourceKey())
}

type recorder struct {
	name string
	log  *[]string
}

func (r recorder) Publish(ns string, cs *Component) {
	*r.log = append(*r.log, r.name+" publish "+ns+"/"+cs.Component)
}
func (r recorder) Retime(ns string, cs *Component) {
	*r.log = append(*r.log, r.name+" retime "+ns+"/"+cs.Component)
}
func (r recorder) Remove(ns, comp string) { *r.log = append(*r.log, r.name+" remove "+ns+"/"+comp) }

// TestPublishersFanOut: every Publisher sees every call, in order.
func TestPublishersFanOut(t *testing.T) {
	var log []string
	p := Publishers{recorder{"metrics", &log}, recorder{"writer", &log}}
	cs := &Component{Component: "etcd"}
	p.Publish("cozy-system", cs)
	p.Retime("cozy-system", cs)
	p.Remove("tenant-a", "backups")
	assert.Equal(t, []string{
		"metrics publish cozy-system/etcd", "writer publish cozy-system/etcd",
		"metrics retime cozy-system/etcd", "writer retime cozy-system/etcd",
		"metrics remove tenant-a/backups", "writer remove tenant-a/backups",
	}, log)
}

func TestIssuesOf(t *testing.T) {
	cs := &Component{Conditions: []Condition{
		{Type: "Quorum", Severity: report.StatusHealthy},
		{Type: "DrbdResource", Severity: report.StatusDegraded, Reason: "DiskOutdated", Node: "n1", Resource: &report.ResourceRef{Kind: "Resource", Name: "pvc-1"}},
		{Type: "Heartbeat", Severity: report.StatusUnknown, Reason: "HeartbeatMissed", Node: "n2"},
	}}
	assert.Equal(t, []Issue{
		{Node: "n1", Kind: "Resource", Resource: "pvc-1", Type: "DrbdResource", Reason: "DiskOutdated", Status: report.StatusDegraded},
		{Node: "n2", Type: "Heartbeat", Reason: "HeartbeatMissed", Status: report.StatusUnknown},
	}, IssuesOf(cs))
}
