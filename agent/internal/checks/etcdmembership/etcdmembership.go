// Package etcdmembership reports the etcd member list as this node's member
// sees it: voting members and learners, the input of the quorum projection.
package etcdmembership

import (
	"fmt"
	"sort"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"

	"github.com/cozystack/cozy-health/agent/internal/checks/etcdcheck"
	"github.com/cozystack/cozy-health/agent/internal/sources/machineapi"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Check is the etcd-membership check: the shared etcd skeleton reading
// EtcdMemberList.
type Check = etcdcheck.Check

// New returns the check.
func New(c *machineapi.Client) *Check {
	return etcdcheck.NewList(report.CheckEtcdMembership, c, (*machineapi.Client).EtcdMemberList, "member list", Judge)
}

// Judge turns a member list into the etcd-membership observation.
func Judge(members []*machine.EtcdMember) report.Observation {
	var voting, learners int
	var names []string
	for _, m := range members {
		name := m.GetHostname()
		if name == "" {
			name = fmt.Sprintf("%x", m.GetId())
		}
		if m.GetIsLearner() {
			learners++
			name += " (learner)"
		} else {
			voting++
		}
		names = append(names, name)
	}
	sort.Strings(names)
	o := report.Observation{
		Status:  report.StatusHealthy,
		Reason:  "MembersListed",
		Message: fmt.Sprintf("%d voting member(s), %d learner(s): %s", voting, learners, strings.Join(names, ", ")),
		Attributes: map[string]float64{
			report.AttrVotingMembers:  float64(voting),
			report.AttrLearnerMembers: float64(learners),
		},
	}
	if voting == 0 {
		o.Status, o.Reason = report.StatusDown, "NoVotingMembers"
	}
	return o
}
