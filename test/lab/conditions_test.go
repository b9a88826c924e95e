package lab

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	healthv1alpha1 "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
)

func TestConditionIs(t *testing.T) {
	hs := map[string]*healthv1alpha1.Health{"etcd": {Status: healthv1alpha1.HealthStatus{Conditions: []healthv1alpha1.HealthCondition{
		{Type: "Quorum", Status: healthv1alpha1.ConditionTrue, Reason: "AllVotingMembersHealthy"},
		{Type: "EtcdMember", Status: healthv1alpha1.ConditionFalse, Reason: "EtcdServiceNotRunning", Message: "etcd Finished, health unknown",
			ResourceRef: &healthv1alpha1.ResourceRef{Kind: "Node", Name: "node-2"}},
		{Type: "FsyncLatency", Status: healthv1alpha1.ConditionUnknown, Reason: "MetricsEndpointUnreachable", Message: "set listen-metrics-urls",
			ResourceRef: &healthv1alpha1.ResourceRef{Kind: "Node", Name: "node-1"}},
	}}}}
	now := time.Now()
	for _, c := range []struct {
		name      string
		component string
		w         ConditionWant
		holds     bool
	}{
		{"component-level", "etcd", ConditionWant{Type: "Quorum", NoRef: true, Reason: "AllVotingMembersHealthy"}, true},
		{"component-level, another reason", "etcd", ConditionWant{Type: "Quorum", NoRef: true, Reason: "QuorumLost"}, false},
		{"no resourceRef wanted, a pinned one only", "etcd", ConditionWant{Type: "EtcdMember", NoRef: true}, false},
		{"pinned, any type", "etcd", ConditionWant{RefKind: "Node", RefName: "node-2", Status: healthv1alpha1.ConditionFalse}, true},
		{"pinned to another node", "etcd", ConditionWant{RefKind: "Node", RefName: "node-3", Status: healthv1alpha1.ConditionFalse}, false},
		{"message contains", "etcd", ConditionWant{Type: "FsyncLatency", Status: healthv1alpha1.ConditionUnknown, MessageHas: []string{"listen-metrics-urls"}}, true},
		{"message lacks", "etcd", ConditionWant{Type: "FsyncLatency", MessageHas: []string{"listen-metrics-urls", "patch"}}, false},
		{"no such component", "cilium", ConditionWant{Type: "Quorum"}, false},
	} {
		ok, seen := ConditionIs(c.component, c.w)(hs, now)
		assert.Equal(t, c.holds, ok, "%s: %s", c.name, seen)
		assert.NotEmpty(t, seen, c.name)
		notOK, _ := Not(ConditionIs(c.component, c.w))(hs, now)
		assert.Equal(t, !c.holds, notOK, c.name)
	}
}
