package ovnreal

import (
	"context"
	"testing"
	"time"

	"github.com/cozystack/cozy-health/test/harness"
)

// TestStart starts the whole fixture and reads every member's status
// with the upstream client.
func TestStart(t *testing.T) {
	harness.SkipShort(t)
	t0 := time.Now()
	c := Start(t, Options{OVS: true, Northd: true})
	t.Logf("real OVN (%s) up in %s", Version(), time.Since(t0).Round(time.Millisecond))
	ctx := context.Background()
	for _, db := range []string{Northbound, Southbound} {
		for i := range c.Members {
			text, err := c.ClusterStatus(ctx, i, db)
			if err != nil {
				t.Fatal(err)
			}
			if field(text, "Status") != "cluster member" {
				t.Fatalf("member %d of %s: %s", i, db, text)
			}
		}
	}
	out, err := Appctl(ctx, c.Node.ControllerCtl(), "connection-status")
	if err != nil || out != "connected\n" {
		t.Fatalf("ovn-controller: %q %v", out, err)
	}
}
