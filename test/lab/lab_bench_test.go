package lab

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkLabUpDown starts and stops the lab as `cozy-health-lab up` and
// `down` do (every process detached, the source servers in the lab daemon
// process) $COZY_HEALTH_BENCH_LAB_RUNS times in a row (default 20), with
// 1, 2 and 3 nodes in turn, and reports how many starts failed, each with
// its error and the end of the lab daemon's log, and how many times a port
// picked for an etcd member or an aggregator was taken before it was bound
// (the lab then starts it again on fresh ports). Any failure fails the
// benchmark: the lab must not flake. Run by `make bench-lab`.
func BenchmarkLabUpDown(b *testing.B) {
	runs := 20
	if v := os.Getenv("COZY_HEALTH_BENCH_LAB_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("COZY_HEALTH_BENCH_LAB_RUNS: want a positive integer, got %q", v)
		}
		runs = n
	}
	for range b.N {
		failures, retries := 0, 0
		var upTime time.Duration
		for i := range runs {
			nodes := 1 + i%3
			dir := filepath.Join(b.TempDir(), "lab")
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			start := time.Now()
			l, err := Up(ctx, Options{Dir: dir, Nodes: nodes, Detach: true, Log: func(format string, args ...any) {
				if line := fmt.Sprintf(format, args...); strings.Contains(line, "fresh") {
					retries++
					b.Logf("run %d (%d nodes): %s", i+1, nodes, line)
				}
			}})
			cancel()
			if err != nil {
				failures++
				b.Logf("run %d (%d nodes): up failed after %s: %v\n%s", i+1, nodes, time.Since(start).Round(time.Millisecond), err, logTail(filepath.Join(dir, "logs", "lab-daemon.log"), 5))
				continue
			}
			upTime += time.Since(start)
			if err := l.Down(); err != nil {
				failures++
				b.Logf("run %d (%d nodes): down failed: %v", i+1, nodes, err)
				continue
			}
			b.Logf("run %d (%d nodes): up in %s", i+1, nodes, time.Since(start).Round(time.Millisecond))
		}
		ok := runs - failures
		fmt.Printf("lab up/down: %d runs, %d failed, %d port retries\n", runs, failures, retries)
		b.ReportMetric(float64(failures), "failures")
		b.ReportMetric(float64(retries), "retries")
		if ok > 0 {
			b.ReportMetric(upTime.Seconds()/float64(ok), "s/up")
		}
		if failures > 0 {
			b.Errorf("%d of %d lab starts failed", failures, runs)
		}
	}
}

// logTail returns the last n lines of the file at path ("" when it cannot
// be read).
func logTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	out := ""
	for _, l := range lines {
		out += "    " + path + ": " + l + "\n"
	}
	return out
}
