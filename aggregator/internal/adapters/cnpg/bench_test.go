package cnpg

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/cozystack/cozy-health/aggregator/internal/adapterkit"
)

// BenchmarkJudge2000 judges 2,000 backed-up Clusters, each with a daily
// ScheduledBackup (the adapter's share of make bench-adapters).
func BenchmarkJudge2000(b *testing.B) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var cl, sb []*adapterkit.Object
	for i := range 2000 {
		ns := fmt.Sprintf("tenant-t%03d", i%50)
		c := &adapterkit.Object{Data: &cluster{configured: true, server: "pg", lastSuccess: now.Add(-2 * time.Hour)}}
		c.Name, c.Namespace, c.CreationTimestamp = fmt.Sprintf("pg-%05d", i), ns, metav1.NewTime(now.Add(-48*time.Hour))
		s := &adapterkit.Object{Data: &scheduled{cluster: c.Name, schedule: "0 0 3 * * *"}}
		s.Name, s.Namespace, s.CreationTimestamp = c.Name+"-daily", ns, c.CreationTimestamp
		cl, sb = append(cl, c), append(sb, s)
	}
	stores := map[schema.GroupVersionResource]cache.Store{Clusters.GVR: adapterkit.StoreOf(cl...), ScheduledBackups.GVR: adapterkit.StoreOf(sb...)}
	b.ResetTimer()
	for range b.N {
		in := adapterkit.NewInput(now, "cozy-system", stores, nil, nil)
		if got := New().Judge(in); len(got) != 2000 {
			b.Fatalf("%d findings", len(got))
		}
	}
}
