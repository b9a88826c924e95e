package agent

import (
	"bytes"
	"context"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	xtrace "golang.org/x/exp/trace"
)

// TestSplitAttributesGoroutinesToTheirCheck runs the split on this
// process: a goroutine dump as the runtime prints it (labels with
// GODEBUG=tracebacklabels=1) and an execution trace in which one "check"
// region starts a goroutine that spins and an unlabelled goroutine spins
// outside any, then a collection runs. The spinning child is the check's;
// the other is the runtime's (no labels); the collector's workers are gc; a goroutine labelled part=runner before the trace is the
// runner's. Each spins for a CPU time it measures itself (RUSAGE_THREAD,
// locked to its thread); a goroutine's running time is its CPU time but for
// its system calls.
func TestSplitAttributesGoroutinesToTheirCheck(t *testing.T) {
	t.Setenv("GODEBUG", "tracebacklabels=1")
	release := make(chan struct{})
	defer close(release)
	ready := make(chan struct{})
	go pprof.Do(context.Background(), pprof.Labels("part", "runner"), func(context.Context) {
		close(ready)
		<-release
	})
	<-ready
	var dump bytes.Buffer
	require.NoError(t, pprof.Lookup("goroutine").WriteTo(&dump, 2))
	before := parseGoroutineLabels(dump.String())
	assert.Contains(t, values(before), "part=runner", "the labelled goroutine, from:\n%s", dump.String())

	var tr bytes.Buffer
	require.NoError(t, trace.Start(&tr))
	// spin works for at least d of CPU time (a goroutine's running time
	// is at least its CPU time).
	spin := func(d time.Duration) {
		var ru syscall.Rusage
		cpu := func() time.Duration {
			require.NoError(t, syscall.Getrusage(syscall.RUSAGE_THREAD, &ru))
			return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		x := 1
		for start := cpu(); cpu()-start < d; {
			for i := range 100000 {
				x = x*31 + i
			}
		}
		sink = x
	}
	ctx := context.Background()
	checkDone, otherDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(checkDone)
		trace.WithRegion(ctx, traceRegion, func() {
			trace.Log(ctx, traceRegion, "spinner")
			child := make(chan struct{})
			go func() { defer close(child); spin(60 * time.Millisecond) }()
			<-child
		})
	}()
	go func() { defer close(otherDone); spin(20 * time.Millisecond) }()
	<-checkDone
	<-otherDone
	runtime.GC()
	trace.Stop()

	onCPU, err := onCPUByGroup(&tr, before)
	require.NoError(t, err)
	// Half: the spinning goroutines read their CPU time with a system
	// call, time the trace does not count as running.
	assert.GreaterOrEqual(t, onCPU["spinner"], 30*time.Millisecond, "the check's child spun 60 ms of CPU: %v", onCPU)
	assert.GreaterOrEqual(t, onCPU[groupRuntime], 10*time.Millisecond, "the unlabelled goroutine spun 20 ms of CPU: %v", onCPU)
	assert.Positive(t, onCPU[groupGC], "a collection ran: its workers' time: %v", onCPU)
}

var sink int

func values(m map[xtrace.GoID]string) []string {
	var v []string
	for _, s := range m {
		v = append(v, s)
	}
	return v
}
