// Package app is the one place the agent is wired: the shared sources and
// every check (agent/internal/checks) -> the runner -> the uplink, and the
// agent's own metrics server. main loads a Config and calls New and Run (or
// RunOnce); tests do the same in process.
//
// New only builds: it opens the sources (nothing is dialled yet) and
// registers metrics, but starts no goroutine. Run starts everything and
// stops it all when its context ends.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/cozystack/cozy-health/agent/internal/checks"
	"github.com/cozystack/cozy-health/agent/internal/config"
	"github.com/cozystack/cozy-health/agent/internal/runner"
	"github.com/cozystack/cozy-health/agent/internal/uplink"
	"github.com/cozystack/cozy-health/pkg/memtrim"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/version"
)

// App is a wired agent.
type App struct {
	cfg config.Config
	// base is the logger New was given (with the node), which the
	// subsystems add their own component to; log is its own (component
	// agent).
	base   *zap.Logger
	log    *zap.Logger
	reg    *prometheus.Registry
	checks *checks.Set
	runner *runner.Runner
}

// New builds the agent of a validated configuration. It applies the Go
// memory limit, GC target and GOMAXPROCS ($GOMEMLIMIT, $GOGC and $GOMAXPROCS
// win over them).
func New(cfg config.Config, base *zap.Logger) (*App, error) {
	if cfg.MaxProcs > 0 && os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(cfg.MaxProcs)
	}
	if cfg.MemoryLimitBytes > 0 && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(cfg.MemoryLimitBytes)
	}
	if cfg.GCPercent > 0 && os.Getenv("GOGC") == "" {
		debug.SetGCPercent(cfg.GCPercent)
	}
	reg := prometheus.NewRegistry()
	set, err := cfg.Checks.Build(cfg.NodeName, base)
	if err != nil {
		return nil, fmt.Errorf("build checks: %w", err)
	}
	r, err := runner.New(runner.Config{NodeName: cfg.NodeName, Interval: cfg.Interval, CheckDeadline: cfg.CheckDeadline, Concurrency: cfg.Concurrency}, set.Checks, reg, base)
	if err != nil {
		_ = set.Close()
		return nil, fmt.Errorf("build runner: %w", err)
	}
	return &App{cfg: cfg, base: base, log: base.With(zap.String("component", "agent")), reg: reg, checks: set, runner: r}, nil
}

// Close releases the checks' sources.
func (a *App) Close() error { return a.checks.Close() }

// Run runs the checks every interval and streams the reports until ctx
// ends (nil) or a part fails.
func (a *App) Run(ctx context.Context) error {
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)

	if a.cfg.MetricsAddr != "" {
		if err := a.serveMetrics(ctx, errc); err != nil {
			return err
		}
	}

	publish := func(*report.NodeReport) {}
	var desired func() time.Duration
	if len(a.cfg.Uplink.Aggregators) > 0 {
		up, err := uplink.New(uplink.Config{
			Aggregators:        a.cfg.Uplink.Aggregators,
			CAFile:             a.cfg.Uplink.CAFile,
			TokenFile:          a.cfg.Uplink.TokenFile,
			NodeName:           a.cfg.NodeName,
			InsecureDevKeyFile: a.cfg.Uplink.InsecureDevKeyFile,
			ResolveInterval:    30 * time.Second,
			AgentVersion:       version.Version,
			Registerer:         a.reg,
		}, a.base)
		if err != nil {
			return fmt.Errorf("build uplink: %w", err)
		}
		desired = up.DesiredInterval
		// Signing and queueing a report run on the runner's goroutine:
		// labelled the uplink's all the same, then the runner's again
		// (pprof.Do restores the labels of the context it is given).
		runnerCtx := pprof.WithLabels(ctx, pprof.Labels(PartRegion, "runner"))
		publish = func(rep *report.NodeReport) {
			inPart(runnerCtx, "uplink", func(context.Context) { up.Publish(rep) })
		}
		go inPart(ctx, "uplink", func(ctx context.Context) {
			if err := up.Run(ctx); err != nil && ctx.Err() == nil {
				errc <- fmt.Errorf("uplink: %w", err)
			}
		})
	} else {
		a.log.Warn("no --aggregator given: reports are collected and counted but not sent")
	}
	if a.cfg.TrimStartupPages {
		publish = a.trimAfterFirst(publish)
	}

	a.log.Info("agent started", zap.String("version", version.Version), zap.String("instance", a.runner.InstanceID()),
		zap.Duration("interval", a.cfg.Interval), zap.Duration("checkDeadline", a.cfg.CheckDeadline), zap.Int("checks", len(a.checks.Checks)))
	runnerDone := make(chan error, 1)
	go inPart(ctx, "runner", func(ctx context.Context) { runnerDone <- a.runner.Run(ctx, desired, publish) })
	select {
	case <-ctx.Done():
		// The runner stops with ctx (its checks run under their own
		// deadlines); Run returns after it, so nothing it does (a last
		// publish, a log line) outlives Run. Bounded: a runner stuck past
		// shutdownWait is left behind.
		select {
		case <-runnerDone:
		case <-time.After(shutdownWait):
			a.log.Warn("the runner did not stop in time", zap.Duration("waited", shutdownWait))
		}
		return nil
	case err := <-runnerDone:
		return err
	case err := <-errc:
		return err
	}
}

// shutdownWait bounds how long Run waits for the runner once ctx ends.
const shutdownWait = 10 * time.Second

// serveMetrics serves /metrics and /healthz until ctx ends.
func (a *App) serveMetrics(ctx context.Context, errc chan<- error) error {
	ln, err := net.Listen("tcp", a.cfg.MetricsAddr)
	if err != nil {
		return fmt.Errorf("listen for metrics on %s: %w", a.cfg.MetricsAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{Registry: a.reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	if a.cfg.Pprof {
		mountPprof(mux)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, c := context.WithTimeout(context.Background(), 2*time.Second)
		defer c()
		_ = srv.Shutdown(sctx)
	}()
	go inPart(ctx, "metrics", func(context.Context) {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("serve metrics: %w", err)
		}
	})
	a.log.Info("serving metrics", zap.String("addr", ln.Addr().String()), zap.Bool("pprof", a.cfg.Pprof))
	return nil
}

// trimAfterFirst releases the executable's start-up pages once the first
// report has been handed on.
func (a *App) trimAfterFirst(publish func(*report.NodeReport)) func(*report.NodeReport) {
	var once sync.Once
	return func(rep *report.NodeReport) {
		publish(rep)
		once.Do(func() {
			res, err := memtrim.ExecutableUncached()
			if err != nil {
				a.log.Warn("trim start-up pages", zap.Error(err))
				return
			}
			a.log.Debug("trimmed start-up pages", zap.Int("mappings", res.Mappings), zap.Uint64("bytes", res.Bytes))
		})
	}
}
