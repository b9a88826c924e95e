// Package etcdcheck is the skeleton the etcd checks share (etcd-member,
// etcd-membership, etcd-alarms): on a node that runs an etcd member
// (machineapi.RequireEtcd decides, asking the Node role reader when Talos
// cannot be asked) it asks Talos through the check's read and reports the
// one observation read returns. Each etcd check is its name and its read;
// this package is not itself in checks.Table.
package etcdcheck

import (
	"context"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/agent/internal/sources/machineapi"
	"github.com/cozystack/cozy-health/agent/internal/sources/noderole"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Check is one etcd check: a name and a Read.
type Check struct {
	name  string
	talos *machineapi.Client
	roles *noderole.Reader
	read  Read
}

// Read reads and judges one etcd fact; etcd is this node's etcd service as
// Talos lists it.
type Read func(ctx context.Context, c *machineapi.Client, etcd *machine.ServiceInfo) (report.Observation, error)

var _ checkkit.Check = (*Check)(nil)

// New returns the check name (component etcd) asking c; a nil c makes it
// not applicable, or Unknown on a known control-plane node.
func New(name string, c *machineapi.Client, read Read) *Check {
	return &Check{name: name, talos: c, read: read}
}

// NewList returns the check name whose read is one list from Talos (list,
// a method of machineapi.Client such as EtcdAlarmList) that judge turns
// into the observation. A learner's refusal to list is not applicable
// (machineapi.LearnerNotApplicable; what names the list in its message).
func NewList[T any](name string, c *machineapi.Client, list func(*machineapi.Client, context.Context) (T, error), what string, judge func(T) report.Observation) *Check {
	return New(name, c, func(ctx context.Context, c *machineapi.Client, _ *machine.ServiceInfo) (report.Observation, error) {
		v, err := list(c, ctx)
		if err != nil {
			return report.Observation{}, machineapi.LearnerNotApplicable(err, what)
		}
		return judge(v), nil
	})
}

// WithRoles sets where the node's role is read when the Talos API cannot
// be asked (see machineapi.RequireEtcd); nil knows nothing.
func (c *Check) WithRoles(r *noderole.Reader) *Check {
	c.roles = r
	return c
}

// Name implements checkkit.Check.
func (c *Check) Name() string { return c.name }

// Component implements checkkit.Check.
func (*Check) Component() string { return report.ComponentEtcd }

// Run implements checkkit.Check.
func (c *Check) Run(ctx context.Context) ([]report.Observation, error) {
	etcd, err := machineapi.RequireEtcd(ctx, c.talos, c.roles)
	if err != nil {
		return nil, err
	}
	o, err := c.read(ctx, c.talos, etcd)
	if err != nil {
		return nil, err
	}
	return checkkit.Stamp(c, o), nil
}
