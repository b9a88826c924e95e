// Package etcdalarms reports etcd's cluster-wide alarms (NOSPACE, CORRUPT)
// from Talos' EtcdAlarmList.
package etcdalarms

import (
	"context"
	"fmt"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"

	"github.com/cozystack/cozy-health/agent/internal/check"
	"github.com/cozystack/cozy-health/agent/internal/sources/noderole"
	"github.com/cozystack/cozy-health/agent/internal/sources/talos"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Check is the etcd-alarms check.
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
func (*Check) Name() string { return report.CheckEtcdAlarms }

// Component implements check.Check.
func (*Check) Component() string { return report.ComponentEtcd }

// Run implements check.Check.
func (c *Check) Run(ctx context.Context) ([]report.Observation, error) {
	if _, err := talos.RequireEtcd(ctx, c.talos, c.roles); err != nil {
		return nil, err
	}
	alarms, err := c.talos.EtcdAlarmList(ctx)
	if err != nil {
		return nil, talos.LearnerNotApplicable(err, "cluster's alarms")
	}
	return []report.Observation{Judge(alarms)}, nil
}

// Judge turns an alarm list into the etcd-alarms observation. Any active
// alarm puts the whole cluster in maintenance mode, so it is Down.
func Judge(alarms []*machine.EtcdMemberAlarm) report.Observation {
	var active []string
	first := ""
	for _, a := range alarms {
		if a.GetAlarm() == machine.EtcdMemberAlarm_NONE {
			continue
		}
		if first == "" {
			first = a.GetAlarm().String()
		}
		active = append(active, fmt.Sprintf("%s on member %x", a.GetAlarm(), a.GetMemberId()))
	}
	if len(active) == 0 {
		return report.Observation{Status: report.StatusHealthy, Reason: "NoAlarms", Message: "no active etcd alarm"}
	}
	return report.Observation{Status: report.StatusDown, Reason: "Alarm" + first, Message: "active etcd alarms: " + strings.Join(active, ", ")}
}
