package runner

import (
	"bytes"
	"context"
	"errors"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/pkg/report"
)

// fn is a check built from a function, to exercise the runner's own duties
// (deadlines, panics, errors); the sources themselves are tested in each
// check's package against real-protocol servers. Its observations are
// completed with checkkit.Stamp, as every check's are, unless raw.
type fn struct {
	name string
	run  func(ctx context.Context) ([]report.Observation, error)
	raw  bool
}

var _ checkkit.Check = (*fn)(nil)

func (f *fn) Name() string      { return f.name }
func (f *fn) Component() string { return report.ComponentNode }
func (f *fn) Run(ctx context.Context) ([]report.Observation, error) {
	obs, err := f.run(ctx)
	if f.raw {
		return obs, err
	}
	return checkkit.Stamp(f, obs...), err
}

// TestIncompleteObservationIsRejected: the runner does not complete what a
// check can say itself (its name, component, reason): an observation
// without them, or claiming another check's name, reads Unknown
// CheckFailed naming what is missing, and is counted; the node is added as
// ResourceRef to a whole one.
func TestIncompleteObservationIsRejected(t *testing.T) {
	bare := &fn{name: "bare", raw: true, run: func(context.Context) ([]report.Observation, error) {
		return []report.Observation{{Status: report.StatusHealthy, Reason: "Fine"}}, nil
	}}
	other := &fn{name: "other", raw: true, run: func(context.Context) ([]report.Observation, error) {
		return []report.Observation{{Component: report.ComponentNode, Check: "bare", Status: report.StatusHealthy, Reason: "Fine"}}, nil
	}}
	noReason := &fn{name: "no-reason", raw: true, run: func(context.Context) ([]report.Observation, error) {
		return []report.Observation{{Component: report.ComponentNode, Check: "no-reason", Status: report.StatusHealthy}}, nil
	}}
	r, _ := newRunner(t, time.Second, 4, bare, other, noReason, healthy("whole"))
	obs := byCheck(r.Collect(context.Background(), 5*time.Second))
	for _, name := range []string{"bare", "other", "no-reason"} {
		o := obs[name]
		assert.Equal(t, report.StatusUnknown, o.Status, name)
		assert.Equal(t, report.ReasonCheckFailed, o.Reason, name)
		assert.Contains(t, o.Message, "incomplete observation", name)
		assert.Equal(t, report.ComponentNode, o.Component, name)
		assert.Equal(t, 1.0, testutil.ToFloat64(r.metrics.errors.WithLabelValues(name, report.ReasonCheckFailed)), name)
	}
	whole := obs["whole"]
	assert.Equal(t, report.StatusHealthy, whole.Status)
	assert.Equal(t, &report.ResourceRef{Kind: report.KindNode, Name: "node-0"}, whole.ResourceRef)
}

func healthy(name string) *fn {
	return &fn{name: name, run: func(context.Context) ([]report.Observation, error) {
		return []report.Observation{{Status: report.StatusHealthy, Reason: "Fine", Message: "fine"}}, nil
	}}
}

func newRunner(t *testing.T, deadline time.Duration, concurrency int, checks ...checkkit.Check) (*Runner, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	r, err := New(Config{NodeName: "node-0", Interval: 5 * time.Second, CheckDeadline: deadline, Concurrency: concurrency}, checks, reg, zaptest.NewLogger(t))
	require.NoError(t, err)
	return r, reg
}

func byCheck(rep *report.NodeReport) map[string]report.Observation {
	m := map[string]report.Observation{}
	for _, o := range rep.Observations {
		m[o.Check] = o
	}
	return m
}

// TestFailuresStayInTheirCheck: a hang, an error and a panic each yield
// Unknown with their reason, the healthy check is untouched, and the report
// is out within the deadline although one check never returns.
func TestFailuresStayInTheirCheck(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	hang := &fn{name: "hang", run: func(context.Context) ([]report.Observation, error) {
		<-release // ignores its context on purpose
		return nil, nil
	}}
	failing := &fn{name: "failing", run: func(context.Context) ([]report.Observation, error) {
		return nil, errors.New("read thing: connection reset")
	}}
	panicking := &fn{name: "panicking", run: func(context.Context) ([]report.Observation, error) {
		var m map[string]int
		m["x"]++
		return nil, nil
	}}
	absent := &fn{name: "absent", run: func(context.Context) ([]report.Observation, error) {
		return nil, checkkit.NotApplicable("no such source here")
	}}
	r, reg := newRunner(t, 300*time.Millisecond, 8, healthy("ok"), hang, failing, panicking, absent)

	start := time.Now()
	rep := r.Collect(context.Background(), 5*time.Second)
	took := time.Since(start)
	assert.Less(t, took, 600*time.Millisecond, "the report does not wait for the hung check")

	m := byCheck(rep)
	require.Len(t, m, 4, "the not-applicable check is omitted")
	assert.Equal(t, report.StatusHealthy, m["ok"].Status)
	assert.Equal(t, report.ReasonCheckTimeout, m["hang"].Reason)
	assert.Equal(t, report.StatusUnknown, m["hang"].Status)
	assert.Equal(t, report.ReasonCheckFailed, m["failing"].Reason)
	assert.Contains(t, m["failing"].Message, "connection reset")
	assert.Equal(t, report.ReasonCheckPanicked, m["panicking"].Reason)
	for _, o := range rep.Observations {
		assert.Equal(t, report.ComponentNode, o.Component)
		require.NotNil(t, o.ResourceRef)
		assert.Equal(t, report.ResourceRef{Kind: report.KindNode, Name: "node-0"}, *o.ResourceRef)
	}

	assert.Equal(t, 1.0, testutil.ToFloat64(r.metrics.errors.WithLabelValues("hang", report.ReasonCheckTimeout)))
	assert.Equal(t, 1.0, testutil.ToFloat64(r.metrics.errors.WithLabelValues("failing", report.ReasonCheckFailed)))
	assert.Equal(t, 1.0, testutil.ToFloat64(r.metrics.errors.WithLabelValues("panicking", report.ReasonCheckPanicked)))
	assert.Equal(t, 1.0, testutil.ToFloat64(r.metrics.notApplicable.WithLabelValues("absent")))
	assert.Positive(t, testutil.ToFloat64(r.metrics.lastSuccess.WithLabelValues("ok")))
	n, err := testutil.GatherAndCount(reg, "cozy_health_agent_check_duration_seconds")
	require.NoError(t, err)
	assert.Equal(t, 5, n, "every check that ran has a duration series")

	// Next interval: the hung check is still stuck; it is not started again
	// and is still Unknown, without waiting.
	start = time.Now()
	rep = r.Collect(context.Background(), 5*time.Second)
	assert.Less(t, time.Since(start), 200*time.Millisecond)
	assert.Equal(t, report.ReasonCheckTimeout, byCheck(rep)["hang"].Reason)
	assert.Contains(t, byCheck(rep)["hang"].Message, "still hangs")
}

func TestSequenceAndInstance(t *testing.T) {
	r, _ := newRunner(t, time.Second, 2, healthy("ok"))
	var last uint64
	for range 5 {
		rep := r.Collect(context.Background(), 5*time.Second)
		assert.Greater(t, rep.Sequence, last)
		last = rep.Sequence
		assert.Equal(t, r.InstanceID(), rep.AgentInstanceID)
		assert.Equal(t, "node-0", rep.NodeName)
		assert.Equal(t, 5*time.Second, rep.Interval)
	}
	r2, _ := newRunner(t, time.Second, 2, healthy("ok"))
	assert.NotEqual(t, r.InstanceID(), r2.InstanceID())
	assert.Len(t, r.InstanceID(), 16)
}

// TestConcurrencyBound: never more than Concurrency checks at once, and the
// collection still ends within twice the deadline when the slots are full.
func TestConcurrencyBound(t *testing.T) {
	var running, peak atomic.Int32
	var checks []checkkit.Check
	for i := range 6 {
		checks = append(checks, &fn{name: string(rune('a' + i)), run: func(ctx context.Context) ([]report.Observation, error) {
			n := running.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			defer running.Add(-1)
			select {
			case <-time.After(150 * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return []report.Observation{{Status: report.StatusHealthy, Reason: "Fine"}}, nil
		}})
	}
	r, _ := newRunner(t, time.Second, 2, checks...)
	start := time.Now()
	rep := r.Collect(context.Background(), 5*time.Second)
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.LessOrEqual(t, peak.Load(), int32(2))
	assert.Len(t, rep.Observations, 6)
	for _, o := range rep.Observations {
		assert.Equal(t, report.StatusHealthy, o.Status)
	}

	// All slots taken by checks that ignore their context: the waiting ones
	// give up after a deadline, the whole collection after two.
	block := make(chan struct{})
	defer close(block)
	var stuck []checkkit.Check
	for i := range 4 {
		stuck = append(stuck, &fn{name: strings.Repeat("s", i+1), run: func(context.Context) ([]report.Observation, error) {
			<-block
			return nil, nil
		}})
	}
	r, _ = newRunner(t, 200*time.Millisecond, 1, stuck...)
	start = time.Now()
	rep = r.Collect(context.Background(), 5*time.Second)
	assert.Less(t, time.Since(start), 700*time.Millisecond)
	assert.Len(t, rep.Observations, 4)
	for _, o := range rep.Observations {
		assert.Equal(t, report.ReasonCheckTimeout, o.Reason)
	}
}

func TestRunPublishesEveryInterval(t *testing.T) {
	reg := prometheus.NewRegistry()
	r, err := New(Config{NodeName: "node-0", Interval: time.Second, CheckDeadline: 100 * time.Millisecond, Concurrency: 1}, []checkkit.Check{healthy("ok")}, reg, zaptest.NewLogger(t))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan *report.NodeReport, 10)
	done := make(chan error)
	// The aggregators ask for 1 s (clamped minimum).
	go func() {
		done <- r.Run(ctx, func() time.Duration { return time.Millisecond }, func(rep *report.NodeReport) { got <- rep })
	}()
	first := <-got
	second := <-got
	assert.Equal(t, first.Sequence+1, second.Sequence)
	assert.Equal(t, time.Second, second.Interval)
	cancel()
	require.NoError(t, <-done)
}

func TestNewRejects(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, err := New(Config{Interval: time.Second, CheckDeadline: time.Second, Concurrency: 1}, nil, reg, zaptest.NewLogger(t))
	require.Error(t, err)
	_, err = New(Config{NodeName: "n", Interval: time.Second, CheckDeadline: time.Second, Concurrency: 1}, []checkkit.Check{healthy("a"), healthy("a")}, reg, zaptest.NewLogger(t))
	require.ErrorContains(t, err, "listed twice")
}

// TestChecksRunUnderTheirProfileLabel: a check and the goroutines it starts
// carry the profile label check=<name>, so a CPU profile of the agent splits
// by check. The goroutine profile shows the labels of live goroutines: a
// check's child is caught while it waits.
func TestChecksRunUnderTheirProfileLabel(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	var own string
	parent := &fn{name: "parent", run: func(ctx context.Context) ([]report.Observation, error) {
		own, _ = pprof.Label(ctx, ProfileLabel)
		done := make(chan struct{})
		go func() {
			defer close(done)
			close(started)
			waitForLabelTest(release)
		}()
		<-done
		return []report.Observation{{Status: report.StatusHealthy, Reason: "Fine"}}, nil
	}}
	r, _ := newRunner(t, 10*time.Second, 4, parent, healthy("other"))
	collected := make(chan *report.NodeReport, 1)
	go func() { collected <- r.Collect(context.Background(), 5*time.Second) }()
	<-started

	var buf bytes.Buffer
	require.NoError(t, pprof.Lookup("goroutine").WriteTo(&buf, 0))
	close(release)
	p, err := profile.Parse(&buf)
	require.NoError(t, err)
	var labels []string
	for _, s := range p.Sample {
		for _, loc := range s.Location {
			for _, l := range loc.Line {
				if strings.HasSuffix(l.Function.Name, ".waitForLabelTest") {
					labels = append(labels, s.Label[ProfileLabel]...)
				}
			}
		}
	}
	assert.Equal(t, []string{"parent"}, labels, "the check's child goroutine carries its check's label")
	assert.Equal(t, "parent", own, "the check's own context carries its label")
	assert.Equal(t, report.StatusHealthy, byCheck(<-collected)["parent"].Status)
}

//go:noinline
func waitForLabelTest(release <-chan struct{}) { <-release }
