// Package etcdmembership reports the etcd member list as this node's member
// sees it: voting members and learners, the input of the quorum projection.
package etcdmembership

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"

	"github.com/cozystack/cozy-health/agent/internal/check"
	"github.com/cozystack/cozy-health/agent/internal/sources/noderole"
	"github.com/cozystack/cozy-health/agent/internal/sources/talos"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Check is the etcd-membership check.
type Check struct {
	talos *talos.Client
	roles *noderole.Reader
}

var _ check.Check = (*Check)(nil)

// New returns the check.
func New(c *talos.Client) *Check { return &Check{talos: c} }

// WithRoles sets where the node's role is read when the Talos API cannot
// be asked (see talos.RequireEtcd); nil knows nothing.
func (c *Check) WithRoles(r *noderole.Reader) *Check {
	c.roles = r
	return c
}

// Name implements check.Check.
func (*Check) Name() string { return report.CheckEtcdMembership }

// Component implements check.Check.
func (*Check) Component() string { return report.ComponentEtcd }

// Run implements check.Check.
func (c *Check) Run(ctx context.Context) ([]report.Observation, error) {
	if _, err := talos.RequireEtcd(ctx, c.talos, c.roles); err != nil {
		return nil, err
	}
	members, err := c.talos.EtcdMemberList(ctx)
	if err != nil {
		return nil, talos.LearnerNotApplicable(err, "member list")
	}
	return []report.Observation{Judge(members)}, nil
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
