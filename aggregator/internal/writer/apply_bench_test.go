package writer

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/test/bench/benchproc"
	"github.com/cozystack/cozy-health/test/harness"
)

// nodeSnapshot is n nodes reporting one disk observation each, as the
// rollup sees them at now: fresh and Healthy ("healthy"), silent past
// their grace ("silent": every node Unknown/HeartbeatMissed, as after a
// network partition), or Degraded with a message of status.MaxMessage
// bytes ("degraded").
func nodeSnapshot(n int, scenario string, now time.Time) state.Snapshot {
	snap := make(state.Snapshot, n)
	for i := range n {
		name := fmt.Sprintf("node-%05d", i)
		o := report.Observation{Component: report.ComponentDisk, Check: report.CheckFsyncProbe, Status: report.StatusHealthy, Reason: "LatencyOK",
			ResourceRef: &report.ResourceRef{Kind: report.KindNode, Name: name}}
		at := now
		switch scenario {
		case "silent":
			at = now.Add(-time.Minute)
		case "degraded":
			o.Status, o.Reason, o.Message = report.StatusDegraded, "LatencyHigh", strings.Repeat("m", status.MaxMessage)
		}
		r := &report.NodeReport{NodeName: name, AgentInstanceID: "i", Sequence: 1, SentAt: at, Interval: 5 * time.Second, Observations: []report.Observation{o}}
		snap[name] = state.Entry{Report: r, ReceivedAt: at, Role: state.RoleWorker}
	}
	return snap
}

// BenchmarkStatusApply measures one status apply of the disk object on a
// real apiserver at 1,000, 5,000 and 10,000 nodes
// (COZY_HEALTH_BENCH_APPLY_NODES overrides), every node Healthy, silent
// or Degraded: the bytes sent and stored, the aggregator's share (bound and
// encode), the round trip, the apiserver's and etcd's CPU per write, and,
// for comparison, a JSON merge patch of the times and one node entry (what
// a writer sending only the changed keys would send). With
// COZY_HEALTH_BENCH_APPLY_PROFILE=DIR it writes a CPU profile of the
// apiserver over 10 s of applies of the largest healthy object there.
//
//	go test -run '^$' -bench BenchmarkStatusApply -benchtime 1x ./aggregator/internal/writer/
func BenchmarkStatusApply(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	const ns = "cozy-system"
	cp, hc, _, w := startWriter(ctx, b, ns, zap.NewNop())
	opts := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	_, err := hc.HealthV1alpha1().Healths(ns).Apply(ctx, specApply(ns, report.ComponentDisk, metav1.Duration{Duration: 30 * time.Second}), opts)
	require.NoError(b, err)
	sizes := []int{1000, 5000, 10000}
	if v := os.Getenv("COZY_HEALTH_BENCH_APPLY_NODES"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			require.NoError(b, err)
			sizes = append(sizes, n)
		}
	}
	profileDir := os.Getenv("COZY_HEALTH_BENCH_APPLY_PROFILE")
	const applies = 6
	for _, n := range sizes {
		for _, scenario := range []string{"healthy", "silent", "degraded"} {
			now := time.Now()
			cs := compute(nodeSnapshot(n, scenario, now), now)[report.ComponentDisk]
			var encode time.Duration
			var body []byte
			for range applies {
				t0 := time.Now()
				bc, _ := boundStatus(cs)
				body, err = json.Marshal(statusApply(ns, bc))
				require.NoError(b, err)
				encode += time.Since(t0)
			}
			profile := profileDir != "" && n == sizes[len(sizes)-1] && scenario == "healthy"
			profiled := make(chan struct{})
			if profile {
				go func() {
					defer close(profiled)
					data, err := hc.HealthV1alpha1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "10").DoRaw(ctx)
					if err == nil {
						err = os.WriteFile(filepath.Join(profileDir, fmt.Sprintf("apiserver-apply-%d.pprof", n)), data, 0o644)
					}
					if err != nil {
						b.Errorf("apiserver profile: %v", err)
					}
				}()
			} else {
				close(profiled)
			}
			cpu0 := cpuOf(b, cp)
			var rtt time.Duration
			var applyErr error
			k := 0
			for deadline := time.Now().Add(10 * time.Second); k < applies || (profile && time.Now().Before(deadline)); k++ {
				// A new observedAt each time, as the refresh writes.
				cs.ObservedAt = time.Now()
				cs.FreshUntil = cs.ObservedAt.Add(30 * time.Second)
				t0 := time.Now()
				bc, _ := boundStatus(cs)
				applyErr = w.applyStatus(ctx, statusApply(ns, bc), opts)
				rtt += time.Since(t0)
				if applyErr != nil {
					break
				}
			}
			<-profiled
			cpuApply := (cpuOf(b, cp) - cpu0) / float64(max(k, 1))
			raw, err := hc.HealthV1alpha1().RESTClient().Get().Namespace(ns).Resource("healths").Name(report.ComponentDisk).DoRaw(ctx)
			require.NoError(b, err)
			result := "ok"
			if applyErr != nil {
				result = "FAILED: " + applyErr.Error()
			}
			fmt.Printf("    %5d nodes %-8s body %8d B (%4.0f B/node), stored %8d B; bound+encode %5.1f ms, apply %7.1f ms, apiserver+etcd CPU %6.1f ms per write; %s\n",
				n, scenario, len(body), float64(len(body))/float64(n), len(raw), ms(encode)/applies, ms(rtt)/float64(max(k, 1)), cpuApply*1000, result)
			if scenario != "healthy" || applyErr != nil {
				continue
			}
			c0 := cpuOf(b, cp)
			var prtt time.Duration
			for i := range applies {
				t0 := time.Now()
				body := fmt.Sprintf(`{"status":{"observedAt":%q,"freshUntil":%q,"nodes":{"node-00007":{"status":%q}}}}`,
					time.Now().UTC().Format(time.RFC3339), time.Now().Add(30*time.Second).UTC().Format(time.RFC3339), []string{"Degraded", "Healthy"}[i%2])
				err := hc.HealthV1alpha1().RESTClient().Patch(types.MergePatchType).Namespace(ns).Resource("healths").Name(report.ComponentDisk).
					SubResource("status").Param("fieldManager", FieldManager).Body([]byte(body)).Do(ctx).Error()
				require.NoError(b, err)
				prtt += time.Since(t0)
			}
			fmt.Printf("    %5d nodes %-8s merge patch of the times and one entry: %7.1f ms, apiserver+etcd CPU %6.1f ms per write\n",
				n, scenario, ms(prtt)/applies, (cpuOf(b, cp)-c0)*1000/applies)
			// The next scenario's applies take the map back.
		}
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// cpuOf is the CPU seconds the apiserver and etcd have used.
func cpuOf(b *testing.B, cp *harness.ControlPlane) float64 {
	e, a := cp.Pids()
	ce, _, err := benchproc.Stat(e)
	require.NoError(b, err)
	ca, _, err := benchproc.Stat(a)
	require.NoError(b, err)
	return ce + ca
}
