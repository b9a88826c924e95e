package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/exp/trace"

	"github.com/cozystack/cozy-health/test/bench/benchproc"
)

func splitDuration(b *testing.B) time.Duration {
	d := defaultDuration
	if s := os.Getenv("BENCH_AGENT_SPLIT_DURATION"); s != "" {
		var err error
		d, err = time.ParseDuration(s)
		require.NoError(b, err, "BENCH_AGENT_SPLIT_DURATION")
		require.GreaterOrEqual(b, d, time.Second, "BENCH_AGENT_SPLIT_DURATION")
	}
	return d
}

// Groups of the split other than a check's name.
const (
	// groupRuntime is goroutines without a label: the Go runtime's (GC
	// workers, the scavenger) and the ones the standard library starts
	// outside any check.
	groupRuntime = "runtime"
	// groupGC is the garbage collector's background workers (its
	// assists run on the allocating goroutine, counted with it).
	groupGC = "gc"
	// groupTracer is the bench's own trace request (its connection's
	// goroutine and the trace writer).
	groupTracer = "tracer"
)

// cpuSplit is the agent's CPU over a window by where it went.
type cpuSplit struct {
	window time.Duration
	// measured is the threads' CPU time over the window.
	measured time.Duration
	// gcCycles is the collections during the trace, gcCyclesBefore during
	// the window measured without tracing (their ratio says whether the
	// trace's own allocations made the collector's share larger).
	gcCycles, gcCyclesBefore uint64
	// onCPU is each group's goroutines' time running (the trace's
	// Running state), the tracer's included.
	onCPU map[string]time.Duration
}

// splitByCheck takes an execution trace of the agent over d through its
// /debug/pprof/trace (--pprof) and adds up the time each goroutine spent
// running, by the check that started it. A CPU profile would be the usual
// tool, but the agent uses about two millicores and the kernel checks a
// thread's profiling timer only at its scheduler tick (CONFIG_HZ 250 here):
// a minute gave six samples. The trace times every goroutine switch
// exactly.
//
// Whose a goroutine is: a check's run is a trace region in which the
// runner logs the check's name (runner.TraceRegion), and a goroutine
// created during a run is that check's, as are the goroutines it creates;
// the agent's own parts do the same (app.PartRegion: the uplink's signing
// on the runner's goroutine is the uplink's);
// a goroutine that existed before the trace is told by its pprof labels
// (check=<name>, part=<runner|uplink|metrics>) in a goroutine dump taken
// just before, with GODEBUG=tracebacklabels=1; one with none is the
// runtime's.
func splitByCheck(b *testing.B, pid int, metricsAddr string, d time.Duration) cpuSplit {
	b.Helper()
	before := goroutineLabels(b, metricsAddr)
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	url := fmt.Sprintf("http://%s/debug/pprof/trace?seconds=%d", metricsAddr, int(d.Seconds()))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(b, err)
	cpu0, err := benchproc.ThreadsCPU(pid)
	require.NoError(b, err)
	t0 := time.Now()
	// A connection of its own too, not one an earlier scrape left open.
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	require.NoError(b, err)
	defer resp.Body.Close()
	require.Equal(b, http.StatusOK, resp.StatusCode, "trace request")
	data, err := io.ReadAll(resp.Body)
	require.NoError(b, err)
	if dir := os.Getenv("COZY_HEALTH_BENCH_PROFILE_DIR"); dir != "" {
		require.NoError(b, os.MkdirAll(dir, 0o755))
		require.NoError(b, os.WriteFile(filepath.Join(dir, "agent.trace"), data, 0o644))
		b.Logf("the trace: %s (go tool trace)", filepath.Join(dir, "agent.trace"))
	}
	cpu1, err := benchproc.ThreadsCPU(pid)
	require.NoError(b, err)
	split := cpuSplit{window: time.Since(t0), measured: cpu1 - cpu0}
	split.onCPU, err = onCPUByGroup(strings.NewReader(string(data)), before)
	require.NoError(b, err, "read the agent's trace (%d bytes)", len(data))
	return split
}

var goroutineHeader = regexp.MustCompile(`^goroutine (\d+) \[(?:.*labels:\{(.*)\})?.*\]:$`)
var labelPair = regexp.MustCompile(`"([^"]*)": "([^"]*)"`)

// goroutineLabels is each live goroutine's group by its pprof labels, from
// /debug/pprof/goroutine?debug=2 (labels printed with
// GODEBUG=tracebacklabels=1): the check's name, part=<name>, or the
// runtime's. The runtime's own goroutines (GC workers) are not listed.
func goroutineLabels(b *testing.B, metricsAddr string) map[trace.GoID]string {
	b.Helper()
	// A connection of its own: the trace request that follows must not be
	// served by a goroutine this dump lists (the metrics server's).
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + metricsAddr + "/debug/pprof/goroutine?debug=2")
	require.NoError(b, err)
	defer resp.Body.Close()
	dump, err := io.ReadAll(resp.Body)
	require.NoError(b, err)
	if dir := os.Getenv("COZY_HEALTH_BENCH_PROFILE_DIR"); dir != "" {
		require.NoError(b, os.MkdirAll(dir, 0o755))
		require.NoError(b, os.WriteFile(filepath.Join(dir, "agent-goroutines.txt"), dump, 0o644))
	}
	return parseGoroutineLabels(string(dump))
}

// parseGoroutineLabels reads a goroutine dump's headers
// (`goroutine 7 [select labels:{"check": "ovs", "part": "runner"}]:`).
func parseGoroutineLabels(dump string) map[trace.GoID]string {
	groups := map[trace.GoID]string{}
	for _, line := range strings.Split(dump, "\n") {
		m := goroutineHeader.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		id, _ := strconv.ParseInt(m[1], 10, 64)
		labels := map[string]string{}
		for _, kv := range labelPair.FindAllStringSubmatch(m[2], -1) {
			labels[kv[1]] = kv[2]
		}
		switch {
		case labels["check"] != "":
			groups[trace.GoID(id)] = labels["check"]
		case labels["part"] != "":
			groups[trace.GoID(id)] = "part=" + labels["part"]
		default:
			groups[trace.GoID(id)] = groupRuntime
		}
	}
	return groups
}

// onCPUByGroup reads an execution trace and adds up each goroutine's time
// in the Running state by group; before is the groups of the goroutines
// that existed when it started (absent: the runtime's).
func onCPUByGroup(r io.Reader, before map[trace.GoID]string) (map[string]time.Duration, error) {
	tr, err := trace.NewReader(r)
	if err != nil {
		return nil, err
	}
	group := map[trace.GoID]string{}
	// inRun is the check whose run a goroutine is in (its region), "" when
	// none; regions nest only one deep in the agent.
	inRun := map[trace.GoID]string{}
	regionOpen := map[trace.GoID]bool{}
	since := map[trace.GoID]trace.Time{}
	onCPU := map[string]time.Duration{}
	groupOf := func(g trace.GoID) string {
		if c := inRun[g]; c != "" {
			return c
		}
		if gr, ok := group[g]; ok {
			return gr
		}
		if gr, ok := before[g]; ok {
			return gr
		}
		return groupRuntime
	}
	var last trace.Time
	for {
		ev, err := tr.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		last = ev.Time()
		switch ev.Kind() {
		case trace.EventRegionBegin:
			if t := ev.Region().Type; t == traceRegion || t == partRegion {
				regionOpen[ev.Goroutine()] = true
			}
		case trace.EventLog:
			l := ev.Log()
			switch {
			case !regionOpen[ev.Goroutine()]:
			case l.Category == traceRegion:
				inRun[ev.Goroutine()] = l.Message
			case l.Category == partRegion:
				inRun[ev.Goroutine()] = "part=" + l.Message
			}
		case trace.EventRegionEnd:
			if t := ev.Region().Type; t == traceRegion || t == partRegion {
				delete(regionOpen, ev.Goroutine())
				delete(inRun, ev.Goroutine())
			}
		case trace.EventLabel:
			// The runtime labels its collector's workers as they start
			// ("GC (dedicated)", "GC (fractional)", "GC (idle)").
			if l := ev.Label(); l.Resource.Kind == trace.ResourceGoroutine && strings.HasPrefix(l.Label, "GC (") {
				group[l.Resource.Goroutine()] = groupGC
			}
		case trace.EventStateTransition:
			st := ev.StateTransition()
			if st.Resource.Kind != trace.ResourceGoroutine {
				continue
			}
			g := st.Resource.Goroutine()
			from, to := st.Goroutine()
			_, known := before[g]
			if _, seen := group[g]; from == trace.GoUndetermined && !known && !seen {
				// Not in the dump: the runtime's own (the dump leaves
				// them out), or the trace request's connection, started
				// after the dump. Each of the trace's generations lists
				// every goroutine again as undetermined; the first time
				// is the one with its stack.
				group[g] = groupRuntime
				if servesTrace(st.Stack) {
					group[g] = groupTracer
				}
			}
			if from == trace.GoNotExist {
				// Created now, by the goroutine of the event (none when
				// the runtime creates it); st.Stack is where it starts.
				switch parent := ev.Goroutine(); {
				case servesTrace(st.Stack):
					group[g] = groupTracer
				case parent != trace.NoGoroutine:
					group[g] = groupOf(parent)
				default:
					group[g] = groupRuntime
				}
			}
			if from == trace.GoRunning {
				if t, ok := since[g]; ok {
					onCPU[groupOf(g)] += time.Duration(ev.Time().Sub(t))
					delete(since, g)
				}
			}
			if to == trace.GoRunning {
				since[g] = ev.Time()
			}
		}
	}
	for g, t := range since {
		onCPU[groupOf(g)] += time.Duration(last.Sub(t))
	}
	return onCPU, nil
}

// servesTrace says whether a goroutine's stack is the tracing's own.
func servesTrace(s trace.Stack) bool {
	for f := range s.Frames() {
		// The handler, runtime/trace's writer, and the runtime's own
		// tracing goroutines (runtime.(*traceAdvancerState).start.func1,
		// runtime.traceStartReadCPU.func1).
		if strings.HasPrefix(f.Func, "net/http/pprof.") || strings.HasPrefix(f.Func, "runtime/trace.") ||
			strings.HasPrefix(f.Func, "runtime.trace") || strings.HasPrefix(f.Func, "runtime.(*trace") {
			return true
		}
	}
	return false
}

// traceRegion is runner.TraceRegion, partRegion app.PartRegion (test/bench
// cannot import the agent's internal packages).
const (
	traceRegion = "check"
	partRegion  = "part"
)

// rows is every group but the tracer's, most first: its share of the
// agent's goroutines' time on a CPU over the trace, and that share of
// millicores, the agent's CPU measured without tracing.
func (c cpuSplit) rows(millicores float64) (names []string, share, mc map[string]float64) {
	var held time.Duration
	for g, d := range c.onCPU {
		if g != groupTracer {
			held += d
			names = append(names, g)
		}
	}
	share, mc = map[string]float64{}, map[string]float64{}
	for _, g := range names {
		share[g] = c.onCPU[g].Seconds() / max(held.Seconds(), 1e-9)
		mc[g] = share[g] * millicores
	}
	slices.SortFunc(names, func(a, b string) int {
		switch {
		case share[a] > share[b]:
			return -1
		case share[a] < share[b]:
			return 1
		}
		return strings.Compare(a, b)
	})
	return names, share, mc
}

// report logs the split of millicores (the agent's CPU measured without
// tracing) and reports each group as the metric cpu-millicores:<group>
// (test/bench/collect turns them into rows).
func (c cpuSplit) report(b *testing.B, millicores float64) {
	names, share, mc := c.rows(millicores)
	perSecond := func(d time.Duration) float64 { return d.Seconds() / c.window.Seconds() * 1000 }
	var held time.Duration
	for g, d := range c.onCPU {
		if g != groupTracer {
			held += d
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "CPU by check: each group's share of the agent's goroutines' time running over a %s execution trace (%.2f millicores of it; the threads used %.2f with tracing on), applied to the %.2f millicores measured without tracing:\n",
		c.window.Round(time.Second), perSecond(held), perSecond(c.measured), millicores)
	fmt.Fprintf(&sb, "  (collections: %d during the trace, %d in the window measured before it)\n", c.gcCycles, c.gcCyclesBefore)
	for _, g := range names {
		fmt.Fprintf(&sb, "  %-24s %6.3f millicores  %5.1f %%\n", g, mc[g], share[g]*100)
		b.ReportMetric(mc[g], "cpu-millicores:"+g)
	}
	sb.WriteString("  (running as the Go scheduler sees it: blocking system calls left out, but on a loaded machine the time a thread waited for a core counted, and drbd-resource's includes waiting for drbdsetup to start: the fork/exec)\n")
	b.Log(sb.String())
}
