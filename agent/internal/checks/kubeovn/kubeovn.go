// Package kubeovn judges kube-ovn on this node from the local
// kube-ovn-pinger's metrics: OVS and ovn-controller up or down, port
// bindings missing from the OVN southbound DB, and node ping loss over the
// interval.
package kubeovn

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/agent/internal/sources/httpsource"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Pinger metric names.
const (
	MetricOVSUp                  = "pinger_ovs_up"
	MetricOVSDown                = "pinger_ovs_down"
	MetricOVNControllerUp        = "pinger_ovn_controller_up"
	MetricOVNControllerDown      = "pinger_ovn_controller_down"
	MetricInconsistentPortBindng = "pinger_inconsistent_port_binding"
	MetricNodePingLost           = "pinger_node_ping_lost_total"
	MetricNodePingCount          = "pinger_node_ping_count_total"
)

// Thresholds configure the check.
type Thresholds struct {
	PingLossDegraded, PingLossDown float64
}

// Check is the kube-ovn-pinger check.
type Check struct {
	url, node string
	client    *http.Client
	th        Thresholds

	// mu guards prev, the previous scrape's ping counters.
	mu   sync.Mutex
	prev *Pinger
}

var _ checkkit.Check = (*Check)(nil)

// New returns the check scraping url for node.
func New(url, node string, th Thresholds) *Check {
	return &Check{url: url, node: node, client: httpsource.NewClient(), th: th}
}

// Name implements checkkit.Check.
func (*Check) Name() string { return report.CheckKubeOVNPinger }

// Component implements checkkit.Check.
func (*Check) Component() string { return report.ComponentKubeOVN }

// Run implements checkkit.Check.
func (c *Check) Run(ctx context.Context) ([]report.Observation, error) {
	if c.url == "" {
		return nil, checkkit.NotApplicable("no kube-ovn pinger URL configured")
	}
	body, err := httpsource.Get(ctx, c.client, c.url, nil)
	if err != nil {
		return nil, fmt.Errorf("read kube-ovn pinger metrics: %w", err)
	}
	p, err := Parse(body, c.node)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	prev := c.prev
	c.prev = p
	c.mu.Unlock()
	return checkkit.Stamp(c, c.judge(p, prev)), nil
}

// Pinger is what the check reads from one scrape.
type Pinger struct {
	// OVSUp and OVNControllerUp are nil when the pinger did not report them.
	OVSUp, OVNControllerUp *bool
	// InconsistentPortBindings is nil when not reported.
	InconsistentPortBindings *float64
	// NodePingLost and NodePingCount are summed over targets.
	NodePingLost, NodePingCount float64
}

// Parse reads the pinger metrics; series labelled for another node are
// ignored (nodeName / src_node_name).
func Parse(body []byte, node string) (*Pinger, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parse kube-ovn pinger metrics: %w", err)
	}
	out := &Pinger{}
	sum := func(name string) (float64, bool) {
		f, ok := fams[name]
		if !ok {
			return 0, false
		}
		var v float64
		found := false
		for _, m := range f.GetMetric() {
			if !forNode(m, node) {
				continue
			}
			found = true
			v += value(m)
		}
		return v, found
	}
	upDown := func(up, down string) *bool {
		u, okU := sum(up)
		d, okD := sum(down)
		switch {
		case okU && u > 0:
			b := true
			return &b
		case okD && d > 0, okU:
			b := false
			return &b
		}
		return nil
	}
	out.OVSUp = upDown(MetricOVSUp, MetricOVSDown)
	out.OVNControllerUp = upDown(MetricOVNControllerUp, MetricOVNControllerDown)
	if v, ok := sum(MetricInconsistentPortBindng); ok {
		out.InconsistentPortBindings = &v
	}
	out.NodePingLost, _ = sum(MetricNodePingLost)
	out.NodePingCount, _ = sum(MetricNodePingCount)
	if out.OVSUp == nil && out.OVNControllerUp == nil && out.NodePingCount == 0 {
		return nil, fmt.Errorf("parse kube-ovn pinger metrics: no pinger metric for node %q", node)
	}
	return out, nil
}

func forNode(m *dto.Metric, node string) bool {
	for _, l := range m.GetLabel() {
		switch l.GetName() {
		case "nodeName", "src_node_name", "hostname":
			if node != "" && l.GetValue() != node {
				return false
			}
		}
	}
	return true
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// LossRatio is lost / sent node pings since prev (since start without prev,
// or when the counters went down).
func LossRatio(cur, prev *Pinger) (ratio, sent float64) {
	lost, count := cur.NodePingLost, cur.NodePingCount
	if prev != nil && prev.NodePingCount <= count && prev.NodePingLost <= lost {
		lost, count = lost-prev.NodePingLost, count-prev.NodePingCount
	}
	if !(count > 0) {
		return 0, 0
	}
	ratio = lost / count
	if !(ratio >= 0) { // negative or NaN: garbage counters
		return 0, count
	}
	return min(ratio, 1), count
}

func (c *Check) judge(p, prev *Pinger) report.Observation {
	loss, sent := LossRatio(p, prev)
	o := report.Observation{
		Status:     report.StatusHealthy,
		Reason:     "PingerHealthy",
		Attributes: map[string]float64{report.AttrNodePingLossRatio: loss},
	}
	var parts []string
	fact := func(name string, up *bool) {
		switch {
		case up == nil:
			parts = append(parts, name+" not reported")
		case *up:
			parts = append(parts, name+" up")
		default:
			parts = append(parts, name+" down")
		}
	}
	fact("ovs", p.OVSUp)
	fact("ovn-controller", p.OVNControllerUp)
	if p.InconsistentPortBindings != nil {
		o.Attributes[report.AttrInconsistentPortBindings] = *p.InconsistentPortBindings
		parts = append(parts, fmt.Sprintf("%.0f inconsistent port binding(s)", *p.InconsistentPortBindings))
	}
	parts = append(parts, fmt.Sprintf("node ping loss %.1f%% of %.0f", loss*100, sent))
	set := func(s report.Status, reason string) {
		if report.Worse(o.Status, s) != o.Status {
			o.Status, o.Reason = s, reason
		}
	}
	switch {
	case p.OVSUp != nil && !*p.OVSUp:
		set(report.StatusDown, "OVSDown")
	case p.OVNControllerUp != nil && !*p.OVNControllerUp:
		set(report.StatusDown, "OVNControllerDown")
	}
	if loss > c.th.PingLossDown {
		set(report.StatusDown, "NodePingLoss")
	} else if loss > c.th.PingLossDegraded {
		set(report.StatusDegraded, "NodePingLoss")
	}
	if p.InconsistentPortBindings != nil && *p.InconsistentPortBindings > 0 {
		set(report.StatusDegraded, "InconsistentPortBindings")
	}
	o.Message = strings.Join(parts, ", ")
	return o
}
