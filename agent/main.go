// Command cozy-health-agent is the per-node half of cozy-health: it reads
// local truths on its node and streams signed reports to every aggregator
// replica.
//
//	cozy-health-agent [run] [flags]        run the checks every interval and stream reports
//	cozy-health-agent run-once [flags]     run every check once, print, exit 0/1/2
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/cozystack/cozy-health/agent/internal/checks"
	"github.com/cozystack/cozy-health/agent/internal/config"
	"github.com/cozystack/cozy-health/agent/internal/runner"
	"github.com/cozystack/cozy-health/agent/internal/uplink"
	"github.com/cozystack/cozy-health/pkg/cli"
	"github.com/cozystack/cozy-health/pkg/logging"
	"github.com/cozystack/cozy-health/pkg/memtrim"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/version"
)

// Exit codes of run-once: the worst status seen. They coincide with
// pkg/cli's (a usage error is 2, as "unknown" is).
const (
	exitHealthy = 0
	exitBad     = 1
	exitUnknown = 2
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cmd := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "run", "run-once":
	case "version":
		fmt.Fprintln(stdout, version.Version)
		return cli.ExitOK
	default:
		fmt.Fprintf(stderr, "cozy-health-agent: unknown command %q; want run, run-once or version\n", cmd)
		return cli.ExitUsage
	}
	cfg, err := config.Load(cmd, args, stderr)
	if err != nil {
		if code := cli.ExitCode(err); code != cli.ExitUsage {
			return code
		}
		fmt.Fprintf(stderr, "cozy-health-agent: %v\n", err)
		return cli.ExitUsage
	}
	// The environment (GOMEMLIMIT, GOGC) wins over the built-in defaults.
	if cfg.MemoryLimitBytes > 0 && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(cfg.MemoryLimitBytes)
	}
	if cfg.GCPercent > 0 && os.Getenv("GOGC") == "" {
		debug.SetGCPercent(cfg.GCPercent)
	}
	log, err := logging.New(cfg.LogLevel, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "cozy-health-agent: %v\n", err)
		return cli.ExitUsage
	}
	defer func() { _ = log.Sync() }()
	// Subsystems add their own "component"; base carries only the node.
	log = log.With(zap.String("node", cfg.NodeName))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if cmd == "run-once" {
		return runOnce(ctx, cfg, log, stdout)
	}
	if err := runAgent(ctx, cfg, log); err != nil {
		logging.Component(log, "agent").Error("agent stopped", zap.Error(err))
		return cli.ExitFailure
	}
	return cli.ExitOK
}

func newRunner(cfg config.Config, reg prometheus.Registerer, log *zap.Logger) (*runner.Runner, *checks.Set, error) {
	set, err := checks.Build(cfg, log)
	if err != nil {
		return nil, nil, fmt.Errorf("build checks: %w", err)
	}
	r, err := runner.New(runner.Config{NodeName: cfg.NodeName, Interval: cfg.Interval, CheckDeadline: cfg.CheckDeadline, Concurrency: cfg.Concurrency}, set.Checks, reg, log)
	if err != nil {
		_ = set.Close()
		return nil, nil, fmt.Errorf("build runner: %w", err)
	}
	return r, set, nil
}

// runAgent runs checks every interval and streams the reports.
func runAgent(ctx context.Context, cfg config.Config, base *zap.Logger) error {
	log := base.With(zap.String("component", "agent"))
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	r, set, err := newRunner(cfg, reg, base)
	if err != nil {
		return err
	}
	defer set.Close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)

	if cfg.MetricsAddr != "" {
		ln, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			return fmt.Errorf("listen for metrics on %s: %w", cfg.MetricsAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			<-ctx.Done()
			sctx, c := context.WithTimeout(context.Background(), 2*time.Second)
			defer c()
			_ = srv.Shutdown(sctx)
		}()
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("serve metrics: %w", err)
			}
		}()
		log.Info("serving metrics", zap.String("addr", ln.Addr().String()))
	}

	publish := func(rep *report.NodeReport) {}
	var desired func() time.Duration
	if len(cfg.Uplink.Aggregators) > 0 {
		up, err := uplink.New(uplink.Config{
			Aggregators:        cfg.Uplink.Aggregators,
			CAFile:             cfg.Uplink.CAFile,
			TokenFile:          cfg.Uplink.TokenFile,
			NodeName:           cfg.NodeName,
			InsecureDevKeyFile: cfg.Uplink.InsecureDevKeyFile,
			ResolveInterval:    30 * time.Second,
			AgentVersion:       version.Version,
			Registerer:         reg,
		}, base)
		if err != nil {
			return fmt.Errorf("build uplink: %w", err)
		}
		publish, desired = up.Publish, up.DesiredInterval
		go func() {
			if err := up.Run(ctx); err != nil && ctx.Err() == nil {
				errc <- fmt.Errorf("uplink: %w", err)
			}
		}()
	} else {
		log.Warn("no --aggregator given: reports are collected and counted but not sent")
	}

	if cfg.TrimStartupPages {
		inner := publish
		var once sync.Once
		publish = func(rep *report.NodeReport) {
			inner(rep)
			once.Do(func() {
				res, err := memtrim.Executable()
				if err != nil {
					log.Warn("trim start-up pages", zap.Error(err))
					return
				}
				log.Debug("trimmed start-up pages", zap.Int("mappings", res.Mappings), zap.Uint64("bytes", res.Bytes))
			})
		}
	}

	log.Info("agent started", zap.String("version", version.Version), zap.String("instance", r.InstanceID()),
		zap.Duration("interval", cfg.Interval), zap.Duration("checkDeadline", cfg.CheckDeadline), zap.Int("checks", len(set.Checks)))
	go func() { errc <- r.Run(ctx, desired, publish) }()
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		return err
	}
}

// onceOutput is run-once's JSON document.
type onceOutput struct {
	Node         string            `json:"node"`
	Observations []onceObservation `json:"observations"`
}

type onceObservation struct {
	report.Observation
	Status string `json:"status"`
}

// runOnce runs every check once and prints the result.
func runOnce(ctx context.Context, cfg config.Config, base *zap.Logger, stdout io.Writer) int {
	log := base.With(zap.String("component", "agent"))
	r, set, err := newRunner(cfg, prometheus.NewRegistry(), base)
	if err != nil {
		log.Error("run-once", zap.Error(err))
		return exitUnknown
	}
	defer set.Close()
	rep := r.Collect(ctx, cfg.Interval)

	out := onceOutput{Node: cfg.NodeName, Observations: []onceObservation{}}
	worst := report.StatusHealthy
	for _, o := range rep.Observations {
		out.Observations = append(out.Observations, onceObservation{Observation: o, Status: o.Status.String()})
		worst = report.Worse(worst, o.Status)
	}
	if cfg.Output == config.OutputJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			log.Error("write output", zap.Error(err))
			return exitUnknown
		}
	} else {
		printTable(stdout, out)
	}
	switch worst {
	case report.StatusDegraded, report.StatusDown:
		return exitBad
	case report.StatusUnknown:
		return exitUnknown
	}
	return exitHealthy
}

func printTable(w io.Writer, out onceOutput) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "NODE %s\n", out.Node)
	fmt.Fprintln(tw, "COMPONENT\tCHECK\tRESOURCE\tSTATUS\tREASON\tMESSAGE")
	for _, o := range out.Observations {
		res := ""
		if o.ResourceRef != nil {
			res = o.ResourceRef.Kind + "/" + o.ResourceRef.Name
		}
		msg := o.Message
		if len(o.Attributes) > 0 {
			keys := make([]string, 0, len(o.Attributes))
			for k := range o.Attributes {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			var parts []string
			for _, k := range keys {
				parts = append(parts, fmt.Sprintf("%s=%g", k, o.Attributes[k]))
			}
			msg += " [" + strings.Join(parts, " ") + "]"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", o.Component, o.Check, res, o.Status, o.Reason, msg)
	}
	_ = tw.Flush()
}
