package fsynclatency

import (
	"errors"
	"flag"
	"time"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/agent/internal/sources"
)

// Plugin wires the check (checks.Plugin): its thresholds, and the shared
// etcd metrics scrape, Talos client and Node role reader.
type Plugin struct{ th Thresholds }

// RegisterFlags implements checks.Plugin.
func (p *Plugin) RegisterFlags(fs *flag.FlagSet) {
	// etcd's mixin: etcdHighFsyncDurations p99 > 0.5 s warning, > 1 s critical.
	fs.DurationVar(&p.th.WALFsyncDegraded, "etcd-wal-fsync-p99-degraded", 500*time.Millisecond, "etcd WAL fsync p99 above which etcd is Degraded")
	fs.DurationVar(&p.th.WALFsyncDown, "etcd-wal-fsync-p99-down", time.Second, "etcd WAL fsync p99 above which etcd is Down")
	// etcdHighCommitDurations p99 > 0.25 s warning; Down scaled likewise (2x).
	fs.DurationVar(&p.th.BackendCommitDegraded, "etcd-backend-commit-p99-degraded", 250*time.Millisecond, "etcd backend commit p99 above which etcd is Degraded")
	fs.DurationVar(&p.th.BackendCommitDown, "etcd-backend-commit-p99-down", 500*time.Millisecond, "etcd backend commit p99 above which etcd is Down")
}

// Validate implements checks.Plugin.
func (p *Plugin) Validate() error {
	return errors.Join(
		checkkit.ValidateDurations("etcd-wal-fsync-p99", p.th.WALFsyncDegraded, p.th.WALFsyncDown),
		checkkit.ValidateDurations("etcd-backend-commit-p99", p.th.BackendCommitDegraded, p.th.BackendCommitDown))
}

// Build implements checks.Plugin.
func (p *Plugin) Build(src *sources.Set) (checkkit.Check, error) {
	return New(src.EtcdMetrics, src.Talos, p.th).WithRoles(src.Roles), nil
}
