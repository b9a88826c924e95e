// Package checks lists every node-local check in one table and builds them
// from the agent's configuration. Adding a check is one line here plus its
// package under checks/.
package checks

import (
	"fmt"
	"regexp"

	"go.uber.org/zap"

	"github.com/cozystack/cozy-health/agent/internal/check"
	"github.com/cozystack/cozy-health/agent/internal/checks/cilium"
	"github.com/cozystack/cozy-health/agent/internal/checks/ciliumnodes"
	"github.com/cozystack/cozy-health/agent/internal/checks/diskstats"
	"github.com/cozystack/cozy-health/agent/internal/checks/drbd"
	"github.com/cozystack/cozy-health/agent/internal/checks/etcdalarms"
	"github.com/cozystack/cozy-health/agent/internal/checks/etcdmember"
	"github.com/cozystack/cozy-health/agent/internal/checks/etcdmembership"
	"github.com/cozystack/cozy-health/agent/internal/checks/etcdmetrics"
	"github.com/cozystack/cozy-health/agent/internal/checks/fsynclatency"
	"github.com/cozystack/cozy-health/agent/internal/checks/fsyncprobe"
	"github.com/cozystack/cozy-health/agent/internal/checks/kubeovn"
	"github.com/cozystack/cozy-health/agent/internal/checks/ovncentral"
	"github.com/cozystack/cozy-health/agent/internal/checks/ovs"
	"github.com/cozystack/cozy-health/agent/internal/checks/talosservices"
	"github.com/cozystack/cozy-health/agent/internal/config"
	"github.com/cozystack/cozy-health/agent/internal/noderole"
	"github.com/cozystack/cozy-health/talos"
)

// deps are the shared clients checks are built from.
type deps struct {
	cfg   config.Config
	talos *talos.Client
	// etcdMetrics is one scrape of etcd's metrics per interval, shared by
	// etcd-member (the quota) and fsync-latency (the histograms).
	etcdMetrics *etcdmetrics.Reader
	// roles reads this node's control-plane role from its Node object,
	// for the etcd checks when Talos cannot be asked; nil when disabled.
	roles   *noderole.Reader
	devices *regexp.Regexp
}

// table is every check the agent runs, in report order. A nil client or an
// empty source makes a check not applicable at run time, never absent here.
var table = []func(d deps) check.Check{
	func(d deps) check.Check { return talosservices.New(d.talos) },
	func(d deps) check.Check {
		return etcdmember.New(d.talos, d.etcdMetrics, etcdmember.Thresholds{QuotaBytes: d.cfg.Thresholds.EtcdDBQuotaBytes, DegradedRatio: d.cfg.Thresholds.EtcdDBDegradedRatio}).WithRoles(d.roles)
	},
	func(d deps) check.Check { return etcdmembership.New(d.talos).WithRoles(d.roles) },
	func(d deps) check.Check { return etcdalarms.New(d.talos).WithRoles(d.roles) },
	func(d deps) check.Check {
		t := d.cfg.Thresholds
		return fsynclatency.New(d.etcdMetrics, d.talos, fsynclatency.Thresholds{
			WALFsyncDegraded: t.WALFsyncDegraded, WALFsyncDown: t.WALFsyncDown,
			BackendCommitDegraded: t.BackendCommitDegraded, BackendCommitDown: t.BackendCommitDown,
		}).WithRoles(d.roles)
	},
	func(d deps) check.Check {
		s := d.cfg.Sources
		return fsyncprobe.New(fsyncprobe.Config{Dir: s.FsyncProbeDir, Samples: s.FsyncProbeSamples, Window: s.FsyncProbeWindow,
			DegradedP99: d.cfg.Thresholds.FsyncProbeDegraded, DownP99: d.cfg.Thresholds.FsyncProbeDown})
	},
	func(d deps) check.Check {
		return diskstats.New(diskstats.Config{ProcRoot: d.cfg.Sources.ProcRoot, Devices: d.devices,
			Degraded: d.cfg.Thresholds.DiskLatencyDegraded, Down: d.cfg.Thresholds.DiskLatencyDown})
	},
	func(d deps) check.Check { return cilium.New(d.cfg.Sources.CiliumSocket) },
	func(d deps) check.Check { return ciliumnodes.New(d.cfg.Sources.CiliumHealthSocket, d.cfg.NodeName) },
	func(d deps) check.Check {
		return kubeovn.New(d.cfg.Sources.KubeOVNPingerURL, d.cfg.NodeName, kubeovn.Thresholds{
			PingLossDegraded: d.cfg.Thresholds.PingLossDegraded, PingLossDown: d.cfg.Thresholds.PingLossDown})
	},
	func(d deps) check.Check {
		s := d.cfg.Sources
		return ovs.New(ovs.Config{DBSocket: s.OVSDBSocket, ControllerPidfile: s.OVNControllerPidfile})
	},
	func(d deps) check.Check {
		s := d.cfg.Sources
		return ovncentral.New(ovncentral.Config{NBCtl: s.OVNNBCtl, SBCtl: s.OVNSBCtl, DBDir: s.OVNDBDir})
	},
	// The LINSTOR controller's view (satellites, replicas) is cluster-level:
	// the aggregator reads it once per interval (adapters/linstor).
	func(d deps) check.Check { return drbd.New(d.cfg.Sources.DrbdsetupPath, d.cfg.NodeName) },
}

// Set is the built checks and what they hold open.
type Set struct {
	Checks []check.Check
	talos  *talos.Client
}

// Close releases the checks' clients.
func (s *Set) Close() error {
	if s.talos != nil {
		return s.talos.Close()
	}
	return nil
}

// Build builds every check in the table from a validated configuration.
func Build(cfg config.Config, log *zap.Logger) (*Set, error) {
	d := deps{cfg: cfg, etcdMetrics: etcdmetrics.New(cfg.Sources.EtcdMetricsURL, etcdmetrics.DefaultShareFor)}
	var err error
	if d.devices, err = regexp.Compile(cfg.Sources.DiskstatsDevices); err != nil {
		return nil, fmt.Errorf("compile --diskstats-devices: %w", err)
	}
	if cfg.Sources.TalosConfig != "" {
		if d.talos, err = talos.New(talos.Config{ConfigFile: cfg.Sources.TalosConfig, Endpoints: cfg.Sources.TalosEndpoints, Node: cfg.Sources.TalosNode}, log); err != nil {
			return nil, err
		}
	}
	if s := cfg.Sources; s.KubeAPITokenFile != "" {
		server := s.KubeAPIServer
		if server == "" {
			server = noderole.ServerFromEnv()
		}
		if server != "" {
			if d.roles, err = noderole.New(noderole.Config{Server: server, TokenFile: s.KubeAPITokenFile, CAFile: s.KubeAPICAFile, NodeName: cfg.NodeName}); err != nil {
				return nil, err
			}
		}
	}
	s := &Set{talos: d.talos}
	for _, mk := range table {
		s.Checks = append(s.Checks, mk(d))
	}
	return s, nil
}
