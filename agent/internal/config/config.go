// Package config holds the agent's configuration, read the way every
// cozy-health binary reads it (pkg/cli): flags, then the optional --config
// YAML file whose keys are the flag names (the command line wins), then
// Validate. Constructors take the validated values. Nothing here exits or
// reads global state except the defaults' $NODE_NAME.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/cozystack/cozy-health/pkg/cli"
	"github.com/cozystack/cozy-health/pkg/logging"
)

// Output formats of run-once.
const (
	OutputText = "text"
	OutputJSON = "json"
)

// Config is everything the agent is told on its command line.
type Config struct {
	// ConfigFile is the optional YAML file (--config).
	ConfigFile string
	// NodeName is the node this agent speaks for (--node-name, default $NODE_NAME).
	NodeName string
	// Interval between reports (--interval).
	Interval time.Duration
	// CheckDeadline bounds one check run (--check-deadline).
	CheckDeadline time.Duration
	// Concurrency bounds how many checks run at once (--concurrency).
	Concurrency int
	// MetricsAddr serves the agent's own metrics; "" disables (--metrics-addr).
	MetricsAddr string
	// LogLevel is the zap level (--log-level).
	LogLevel string
	// Output is run-once's output format (--output).
	Output string
	// MemoryLimitBytes is the Go soft memory limit; 0 keeps the runtime's
	// default (--memory-limit-bytes).
	MemoryLimitBytes int64
	// GCPercent is the Go GC target percentage; 0 keeps the runtime's
	// default (--gc-percent). $GOGC, when set, wins.
	GCPercent int
	// TrimStartupPages drops the executable's read-only pages from the
	// page tables after the first report (--trim-startup-pages).
	TrimStartupPages bool

	Uplink     Uplink
	Sources    Sources
	Thresholds Thresholds
}

// Uplink mirrors agent/internal/uplink.Config's flags.
type Uplink struct {
	// Aggregators are host:port addresses or DNS names (--aggregator, repeatable or comma list).
	Aggregators []string
	// CAFile verifies the aggregators' certificates (--ca-file).
	CAFile string
	// TokenFile is the projected ServiceAccount token (--token-file).
	TokenFile string
	// InsecureDevKeyFile signs with a static key for development (--insecure-dev-key-file).
	InsecureDevKeyFile string
}

// Sources says where each node-local source is. An empty value disables the
// source; a source absent on the node makes its checks not applicable.
type Sources struct {
	// TalosConfig is the talosconfig file (--talosconfig).
	TalosConfig string
	// TalosEndpoints override the talosconfig's endpoints (--talos-endpoints).
	TalosEndpoints []string
	// TalosNode is sent as the "node" metadata so the endpoint proxies to
	// this node; "" asks the endpoint itself (--talos-node).
	TalosNode string
	// EtcdMetricsURL is etcd's plain-HTTP metrics URL (--etcd-metrics-url).
	EtcdMetricsURL string
	// FsyncProbeDir is where the fsync probe writes (--fsync-probe-dir).
	FsyncProbeDir string
	// FsyncProbeSamples is the number of write+fdatasync per run (--fsync-probe-samples).
	FsyncProbeSamples int
	// FsyncProbeWindow is the number of samples the p99 is taken over (--fsync-probe-window).
	FsyncProbeWindow int
	// ProcRoot is the host's /proc (--proc-root).
	ProcRoot string
	// DiskstatsDevices selects the block devices judged (--diskstats-devices).
	DiskstatsDevices string
	// CiliumSocket is the Cilium agent's API socket (--cilium-socket).
	CiliumSocket string
	// CiliumHealthSocket is cilium-health's API socket (--cilium-health-socket).
	CiliumHealthSocket string
	// KubeOVNPingerURL is a kube-ovn-pinger metrics URL the agent can reach
	// (--kube-ovn-pinger-url); the pinger runs on the pod network, so off by
	// default.
	KubeOVNPingerURL string
	// OVSDBSocket is ovs-ovn's ovsdb-server socket; its directory is OVS's
	// rundir with ovs-vswitchd's pidfile and control socket (--ovs-db-socket).
	OVSDBSocket string
	// OVNControllerPidfile is ovn-controller's pidfile, beside its control
	// socket (--ovn-controller-pidfile).
	OVNControllerPidfile string
	// OVNNBCtl and OVNSBCtl are ovn-central's ovsdb-server control sockets
	// (--ovn-nb-ctl, --ovn-sb-ctl).
	OVNNBCtl, OVNSBCtl string
	// OVNDBDir holds ovn-central's database files on the host (--ovn-db-dir).
	OVNDBDir string
	// DrbdsetupPath is the drbdsetup binary (--drbdsetup).
	DrbdsetupPath string
	// KubeAPIServer is the API server the agent reads its own Node object
	// from (its control-plane role label) when the Talos API cannot be
	// asked; "" is the in-cluster address from $KUBERNETES_SERVICE_HOST
	// and $KUBERNETES_SERVICE_PORT (--kube-api-server).
	KubeAPIServer string
	// KubeAPITokenFile is the ServiceAccount token for that read; empty
	// disables it (--kube-api-token-file).
	KubeAPITokenFile string
	// KubeAPICAFile verifies the API server (--kube-api-ca-file).
	KubeAPICAFile string
}

// Thresholds turn numbers into statuses.
type Thresholds struct {
	WALFsyncDegraded      time.Duration
	WALFsyncDown          time.Duration
	BackendCommitDegraded time.Duration
	BackendCommitDown     time.Duration
	EtcdDBQuotaBytes      int64
	EtcdDBDegradedRatio   float64
	FsyncProbeDegraded    time.Duration
	FsyncProbeDown        time.Duration
	DiskLatencyDegraded   time.Duration
	DiskLatencyDown       time.Duration
	PingLossDegraded      float64
	PingLossDown          float64
}

// DefaultTokenFile is where the agent's projected ServiceAccount token is mounted.
const DefaultTokenFile = "/var/run/secrets/tokens/cozy-health/token"

// DefaultTalosConfig is where the Talos ServiceAccount secret is mounted.
const DefaultTalosConfig = "/var/run/secrets/talos.dev/config"

// Default returns the defaults every flag starts from.
func Default() Config {
	return Config{
		NodeName:      os.Getenv("NODE_NAME"),
		Interval:      5 * time.Second,
		CheckDeadline: 2 * time.Second,
		Concurrency:   4,
		MetricsAddr:   "127.0.0.1:9810",
		LogLevel:      "info",
		Output:        OutputText,
		// The agent lives within 20 MiB; a soft limit just above makes the
		// GC work harder instead of growing the heap.
		MemoryLimitBytes: 16 << 20,
		// The live heap is ~4 MiB; collecting at +50% instead of +100%
		// keeps RSS under 20 MiB for well under a millicore of GC work.
		GCPercent:        50,
		TrimStartupPages: true,
		Uplink: Uplink{
			TokenFile: DefaultTokenFile,
		},
		Sources: Sources{
			TalosConfig:       DefaultTalosConfig,
			EtcdMetricsURL:    "http://127.0.0.1:2381/metrics",
			FsyncProbeDir:     "/var/lib/cozy-health/fsync-probe",
			FsyncProbeSamples: 3,
			FsyncProbeWindow:  60,
			ProcRoot:          "/proc",
			DiskstatsDevices:  `^(sd[a-z]+|vd[a-z]+|xvd[a-z]+|hd[a-z]+|nvme[0-9]+n[0-9]+|mmcblk[0-9]+)$`,
			CiliumSocket:      "/var/run/cilium/cilium.sock",
			// cilium-health's socket (pkg/health/defaults).
			CiliumHealthSocket: "/var/run/cilium/health.sock",
			// kube-ovn's ovs-ovn and ovn-central share these with the host
			// (hostPath /run/openvswitch, /var/run/ovn, and OVN_DIR for the
			// database files: /var/lib/ovn in Cozystack, /etc/origin/ovn
			// upstream).
			OVSDBSocket:          "/run/openvswitch/db.sock",
			OVNControllerPidfile: "/var/run/ovn/ovn-controller.pid",
			OVNNBCtl:             "/var/run/ovn/ovnnb_db.ctl",
			OVNSBCtl:             "/var/run/ovn/ovnsb_db.ctl",
			OVNDBDir:             "/var/lib/ovn",
			// The shipped image has no drbdsetup: DRBD state comes from
			// the LINSTOR controller's view, read by the aggregator.
			DrbdsetupPath: "",
			// The chart mounts a token of the agent's ServiceAccount (get
			// nodes) where the kubelet mounts the default one.
			KubeAPITokenFile: "/var/run/secrets/kubernetes.io/serviceaccount/token",
			KubeAPICAFile:    "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
		},
		Thresholds: Thresholds{
			// etcd's mixin: etcdHighFsyncDurations p99 > 0.5 s warning, > 1 s critical.
			WALFsyncDegraded: 500 * time.Millisecond,
			WALFsyncDown:     time.Second,
			// etcdHighCommitDurations p99 > 0.25 s warning; Down scaled likewise (2x).
			BackendCommitDegraded: 250 * time.Millisecond,
			BackendCommitDown:     500 * time.Millisecond,
			// Talos' default etcd space quota (2 GiB).
			EtcdDBQuotaBytes:    2 << 30,
			EtcdDBDegradedRatio: 0.8,
			// etcd wants fdatasync p99 < 10 ms; 10x that is a slow disk, and
			// etcd itself warns at 1 s ("slow fdatasync").
			FsyncProbeDegraded:  100 * time.Millisecond,
			FsyncProbeDown:      time.Second,
			DiskLatencyDegraded: 100 * time.Millisecond,
			DiskLatencyDown:     time.Second,
			PingLossDegraded:    0.05,
			PingLossDown:        0.5,
		},
	}
}

// RegisterFlags binds every field of c to a flag of fs; c's current values
// are the defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.ConfigFile, cli.ConfigFlag, c.ConfigFile, "YAML file with any of these flags by name (a list for a repeatable flag); flags given on the command line win")
	fs.StringVar(&c.NodeName, "node-name", c.NodeName, "node this agent speaks for (default $NODE_NAME)")
	fs.DurationVar(&c.Interval, "interval", c.Interval, "interval between reports")
	fs.DurationVar(&c.CheckDeadline, "check-deadline", c.CheckDeadline, "deadline of one check run")
	fs.IntVar(&c.Concurrency, "concurrency", c.Concurrency, "maximum checks running at once")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", c.MetricsAddr, "listen address of the agent's own /metrics; empty disables")
	logging.RegisterLevelFlag(fs, &c.LogLevel)
	fs.StringVar(&c.Output, "output", c.Output, "run-once output: text or json")
	fs.Int64Var(&c.MemoryLimitBytes, "memory-limit-bytes", c.MemoryLimitBytes, "Go soft memory limit in bytes; 0 keeps the runtime default")

	fs.IntVar(&c.GCPercent, "gc-percent", c.GCPercent, "Go GC target percentage; 0 keeps the runtime default; $GOGC wins when set")
	fs.BoolVar(&c.TrimStartupPages, "trim-startup-pages", c.TrimStartupPages, "after the first report, release the executable's read-only pages only start-up used (they fault back in on use)")

	fs.Var((*listFlag)(&c.Uplink.Aggregators), "aggregator", "aggregator address host:port or DNS name (repeatable or comma list)")
	fs.StringVar(&c.Uplink.CAFile, "ca-file", c.Uplink.CAFile, "CA bundle verifying the aggregators")
	fs.StringVar(&c.Uplink.TokenFile, "token-file", c.Uplink.TokenFile, "projected ServiceAccount token file")
	fs.StringVar(&c.Uplink.InsecureDevKeyFile, "insecure-dev-key-file", c.Uplink.InsecureDevKeyFile, "DEVELOPMENT ONLY: sign with the static ed25519 key in this file")

	s := &c.Sources
	fs.StringVar(&s.TalosConfig, "talosconfig", s.TalosConfig, "talosconfig file (re-read when it changes); empty disables the Talos checks")
	fs.Var((*listFlag)(&s.TalosEndpoints), "talos-endpoints", "override the talosconfig endpoints (repeatable or comma list)")
	fs.StringVar(&s.TalosNode, "talos-node", s.TalosNode, "Talos node (IP) the endpoint proxies requests to; empty asks the endpoint itself")
	fs.StringVar(&s.EtcdMetricsURL, "etcd-metrics-url", s.EtcdMetricsURL, "etcd metrics URL (listen-metrics-urls); empty disables")
	fs.StringVar(&s.FsyncProbeDir, "fsync-probe-dir", s.FsyncProbeDir, "directory on the etcd filesystem for the fsync probe; empty disables")
	fs.IntVar(&s.FsyncProbeSamples, "fsync-probe-samples", s.FsyncProbeSamples, "write+fdatasync samples per run")
	fs.IntVar(&s.FsyncProbeWindow, "fsync-probe-window", s.FsyncProbeWindow, "samples the fsync p99 is computed over")
	fs.StringVar(&s.ProcRoot, "proc-root", s.ProcRoot, "host /proc mount; empty disables diskstats")
	fs.StringVar(&s.DiskstatsDevices, "diskstats-devices", s.DiskstatsDevices, "regular expression selecting judged block devices")
	fs.StringVar(&s.CiliumSocket, "cilium-socket", s.CiliumSocket, "Cilium agent API unix socket; empty disables")
	fs.StringVar(&s.CiliumHealthSocket, "cilium-health-socket", s.CiliumHealthSocket, "cilium-health API unix socket (node-to-node connectivity); empty disables")
	fs.StringVar(&s.KubeOVNPingerURL, "kube-ovn-pinger-url", s.KubeOVNPingerURL, "kube-ovn-pinger metrics URL the agent can reach (the pinger listens on the pod network); empty disables")
	fs.StringVar(&s.OVSDBSocket, "ovs-db-socket", s.OVSDBSocket, "ovsdb-server socket of kube-ovn's ovs-ovn (its directory holds ovs-vswitchd's pidfile and control socket); empty disables the ovs check")
	fs.StringVar(&s.OVNControllerPidfile, "ovn-controller-pidfile", s.OVNControllerPidfile, "ovn-controller pidfile (its control socket is beside it); empty skips ovn-controller")
	fs.StringVar(&s.OVNNBCtl, "ovn-nb-ctl", s.OVNNBCtl, "ovn-central's OVN_Northbound ovsdb-server control socket; empty skips NB")
	fs.StringVar(&s.OVNSBCtl, "ovn-sb-ctl", s.OVNSBCtl, "ovn-central's OVN_Southbound ovsdb-server control socket; empty skips SB")
	fs.StringVar(&s.OVNDBDir, "ovn-db-dir", s.OVNDBDir, "directory of ovn-central's database files on the host: a file without a running member is a member down")
	fs.StringVar(&s.KubeAPIServer, "kube-api-server", s.KubeAPIServer, "API server URL the agent reads its own Node's control-plane role label from when the Talos API cannot be asked; empty: in-cluster ($KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT)")
	fs.StringVar(&s.KubeAPITokenFile, "kube-api-token-file", s.KubeAPITokenFile, "ServiceAccount token file for reading the agent's own Node (get nodes); empty disables: without Talos access every node's etcd reads Unknown")
	fs.StringVar(&s.KubeAPICAFile, "kube-api-ca-file", s.KubeAPICAFile, "CA file verifying the API server")
	fs.StringVar(&s.DrbdsetupPath, "drbdsetup", s.DrbdsetupPath, "drbdsetup binary (name or path) for the kernel's own DRBD state; empty: the LINSTOR controller's view only, read by the aggregator (the shipped image has none)")

	t := &c.Thresholds
	fs.DurationVar(&t.WALFsyncDegraded, "etcd-wal-fsync-p99-degraded", t.WALFsyncDegraded, "etcd WAL fsync p99 above which etcd is Degraded")
	fs.DurationVar(&t.WALFsyncDown, "etcd-wal-fsync-p99-down", t.WALFsyncDown, "etcd WAL fsync p99 above which etcd is Down")
	fs.DurationVar(&t.BackendCommitDegraded, "etcd-backend-commit-p99-degraded", t.BackendCommitDegraded, "etcd backend commit p99 above which etcd is Degraded")
	fs.DurationVar(&t.BackendCommitDown, "etcd-backend-commit-p99-down", t.BackendCommitDown, "etcd backend commit p99 above which etcd is Down")
	fs.Int64Var(&t.EtcdDBQuotaBytes, "etcd-db-quota-bytes", t.EtcdDBQuotaBytes, "etcd backend quota (quota-backend-bytes)")
	fs.Float64Var(&t.EtcdDBDegradedRatio, "etcd-db-degraded-ratio", t.EtcdDBDegradedRatio, "db size / quota above which the member is Degraded")
	fs.DurationVar(&t.FsyncProbeDegraded, "fsync-probe-p99-degraded", t.FsyncProbeDegraded, "probe fdatasync p99 above which the disk is Degraded")
	fs.DurationVar(&t.FsyncProbeDown, "fsync-probe-p99-down", t.FsyncProbeDown, "probe fdatasync p99 above which the disk is Down")
	fs.DurationVar(&t.DiskLatencyDegraded, "disk-latency-degraded", t.DiskLatencyDegraded, "average device write/flush latency above which a device is Degraded")
	fs.DurationVar(&t.DiskLatencyDown, "disk-latency-down", t.DiskLatencyDown, "average device write/flush latency above which a device is Down")
	fs.Float64Var(&t.PingLossDegraded, "kube-ovn-ping-loss-degraded", t.PingLossDegraded, "node ping loss ratio above which kube-ovn is Degraded")
	fs.Float64Var(&t.PingLossDown, "kube-ovn-ping-loss-down", t.PingLossDown, "node ping loss ratio above which kube-ovn is Down")
}

// Load parses args (without the program and command names) for command,
// applies the --config file if one is named, lets the command line override
// it, and validates the result. cli.ExitCode maps its error to the exit
// code.
func Load(command string, args []string, stderr io.Writer) (Config, error) {
	var cfg Config
	if err := cli.Load("cozy-health-agent "+command, args, stderr, func(fs *flag.FlagSet) {
		cfg = Default()
		cfg.RegisterFlags(fs)
	}); err != nil {
		return Config{}, err
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("invalid configuration:\n%w", err)
	}
	return cfg, nil
}

// Validate rejects a configuration the agent cannot run with.
func (c *Config) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	if c.NodeName == "" {
		add("--node-name (or $NODE_NAME) is required")
	}
	if c.Interval < time.Second {
		add("--interval %s: must be at least 1s", c.Interval)
	}
	if c.CheckDeadline <= 0 || c.CheckDeadline >= c.Interval {
		add("--check-deadline %s: must be positive and shorter than --interval %s", c.CheckDeadline, c.Interval)
	}
	if c.Concurrency < 1 {
		add("--concurrency %d: must be at least 1", c.Concurrency)
	}
	if err := logging.ValidateLevel(c.LogLevel); err != nil {
		errs = append(errs, err)
	}
	if c.Output != OutputText && c.Output != OutputJSON {
		add("--output %q: want text or json", c.Output)
	}
	if c.GCPercent < 0 {
		add("--gc-percent %d: must not be negative", c.GCPercent)
	}
	if c.MemoryLimitBytes < 0 {
		add("--memory-limit-bytes %d: must not be negative", c.MemoryLimitBytes)
	}
	s := c.Sources
	for name, raw := range map[string]string{"--etcd-metrics-url": s.EtcdMetricsURL, "--kube-ovn-pinger-url": s.KubeOVNPingerURL, "--kube-api-server": s.KubeAPIServer} {
		if raw == "" {
			continue
		}
		u, err := url.Parse(raw)
		if err != nil {
			add("%s %q: %w", name, raw, err)
			continue
		}
		if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
			add("%s %q: want an http:// or https:// URL with a host", name, raw)
		}
	}
	if s.FsyncProbeSamples < 1 || s.FsyncProbeSamples > 100 {
		add("--fsync-probe-samples %d: want 1..100", s.FsyncProbeSamples)
	}
	if s.FsyncProbeWindow < s.FsyncProbeSamples || s.FsyncProbeWindow > 10000 {
		add("--fsync-probe-window %d: want --fsync-probe-samples..10000", s.FsyncProbeWindow)
	}
	if _, err := regexp.Compile(s.DiskstatsDevices); err != nil {
		add("--diskstats-devices: %w", err)
	}
	t := c.Thresholds
	pairs := []struct {
		name       string
		degr, down time.Duration
	}{
		{"etcd-wal-fsync-p99", t.WALFsyncDegraded, t.WALFsyncDown},
		{"etcd-backend-commit-p99", t.BackendCommitDegraded, t.BackendCommitDown},
		{"fsync-probe-p99", t.FsyncProbeDegraded, t.FsyncProbeDown},
		{"disk-latency", t.DiskLatencyDegraded, t.DiskLatencyDown},
	}
	for _, p := range pairs {
		if p.degr <= 0 || p.down < p.degr {
			add("--%s-degraded %s / --%s-down %s: want 0 < degraded <= down", p.name, p.degr, p.name, p.down)
		}
	}
	if t.EtcdDBQuotaBytes <= 0 {
		add("--etcd-db-quota-bytes %d: must be positive", t.EtcdDBQuotaBytes)
	}
	if t.EtcdDBDegradedRatio <= 0 || t.EtcdDBDegradedRatio > 1 {
		add("--etcd-db-degraded-ratio %v: want (0, 1]", t.EtcdDBDegradedRatio)
	}
	if t.PingLossDegraded <= 0 || t.PingLossDown < t.PingLossDegraded || t.PingLossDown > 1 {
		add("--kube-ovn-ping-loss-degraded %v / -down %v: want 0 < degraded <= down <= 1", t.PingLossDegraded, t.PingLossDown)
	}
	return errors.Join(errs...)
}

// listFlag is a repeatable flag that also splits comma lists.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

// Repeatable lets the --config file give the flag a YAML list.
func (l *listFlag) Repeatable() {}

func (l *listFlag) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*l = append(*l, part)
		}
	}
	return nil
}
