// Package benchproc is what the benchmarks that run a real
// cozy-health-aggregator process share, and the one place any bench samples
// a process's CPU time and RSS (from /proc, through procfs): the binary and
// its free ports, its CPU and RSS, its live memory after a forced collection,
// and its metrics as Prometheus would scrape them.
package benchproc

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/procfs"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/test/harness"
)

// EnvInt is the positive integer in the environment variable name, else
// def.
func EnvInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// AggregatorBinary is $COZY_HEALTH_BIN/cozy-health-aggregator, or one
// built for the benchmark.
func AggregatorBinary(tb testing.TB) string {
	tb.Helper()
	if dir := os.Getenv("COZY_HEALTH_BIN"); dir != "" {
		p := filepath.Join(dir, "cozy-health-aggregator")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p := filepath.Join(tb.TempDir(), "cozy-health-aggregator")
	cmd := exec.Command("go", "build", "-o", p, "./aggregator")
	cmd.Dir = harness.RepoRoot()
	out, err := cmd.CombinedOutput()
	require.NoError(tb, err, string(out))
	return p
}

// FreeAddr is a free loopback address.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	defer l.Close()
	return l.Addr().String()
}

// LogTail logs the last 4,000 bytes of the aggregator's log.
func LogTail(tb testing.TB, path string) {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		return
	}
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	tb.Logf("aggregator log tail:\n%s", data)
}

// Stat is pid's CPU time (utime+stime) in seconds and its RSS (VmRSS) in
// bytes, from /proc through procfs.
func Stat(pid int) (cpu float64, rss int64, err error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, 0, err
	}
	status, err := p.NewStatus()
	if err != nil {
		return 0, 0, err
	}
	return st.CPUTime(), int64(status.VmRSS), nil
}

// CPUOver is pid's CPU use over the next d, in cores.
func CPUOver(tb testing.TB, pid int, d time.Duration) float64 {
	tb.Helper()
	c0, _, err := Stat(pid)
	require.NoError(tb, err)
	t0 := time.Now()
	time.Sleep(d)
	c1, _, err := Stat(pid)
	require.NoError(tb, err)
	return (c1 - c0) / time.Since(t0).Seconds()
}

// Usage is a process's CPU and memory over a window.
type Usage struct {
	// Elapsed is the window; CPU the cores used over it (CPU seconds per
	// second).
	Elapsed time.Duration
	CPU     float64
	// RSS (VmRSS) and its anonymous (RssAnon) and file-backed (RssFile,
	// the executable's pages) parts, in bytes, over the samples.
	RSSMax, RSSAvg, AnonMax, AnonAvg, FileAvg float64
	Samples                                   int
}

// Sample measures pid for d: its CPU time at both ends and its memory every
// interval in between (the first sample one interval in). An error is the
// process gone.
func Sample(pid int, d, every time.Duration) (Usage, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return Usage{}, err
	}
	st0, err := p.Stat()
	if err != nil {
		return Usage{}, err
	}
	t0 := time.Now()
	var u Usage
	var rssSum, anonSum, fileSum float64
	tick := time.NewTicker(every)
	defer tick.Stop()
	for time.Since(t0) < d {
		<-tick.C
		s, err := p.NewStatus()
		if err != nil {
			return u, err
		}
		u.RSSMax = max(u.RSSMax, float64(s.VmRSS))
		u.AnonMax = max(u.AnonMax, float64(s.RssAnon))
		rssSum += float64(s.VmRSS)
		anonSum += float64(s.RssAnon)
		fileSum += float64(s.RssFile)
		u.Samples++
	}
	st1, err := p.Stat()
	if err != nil {
		return u, err
	}
	u.Elapsed = time.Since(t0)
	u.CPU = (st1.CPUTime() - st0.CPUTime()) / u.Elapsed.Seconds()
	if u.Samples > 0 {
		n := float64(u.Samples)
		u.RSSAvg, u.AnonAvg, u.FileAvg = rssSum/n, anonSum/n, fileSum/n
	}
	return u, nil
}

// RSSParts says how much of pid's RSS is anonymous memory and how much
// file-backed (the executable's pages).
func RSSParts(pid int) string {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return err.Error()
	}
	s, err := p.NewStatus()
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("RssAnon %.1f MiB, RssFile %.1f MiB", float64(s.RssAnon)/(1<<20), float64(s.RssFile)/(1<<20))
}

// Gather scrapes the aggregator's metrics once, as Prometheus would.
func Gather(addr string) (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return ParseMetrics(resp.Body)
}

// Value is the sum of every sample of metric name in mfs whose labels
// include want (for a histogram, its mean).
func Value(mfs map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	mf, ok := mfs[name]
	if !ok {
		return 0
	}
	var sum float64
next:
	for _, m := range mf.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case m.GetHistogram() != nil:
			if c := m.GetHistogram().GetSampleCount(); c > 0 {
				sum += m.GetHistogram().GetSampleSum() / float64(c)
			}
		case m.GetCounter() != nil:
			sum += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			sum += m.GetGauge().GetValue()
		}
	}
	return sum
}

// Memory is the aggregator's live memory right after a collection.
type Memory struct{ Heap, Stack, Goroutines float64 }

// Sub is m - o.
func (m Memory) Sub(o Memory) Memory {
	return Memory{m.Heap - o.Heap, m.Stack - o.Stack, m.Goroutines - o.Goroutines}
}

// Live is heap plus stacks.
func (m Memory) Live() float64 { return m.Heap + m.Stack }

func (m Memory) String() string {
	return fmt.Sprintf("%.1f MiB (heap %.1f + stacks %.1f, %.0f goroutines)", m.Live()/(1<<20), m.Heap/(1<<20), m.Stack/(1<<20), m.Goroutines)
}

// LiveMemory runs a collection in the aggregator (a heap profile with gc=1
// does; it serves pprof on its metrics address with --pprof) and reads its
// live heap, stacks and goroutines from its metrics.
func LiveMemory(metricsAddr string) (Memory, error) {
	resp, err := http.Get("http://" + metricsAddr + "/debug/pprof/heap?gc=1")
	if err != nil {
		return Memory{}, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	m, err := Gather(metricsAddr)
	if err != nil {
		return Memory{}, err
	}
	return Memory{
		Heap:       Value(m, "go_memstats_alloc_bytes", nil),
		Stack:      Value(m, "go_memstats_stack_inuse_bytes", nil),
		Goroutines: Value(m, "go_goroutines", nil),
	}, nil
}

// ThreadsCPU is the CPU time pid's threads have run, from each thread's
// /proc/<pid>/task/<tid>/schedstat (nanoseconds; /proc/<pid>/stat counts
// clock ticks of 10 ms, a tenth of what the agent uses in a minute). A
// thread that exits takes its time with it; Go's threads do not exit.
func ThreadsCPU(pid int) (time.Duration, error) {
	fs, err := procfs.NewFS(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	if err != nil || len(tasks) == 0 {
		return 0, fmt.Errorf("list the threads of %d: %v", pid, err)
	}
	var total time.Duration
	for _, t := range tasks {
		tid, err := strconv.Atoi(filepath.Base(t))
		if err != nil {
			continue
		}
		p, err := fs.Proc(tid)
		if err != nil {
			continue
		}
		st, err := p.Schedstat()
		if err != nil {
			continue // exited meanwhile
		}
		total += time.Duration(st.RunningNanoseconds)
	}
	return total, nil
}

// Load is the machine's load average (/proc/loadavg) at one instant.
type Load struct{ Load1, Load5, Load15 float64 }

func (l Load) String() string {
	return fmt.Sprintf("%.2f %.2f %.2f (1, 5, 15 min)", l.Load1, l.Load5, l.Load15)
}

// LoadAvg is the machine's load average now. A bench prints it before each
// run: on a shared machine the figures of a run mean little without it.
func LoadAvg() (Load, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return Load{}, err
	}
	l, err := fs.LoadAvg()
	if err != nil {
		return Load{}, err
	}
	return Load{l.Load1, l.Load5, l.Load15}, nil
}

// MachineCPU is the machine's CPU time (/proc/stat, every CPU together):
// busy (everything but idle and iowait) and total, in seconds.
func MachineCPU() (busy, total float64, err error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, 0, err
	}
	st, err := fs.Stat()
	if err != nil {
		return 0, 0, err
	}
	c := st.CPUTotal
	idle := c.Idle + c.Iowait
	busy = c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal
	return busy, busy + idle, nil
}

// ParseMetrics reads metrics in Prometheus' text format (an apiserver's
// /metrics, say).
func ParseMetrics(r io.Reader) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(r)
}
