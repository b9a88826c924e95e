package linstor

import (
	"context"
	"fmt"
	"strings"

	"github.com/cozystack/cozy-health/agent/internal/check"
	"github.com/cozystack/cozy-health/agent/internal/checks/httpsource"
	"github.com/cozystack/cozy-health/pkg/report"
)

// SatelliteCheck is the linstor-satellite check.
type SatelliteCheck struct {
	client *Client
	node   string
}

var _ check.Check = (*SatelliteCheck)(nil)

// NewSatellite returns the check; a nil client makes it not applicable.
func NewSatellite(c *Client, node string) *SatelliteCheck {
	return &SatelliteCheck{client: c, node: node}
}

// Name implements check.Check.
func (*SatelliteCheck) Name() string { return report.CheckLinstorSatellite }

// Component implements check.Check.
func (*SatelliteCheck) Component() string { return report.ComponentLinstor }

// Run implements check.Check.
func (s *SatelliteCheck) Run(ctx context.Context) ([]report.Observation, error) {
	if s.client == nil {
		return nil, check.NotApplicable("no LINSTOR URL configured")
	}
	nodes, err := s.client.Nodes(ctx, s.node)
	if httpsource.IsNotFound(err) {
		return nil, check.NotApplicable(fmt.Sprintf("LINSTOR does not know node %s", s.node))
	}
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if n.Name == s.node {
			return []report.Observation{JudgeNode(n)}, nil
		}
	}
	return nil, check.NotApplicable(fmt.Sprintf("LINSTOR does not know node %s", s.node))
}

// JudgeNode turns a LINSTOR node into the linstor-satellite observation.
func JudgeNode(n Node) report.Observation {
	st := n.ConnectionStatus
	o := report.Observation{Reason: "Satellite" + camel(st)}
	switch st {
	case "ONLINE":
		o.Status = report.StatusHealthy
	case "OFFLINE":
		o.Status = report.StatusDown
	case "", "UNKNOWN":
		o.Status, o.Reason = report.StatusUnknown, "SatelliteStatusUnknown"
	default:
		o.Status = report.StatusDegraded
	}
	o.Message = fmt.Sprintf("LINSTOR satellite %s (%s) connection status %q", n.Name, n.Type, st)
	for _, f := range n.Flags {
		if f == "EVICTED" || f == "EVACUATE" || f == "DELETE" {
			o.Message += fmt.Sprintf("; node flagged %s", f)
			if o.Status == report.StatusHealthy {
				o.Status, o.Reason = report.StatusDegraded, "Satellite"+camel(f)
			}
		}
	}
	return o
}

// camel turns SCREAMING_SNAKE into CamelCase.
func camel(s string) string {
	var b strings.Builder
	for _, part := range strings.Split(strings.ToLower(s), "_") {
		if part == "" {
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}
