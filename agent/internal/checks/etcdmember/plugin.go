package etcdmember

import (
	"errors"
	"flag"
	"fmt"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/agent/internal/sources"
)

// Plugin wires the check (checks.Plugin): its flags, and the shared Talos
// client, Node role reader and etcd metrics scrape.
type Plugin struct{ th Thresholds }

// RegisterFlags implements checks.Plugin.
func (p *Plugin) RegisterFlags(fs *flag.FlagSet) {
	// Talos' default etcd space quota (2 GiB).
	fs.Int64Var(&p.th.QuotaBytes, "etcd-db-quota-bytes", 2<<30, "etcd backend quota (quota-backend-bytes)")
	fs.Float64Var(&p.th.DegradedRatio, "etcd-db-degraded-ratio", 0.8, "db size / quota above which the member is Degraded")
}

// Validate implements checks.Plugin.
func (p *Plugin) Validate() error {
	var errs []error
	if p.th.QuotaBytes <= 0 {
		errs = append(errs, fmt.Errorf("--etcd-db-quota-bytes %d: must be positive", p.th.QuotaBytes))
	}
	if p.th.DegradedRatio <= 0 || p.th.DegradedRatio > 1 {
		errs = append(errs, fmt.Errorf("--etcd-db-degraded-ratio %v: want (0, 1]", p.th.DegradedRatio))
	}
	return errors.Join(errs...)
}

// Build implements checks.Plugin.
func (p *Plugin) Build(src *sources.Set) (checkkit.Check, error) {
	return New(src.Talos, src.EtcdMetrics, p.th).WithRoles(src.Roles), nil
}
