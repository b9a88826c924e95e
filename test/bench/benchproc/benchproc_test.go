package benchproc

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Stat's CPU time is the kernel's getrusage of the same process (to the
// clock tick of /proc/PID/stat, USER_HZ 100, plus what the process burned
// between the two reads), and Sample sees a process that spins use CPU and
// memory.
func TestStatAndSample(t *testing.T) {
	var stop atomic.Bool
	defer stop.Store(true)
	go func() {
		for x := 0; !stop.Load(); x++ {
			_ = x * x
		}
	}()
	u, err := Sample(os.Getpid(), 300*time.Millisecond, 50*time.Millisecond)
	require.NoError(t, err)
	assert.Positive(t, u.CPU, "a spinning goroutine uses CPU")
	assert.Positive(t, u.Samples)
	assert.Positive(t, u.AnonMax)
	assert.Positive(t, u.FileAvg, "the test binary's own pages")
	assert.GreaterOrEqual(t, u.RSSMax, u.RSSAvg)
	assert.GreaterOrEqual(t, u.RSSAvg, u.AnonAvg)

	var before, after syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &before))
	cpu, rss, err := Stat(os.Getpid())
	require.NoError(t, err)
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &after))
	seconds := func(r syscall.Rusage) float64 {
		return float64(r.Utime.Nano()+r.Stime.Nano()) / 1e9
	}
	assert.GreaterOrEqual(t, cpu, seconds(before)-0.02, "/proc's CPU time against getrusage before the read")
	assert.LessOrEqual(t, cpu, seconds(after)+0.02, "/proc's CPU time against getrusage after the read")
	assert.Positive(t, rss)
	assert.Contains(t, RSSParts(os.Getpid()), "RssAnon ")
}

// LoadAvg reads /proc/loadavg as it stands, and MachineCPU counts busy
// time that grows while this process spins.
func TestLoadAvgAndMachineCPU(t *testing.T) {
	l, err := LoadAvg()
	require.NoError(t, err)
	raw, err := os.ReadFile("/proc/loadavg")
	require.NoError(t, err)
	var l1 float64
	_, err = fmt.Sscan(string(raw), &l1)
	require.NoError(t, err)
	assert.InDelta(t, l1, l.Load1, 0.5, "the 1-minute load of /proc/loadavg")
	assert.Contains(t, l.String(), "(1, 5, 15 min)")

	busy0, total0, err := MachineCPU()
	require.NoError(t, err)
	deadline := time.Now().Add(200 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = x * x
	}
	busy1, total1, err := MachineCPU()
	require.NoError(t, err)
	assert.Greater(t, busy1, busy0, "spinning is busy time")
	assert.GreaterOrEqual(t, total1-total0, busy1-busy0)
}
