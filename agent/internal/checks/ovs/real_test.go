package ovs

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/test/harness"
	"github.com/cozystack/cozy-health/test/ovnreal"
)

// verdictBound is how long a fault may take to reach its verdict before
// the test fails; the figures logged are what is measured.
const verdictBound = 30 * time.Second

// TestRealOVS runs the check against a real Open vSwitch node (Debian's
// openvswitch-switch: an Open_vSwitch ovsdb-server, a userspace
// ovs-vswitchd, and ovn-host's ovn-controller connected to a real
// 3-member OVN_Southbound) and asserts the verdict of every fault, with
// the time to it.
func TestRealOVS(t *testing.T) {
	harness.SkipShort(t)
	c := ovnreal.Start(t, ovnreal.Options{OVS: true})
	n := c.Node
	chk := New(Config{DBSocket: n.DBSocket, ControllerPidfile: n.ControllerPidfile})
	var timings []string
	t.Cleanup(func() {
		t.Logf("real OVS/OVN (%s), time to verdict per fault:\n%s", ovnreal.Version(), strings.Join(timings, "\n"))
	})
	// until polls the check (with a 2 s deadline, as the agent's) until
	// match says yes, and logs the time from t0.
	until := func(t *testing.T, fault string, t0 time.Time, want string, match func([]report.Observation, error) bool) []report.Observation {
		t.Helper()
		deadline := time.Now().Add(verdictBound)
		var last string
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			obs, err := chk.Run(ctx)
			cancel()
			if match(obs, err) {
				line := fmt.Sprintf("%-28s %-40s after %s", fault, want, time.Since(t0).Round(time.Millisecond))
				t.Log(line)
				timings = append(timings, line)
				return obs
			}
			last = fmt.Sprint(obs, err)
			if time.Now().After(deadline) {
				t.Fatalf("%s: not %s within %s; last: %s", fault, want, verdictBound, last)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	is := func(status report.Status, reason string) func([]report.Observation, error) bool {
		return func(obs []report.Observation, err error) bool {
			return err == nil && len(obs) == 1 && obs[0].Status == status && obs[0].Reason == reason
		}
	}
	healthy := func(t *testing.T, fault string, t0 time.Time) {
		t.Helper()
		until(t, fault, t0, "Healthy/OVSHealthy", is(report.StatusHealthy, ReasonHealthy))
	}

	t.Run("healthy", func(t *testing.T) {
		obs := until(t, "start", time.Now(), "Healthy/OVSHealthy", is(report.StatusHealthy, ReasonHealthy))
		assert.Contains(t, obs[0].Message, "ovn-controller connected to the southbound database")
		assert.Contains(t, obs[0].Message, "Open vSwitch 3.")
	})

	for _, d := range []struct {
		name                     string
		proc                     *ovnreal.Proc
		notRunning, unresponsive string
	}{
		{"ovs-vswitchd", n.Vswitchd, ReasonVswitchdNotRunning, ReasonVswitchdUnresponsive},
		{"ovn-controller", n.Controller, ReasonOVNControllerNotRunning, ReasonOVNControllerUnresponsive},
	} {
		t.Run(d.name, func(t *testing.T) {
			for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
				t0 := time.Now()
				require.NoError(t, d.proc.Stop(sig))
				until(t, d.name+" "+sigName(sig), t0, "Down/"+d.notRunning, is(report.StatusDown, d.notRunning))
				t0 = time.Now()
				require.NoError(t, d.proc.Start())
				healthy(t, d.name+" restarted", t0)
			}
			t0 := time.Now()
			require.NoError(t, d.proc.Signal(syscall.SIGSTOP))
			until(t, d.name+" SIGSTOP", t0, "Unknown/"+d.unresponsive, is(report.StatusUnknown, d.unresponsive))
			t0 = time.Now()
			require.NoError(t, d.proc.Signal(syscall.SIGCONT))
			healthy(t, d.name+" SIGCONT", t0)
		})
	}

	t.Run("Open_vSwitch ovsdb-server", func(t *testing.T) {
		t0 := time.Now()
		require.NoError(t, n.OVSDB.Stop(syscall.SIGTERM))
		until(t, "ovsdb-server SIGTERM", t0, "Down/"+ReasonOVSDBSocketMissing, is(report.StatusDown, ReasonOVSDBSocketMissing))
		t0 = time.Now()
		require.NoError(t, n.OVSDB.Start())
		healthy(t, "ovsdb-server restarted", t0)

		t0 = time.Now()
		require.NoError(t, n.OVSDB.Stop(syscall.SIGKILL))
		until(t, "ovsdb-server SIGKILL", t0, "Down/"+ReasonOVSDBNotListening, is(report.StatusDown, ReasonOVSDBNotListening))
		t0 = time.Now()
		require.NoError(t, n.OVSDB.Start())
		healthy(t, "ovsdb-server restarted", t0)

		// Frozen, the database cannot be read: Unknown naming it within
		// half the deadline, ovs-vswitchd and ovn-controller still read.
		t0 = time.Now()
		require.NoError(t, n.OVSDB.Signal(syscall.SIGSTOP))
		obs := until(t, "ovsdb-server SIGSTOP", t0, "Unknown/"+ReasonOVSDBUnresponsive, is(report.StatusUnknown, ReasonOVSDBUnresponsive))
		assert.Contains(t, obs[0].Message, n.DBSocket)
		assert.Contains(t, obs[0].Message, "ovs-vswitchd up")
		assert.Contains(t, obs[0].Message, "ovn-controller")
		t0 = time.Now()
		require.NoError(t, n.OVSDB.Signal(syscall.SIGCONT))
		healthy(t, "ovsdb-server SIGCONT", t0)
	})

	t.Run("interface with an error", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), verdictBound)
		defer cancel()
		t0 := time.Now()
		// A port whose device does not exist: ovs-vswitchd sets its
		// Interface's error and ofport -1.
		require.NoError(t, c.Vsctl(ctx, "add-port", "br-int", "nosuchdev0", "--",
			"set", "Interface", "nosuchdev0", "external_ids:pod_name=web-0", "external_ids:pod_namespace=tenant-a"))
		obs := until(t, "interface with an error", t0, "Degraded/"+ReasonInterfaceErrors, is(report.StatusDegraded, ReasonInterfaceErrors))
		assert.Contains(t, obs[0].Message, "nosuchdev0 (pod tenant-a/web-0)")
		assert.Equal(t, 1.0, obs[0].Attributes[report.AttrInterfacesWithErrors])
		t0 = time.Now()
		require.NoError(t, c.Vsctl(ctx, "del-port", "br-int", "nosuchdev0"))
		healthy(t, "interface removed", t0)
	})

	t.Run("southbound lost", func(t *testing.T) {
		t0 := time.Now()
		for _, m := range c.Members {
			require.NoError(t, m.SB.Stop(syscall.SIGTERM))
		}
		until(t, "every SB member stopped", t0, "Degraded/"+ReasonOVNControllerNotConnected, is(report.StatusDegraded, ReasonOVNControllerNotConnected))
		t0 = time.Now()
		for _, m := range c.Members {
			require.NoError(t, m.SB.Start())
		}
		healthy(t, "SB back", t0)
	})
}

func sigName(s syscall.Signal) string {
	switch s {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGKILL:
		return "SIGKILL"
	}
	return s.String()
}
