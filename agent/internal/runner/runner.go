// Package runner runs the agent's checks on an interval and turns their
// results into one report per interval. It owns everything a check should not
// care about: the per-check deadline, panic recovery, a bound on concurrency,
// the "not applicable" sentinel and the checks' Prometheus metrics. A check
// that hangs is abandoned at its deadline, so the report always goes out on
// time.
package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime/debug"
	"runtime/pprof"
	"runtime/trace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/version"
)

// ProfileLabel is the runtime/pprof label every check runs under, its
// value the check's name; goroutines the check starts inherit it, so a CPU
// profile (the agent's --pprof) splits the agent's CPU by check.
const ProfileLabel = "check"

// TraceRegion is the runtime/trace region type of one check run; the run's
// first trace log, of category TraceRegion, is the check's name. An
// execution trace (test/bench/agent takes one through --pprof) then
// attributes each goroutine's time on a CPU to the check that started it.
const TraceRegion = "check"

// Config configures a Runner.
type Config struct {
	// NodeName is the node the reports speak for.
	NodeName string
	// Interval is the default report interval.
	Interval time.Duration
	// CheckDeadline bounds one check run.
	CheckDeadline time.Duration
	// Concurrency bounds how many checks run at once.
	Concurrency int
}

// Runner runs checks and builds reports.
type Runner struct {
	cfg        Config
	checks     []checkkit.Check
	log        *zap.Logger
	metrics    *metrics
	instanceID string
	// sem bounds concurrently running (not yet abandoned) checks.
	sem chan struct{}
	// seq is the last sequence handed out.
	seq atomic.Uint64
	// busy[i] is true while check i's goroutine has not returned, including
	// after the runner abandoned it; a busy check is not started again.
	busy []atomic.Bool
	// logs[i] is check i's logger (With clones the encoder: once, not
	// every run).
	logs []*zap.Logger
	// inputGap[i] is the message of check i's last missing or unreadable
	// input, "" when none: a missing input is logged when it starts, changes
	// and ends, not every interval.
	inputGap []atomic.Pointer[string]
}

// New builds a Runner; it registers its metrics with reg.
func New(cfg Config, checks []checkkit.Check, reg prometheus.Registerer, log *zap.Logger) (*Runner, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("runner: node name is empty")
	}
	if cfg.Interval <= 0 || cfg.CheckDeadline <= 0 || cfg.Concurrency < 1 {
		return nil, fmt.Errorf("runner: invalid config interval=%s deadline=%s concurrency=%d", cfg.Interval, cfg.CheckDeadline, cfg.Concurrency)
	}
	seen := map[string]bool{}
	for _, c := range checks {
		if seen[c.Name()] {
			return nil, fmt.Errorf("runner: check %q listed twice", c.Name())
		}
		seen[c.Name()] = true
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("register runner metrics: %w", err)
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("generate agent instance id: %w", err)
	}
	log = log.With(zap.String("component", "runner"))
	logs := make([]*zap.Logger, len(checks))
	for i, c := range checks {
		logs[i] = log.With(zap.String("check", c.Name()))
	}
	return &Runner{
		cfg:        cfg,
		checks:     checks,
		log:        log,
		logs:       logs,
		metrics:    m,
		instanceID: hex.EncodeToString(id[:]),
		sem:        make(chan struct{}, cfg.Concurrency),
		busy:       make([]atomic.Bool, len(checks)),
		inputGap:   make([]atomic.Pointer[string], len(checks)),
	}, nil
}

// InstanceID is random per runner and identifies this agent process.
func (r *Runner) InstanceID() string { return r.instanceID }

// outcome is what one check run came to.
type outcome struct {
	obs           []report.Observation
	notApplicable bool
}

// Collect runs every check once and returns the report. It returns within
// about twice the check deadline whatever the checks do.
func (r *Runner) Collect(ctx context.Context, interval time.Duration) *report.NodeReport {
	start := time.Now()
	// A check waiting for a slot is started no later than one deadline from
	// now, so everything is settled by 2x the deadline.
	collectCtx, cancel := context.WithTimeout(ctx, 2*r.cfg.CheckDeadline)
	defer cancel()

	outcomes := make([]outcome, len(r.checks))
	var wg sync.WaitGroup
	for i, c := range r.checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outcomes[i] = r.runOne(collectCtx, i, c)
		}()
	}
	wg.Wait()

	rep := &report.NodeReport{
		NodeName:        r.cfg.NodeName,
		AgentInstanceID: r.instanceID,
		Sequence:        r.seq.Add(1),
		SentAt:          time.Now(),
		Interval:        interval,
		AgentVersion:    version.Version,
	}
	counts := map[report.Status]int{}
	for _, o := range outcomes {
		for _, ob := range o.obs {
			counts[ob.Status]++
		}
		rep.Observations = append(rep.Observations, o.obs...)
	}
	for _, s := range report.Statuses {
		r.metrics.observations.WithLabelValues(s.String()).Set(float64(counts[s]))
	}
	r.metrics.reports.Inc()
	r.metrics.collectDuration.Observe(time.Since(start).Seconds())
	return rep
}

// runOne runs check i under its deadline and never waits past it.
func (r *Runner) runOne(ctx context.Context, i int, c checkkit.Check) outcome {
	name := c.Name()
	log := r.logs[i]

	// Wait for a slot until the collection's own bound (2x the deadline):
	// checks of one hung source hold their slots for one deadline at most,
	// so the others still get a turn, with what is left of the bound.
	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		r.metrics.errors.WithLabelValues(name, report.ReasonCheckTimeout).Inc()
		log.Warn("check not started: no free slot before the deadline")
		return outcome{obs: []report.Observation{r.unknown(c, report.ReasonCheckTimeout, "check was not started before the deadline: too many checks running")}}
	}
	// The slot is released when the runner stops waiting, even if the
	// check's goroutine is still stuck; busy keeps it from piling up.
	defer func() { <-r.sem }()

	if !r.busy[i].CompareAndSwap(false, true) {
		r.metrics.errors.WithLabelValues(name, report.ReasonCheckTimeout).Inc()
		log.Warn("check still running since an earlier interval; not started again")
		return outcome{obs: []report.Observation{r.unknown(c, report.ReasonCheckTimeout, "check still hangs since an earlier run")}}
	}

	runCtx, cancel := context.WithTimeout(ctx, r.cfg.CheckDeadline)
	defer cancel()

	type result struct {
		obs      []report.Observation
		err      error
		panicked any
		stack    []byte
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		defer r.busy[i].Store(false)
		var res result
		defer func() {
			if p := recover(); p != nil {
				res = result{panicked: p, stack: debug.Stack()}
			}
			done <- res
		}()
		pprof.Do(runCtx, pprof.Labels(ProfileLabel, name), func(ctx context.Context) {
			trace.WithRegion(ctx, TraceRegion, func() {
				trace.Log(ctx, TraceRegion, name)
				res.obs, res.err = c.Run(ctx)
			})
		})
	}()

	var res result
	select {
	case res = <-done:
	case <-runCtx.Done():
		r.metrics.duration.WithLabelValues(name).Observe(time.Since(start).Seconds())
		r.metrics.errors.WithLabelValues(name, report.ReasonCheckTimeout).Inc()
		log.Warn("check abandoned at its deadline", zap.Duration("deadline", r.cfg.CheckDeadline))
		return outcome{obs: []report.Observation{r.unknown(c, report.ReasonCheckTimeout, fmt.Sprintf("check did not finish within %s", r.cfg.CheckDeadline))}}
	}
	elapsed := time.Since(start)
	r.metrics.duration.WithLabelValues(name).Observe(elapsed.Seconds())

	switch {
	case res.panicked != nil:
		r.metrics.errors.WithLabelValues(name, report.ReasonCheckPanicked).Inc()
		log.Error("check panicked", zap.Any("panic", res.panicked), zap.ByteString("stack", res.stack))
		return outcome{obs: []report.Observation{r.unknown(c, report.ReasonCheckPanicked, fmt.Sprintf("check panicked: %v", res.panicked))}}
	case errors.As(res.err, new(*checkkit.InputError)):
		var ie *checkkit.InputError
		errors.As(res.err, &ie)
		r.metrics.errors.WithLabelValues(name, ie.Reason).Inc()
		r.metrics.applicable.WithLabelValues(name).Set(1)
		if prev := r.inputGap[i].Swap(&ie.Message); prev == nil || *prev != ie.Message {
			log.Warn("check input unavailable; the check reads Unknown until it appears", zap.String("reason", ie.Reason), zap.String("input", ie.Message), zap.NamedError("cause", ie.Err))
		}
		return outcome{obs: []report.Observation{r.unknown(c, ie.Reason, ie.Message)}}
	case errors.Is(res.err, checkkit.ErrNotApplicable):
		r.metrics.notApplicable.WithLabelValues(name).Inc()
		r.metrics.applicable.WithLabelValues(name).Set(0)
		log.Debug("check not applicable", zap.Error(res.err))
		return outcome{notApplicable: true}
	case res.err != nil:
		reason := report.ReasonCheckFailed
		// A source that gave up because the deadline passed (gRPC and HTTP
		// clients wrap it their own way) timed out rather than failed.
		if errors.Is(runCtx.Err(), context.DeadlineExceeded) || errors.Is(res.err, context.DeadlineExceeded) ||
			status.Code(res.err) == codes.DeadlineExceeded {
			reason = report.ReasonCheckTimeout
		}
		r.metrics.errors.WithLabelValues(name, reason).Inc()
		log.Warn("check failed", zap.Error(res.err), zap.Duration("took", elapsed))
		return outcome{obs: []report.Observation{r.unknown(c, reason, res.err.Error())}}
	}
	if prev := r.inputGap[i].Swap(nil); prev != nil {
		log.Info("check input available again", zap.String("was", *prev))
	}
	obs := res.obs
	for j := range obs {
		if err := r.complete(c, &obs[j]); err != nil {
			r.metrics.errors.WithLabelValues(name, report.ReasonCheckFailed).Inc()
			log.Error("check returned an incomplete observation; reporting the check Unknown", zap.Error(err))
			return outcome{obs: []report.Observation{r.unknown(c, report.ReasonCheckFailed, err.Error())}}
		}
	}
	r.metrics.applicable.WithLabelValues(name).Set(1)
	r.metrics.lastSuccess.WithLabelValues(name).SetToCurrentTime()
	return outcome{obs: obs}
}

// complete checks that an observation is whole as the check returned it
// (checkkit.Stamp: its name, component and a reason) and adds what only the
// report knows: the node itself as ResourceRef where the observation names
// no other resource.
func (r *Runner) complete(c checkkit.Check, o *report.Observation) error {
	if o.Check != c.Name() || o.Component != c.Component() || o.Reason == "" {
		return fmt.Errorf("check %s returned an incomplete observation (check %q, component %q, reason %q): want check %q, component %q and a reason (checkkit.Stamp)",
			c.Name(), o.Check, o.Component, o.Reason, c.Name(), c.Component())
	}
	if o.ResourceRef == nil {
		o.ResourceRef = &report.ResourceRef{Kind: report.KindNode, Name: r.cfg.NodeName}
	}
	return nil
}

// unknown is the runner's own observation of a check that gave none.
func (r *Runner) unknown(c checkkit.Check, reason, msg string) report.Observation {
	return report.Observation{Component: c.Component(), Check: c.Name(), Status: report.StatusUnknown, Reason: reason, Message: msg,
		ResourceRef: &report.ResourceRef{Kind: report.KindNode, Name: r.cfg.NodeName}}
}

// Run collects a report every interval and hands it to publish until ctx is
// done. interval, when non-nil and returning a positive duration, overrides
// the configured interval (the aggregators' desired interval), clamped to
// [1s, 5m].
func (r *Runner) Run(ctx context.Context, interval func() time.Duration, publish func(*report.NodeReport)) error {
	next := time.Now()
	for {
		iv := r.cfg.Interval
		if interval != nil {
			if d := interval(); d > 0 {
				iv = min(max(d, time.Second), 5*time.Minute)
			}
		}
		rep := r.Collect(ctx, iv)
		if ctx.Err() != nil {
			return nil
		}
		publish(rep)
		r.metrics.sequence.Set(float64(rep.Sequence))
		r.log.Debug("report collected", zap.Uint64("sequence", rep.Sequence), zap.Int("observations", len(rep.Observations)))

		next = next.Add(iv)
		if now := time.Now(); next.Before(now) {
			next = now // fell behind (suspend, slow machine): do not burst
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}
