// Package benchproc is what the benchmarks that run a real
// cozy-health-aggregator process share: the binary and its free ports, its
// CPU time and RSS from /proc, its live memory after a forced collection,
// and its metrics as Prometheus would scrape them.
package benchproc

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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

// Stat is pid's CPU time (utime+stime) in seconds and its RSS in bytes.
func Stat(pid int) (cpu float64, rss int64, err error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(fields[11], 64)
	st, _ := strconv.ParseFloat(fields[12], 64)
	const clkTck = 100 // USER_HZ on Linux
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "VmRSS:") {
			kb, _ := strconv.ParseInt(strings.Fields(sc.Text())[1], 10, 64)
			rss = kb * 1024
		}
	}
	return (ut + st) / clkTck, rss, nil
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

// RSSParts says how much of pid's RSS is anonymous memory and how much
// file-backed (the executable's pages).
func RSSParts(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && (f[0] == "RssAnon:" || f[0] == "RssFile:") {
			kb, _ := strconv.ParseFloat(f[1], 64)
			parts = append(parts, fmt.Sprintf("%s %.1f MiB", strings.TrimSuffix(f[0], ":"), kb/1024))
		}
	}
	return strings.Join(parts, ", ")
}

// Gather scrapes the aggregator's metrics once, as Prometheus would.
func Gather(addr string) (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
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
