// Package config holds the agent's configuration, read the way every
// cozy-health binary reads it (pkg/cli): flags, then the optional --config
// YAML file whose keys are the flag names (the command line wins), then
// Validate. Here are the agent-wide flags (node, interval, uplink, memory);
// each check and shared source registers and validates its own flags
// (agent/internal/checks.Config). Constructors take the validated values.
// Nothing here exits or reads global state except the defaults' $NODE_NAME.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/agent/internal/checks"
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
	// Runtime is --pprof (on MetricsAddr; every check runs under the
	// profile label check=<name>), --gomaxprocs and --trim-startup-pages
	// (after the first report; pkg/memtrim.ExecutableUncached), shared with
	// the aggregator.
	cli.Runtime

	Uplink Uplink
	// Checks is every check's and shared source's flags.
	Checks *checks.Config
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

// DefaultTokenFile is where the agent's projected ServiceAccount token is mounted.
const DefaultTokenFile = "/var/run/secrets/tokens/cozy-health/token"

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
		// The live heap is 2-4 MiB: the runtime's +100% keeps RSS under 20
		// MiB; +50% doubled the collections (measured: 11 a minute, not 5).
		GCPercent: 100,
		// The agent waits on sockets and files; one core is plenty. On a
		// 64-core node the runtime's default of one P per core makes every
		// collection stop and wake dozens of threads, and on any node each
		// goroutine readied with a P idle wakes a thread that spins looking
		// for work (measured, 2 cores: 3.4 -> 1.6 millicores).
		Runtime: cli.Runtime{MaxProcs: 1, TrimStartupPages: true},
		Uplink: Uplink{
			TokenFile: DefaultTokenFile,
		},
		Checks: checks.NewConfig(),
	}
}

// RegisterFlags binds every field of c to a flag of fs; c's current values
// are the defaults of the agent-wide flags, the checks' own registrations
// theirs.
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
	c.Runtime.RegisterFlags(fs)

	fs.Var((*checkkit.ListFlag)(&c.Uplink.Aggregators), "aggregator", "aggregator address host:port or DNS name (repeatable or comma list)")
	fs.StringVar(&c.Uplink.CAFile, "ca-file", c.Uplink.CAFile, "CA bundle verifying the aggregators")
	fs.StringVar(&c.Uplink.TokenFile, "token-file", c.Uplink.TokenFile, "projected ServiceAccount token file")
	fs.StringVar(&c.Uplink.InsecureDevKeyFile, "insecure-dev-key-file", c.Uplink.InsecureDevKeyFile, "DEVELOPMENT ONLY: sign with the static ed25519 key in this file")

	c.Checks.RegisterFlags(fs)
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
	if c.Pprof && c.MetricsAddr == "" {
		add("--pprof: needs --metrics-addr")
	}
	if c.GCPercent < 0 {
		add("--gc-percent %d: must not be negative", c.GCPercent)
	}
	if c.MaxProcs < 0 {
		add("--gomaxprocs %d: must not be negative", c.MaxProcs)
	}
	if c.MemoryLimitBytes < 0 {
		add("--memory-limit-bytes %d: must not be negative", c.MemoryLimitBytes)
	}
	if c.Checks != nil {
		errs = append(errs, c.Checks.Validate())
	}
	return errors.Join(errs...)
}
