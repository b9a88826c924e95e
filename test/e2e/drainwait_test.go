package e2e

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	healthv1alpha1 "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
	"github.com/cozystack/cozy-health/test/harness"
	"github.com/cozystack/cozy-health/test/lab"
)

// `kubectl health drain-check --wait NODE`, the gate of a rolling reboot,
// on the lab: it blocks while NODE is blocked and exits 0 once a fault
// heals; at --timeout it exits with the last verdict (1 blocked, 2 unknown);
// an answer waiting cannot change (no such node) or no answer at all ends
// in 2.
//
// Each fault's check starts once the Health objects show the fact its
// answer turns on (node-2's etcd member Down; node-3's heartbeat missed),
// and asks the replica that wrote them (the Lease holder): a drain answer
// is never older than what its replica's state had accepted when it was
// asked (issue 34 item 9: it once answered safe from a snapshot taken the
// second before node-2's report), so from the first answer on it must be
// the one asserted, whatever the load.
func TestDrainCheckWait(t *testing.T) {
	harness.SkipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	l := upLab(ctx, t)
	plugin := filepath.Join(binDir(t), "kubectl-health")
	// writerURL is the drain check of the replica holding the Lease: the
	// one whose state the Health objects are written from.
	writerURL := func(t *testing.T) string {
		t.Helper()
		id, err := lab.LeaderIdentity(ctx, l.State)
		require.NoError(t, err)
		for _, a := range l.State.Aggregators {
			if a.Name == id {
				return "http://" + a.HTTP
			}
		}
		t.Fatalf("the Lease holder %q is none of the lab's aggregators", id)
		return ""
	}
	both := func(a, b lab.Condition) lab.Condition {
		return func(hs map[string]*healthv1alpha1.Health, now time.Time) (bool, string) {
			okA, seenA := a(hs, now)
			okB, seenB := b(hs, now)
			return okA && okB, seenA + "; " + seenB
		}
	}
	fault := func(t *testing.T, node, f string) {
		t.Helper()
		msg, err := lab.Fault(ctx, l.State.Dir, node, f, "")
		require.NoError(t, err)
		t.Log(msg)
	}
	wait := func(t *testing.T, what string, bound time.Duration, cond lab.Condition) {
		t.Helper()
		took, err := l.WaitFor(ctx, nil, what, bound, cond)
		require.NoError(t, err)
		t.Logf("%s after %s", what, took.Round(100*time.Millisecond))
	}
	start := func(args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
		cmd := exec.CommandContext(ctx, plugin, append([]string{"drain-check"}, args...)...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		require.NoError(t, cmd.Start())
		return cmd, &out, &errOut
	}
	exitCode := func(err error) int {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		require.NoError(t, err)
		return 0
	}
	run := func(args ...string) (int, string, string) {
		cmd, out, errOut := start(args...)
		code := exitCode(cmd.Wait())
		t.Logf("drain-check %v: exit %d\n%s%s", args, code, out, errOut)
		return code, out.String(), errOut.String()
	}

	wait(t, "all Healthy", boundRecover, lab.AllHealthy(components))
	url := writerURL(t)
	code, out, _ := run("node-1", "--wait", "--timeout", "1m", "--interval", "1s", "--aggregator-url", url)
	require.Equal(t, 0, code, "a healthy cluster: node-1 is safe")
	assert.Contains(t, out, "Node node-1: SAFE")

	// node-2's etcd stopped: draining node-1 would leave 1 of 3 voters.
	// Once etcd's Health object shows node-2's member Down, every answer
	// of its writer is blocked: --wait never sees safe, and exits 1 at
	// --timeout.
	fault(t, "node-2", "etcd-stop")
	wait(t, "etcd Degraded, node-2's member Down", boundFault, both(
		lab.ComponentIs("etcd", healthv1alpha1.StatusDegraded, "node-2"),
		lab.NodeEntryIs("etcd", "node-2", healthv1alpha1.StatusDown, "")))
	url = writerURL(t)
	code, out, errOut := run("node-1", "--wait", "--timeout", "5s", "--interval", "1s", "--aggregator-url", url)
	assert.Equal(t, 1, code, "still blocked at --timeout: exit 1")
	assert.Contains(t, out, "Node node-1: BLOCKED")
	assert.Contains(t, errOut, "drain-check node-1: blocked (etcd-quorum: ")
	assert.Contains(t, errOut, "not safe within 5s")

	// --wait blocks while blocked and returns 0 once node-2's etcd is back.
	cmd, out2, errOut2 := start("node-1", "--wait", "--timeout", "5m", "--interval", "1s", "--aggregator-url", url, "-o", "json")
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	require.Eventually(t, func() bool { return bytes.Contains(errOut2.Bytes(), []byte("blocked (etcd-quorum")) }, time.Minute, 200*time.Millisecond,
		"the waiting plugin saw node-1 blocked")
	select {
	case err := <-exited:
		t.Fatalf("drain-check --wait returned while node-1 is blocked: %v\n%s%s", err, out2, errOut2)
	default:
	}
	fault(t, "node-2", "etcd-start")
	select {
	case err := <-exited:
		require.Equal(t, 0, exitCode(err), "safe once node-2's etcd is back: %s%s", out2, errOut2)
	case <-ctx.Done():
		t.Fatal("drain-check --wait did not return")
	}
	t.Logf("drain-check --wait after the heal:\n%s%s", out2, errOut2)
	assert.Contains(t, out2.String(), `"verdict": "safe"`)
	assert.Contains(t, errOut2.String(), "drain-check node-1: safe after ")
	wait(t, "all Healthy", boundRecover, lab.AllHealthy(components))

	// node-3's agent silent: its own data is missing, the answer unknown.
	fault(t, "node-3", "agent-stop")
	wait(t, "node-3 AgentSilent", boundHeartbeat, lab.NodeEntryIs("etcd", "node-3", healthv1alpha1.StatusUnknown, "AgentSilent"))
	url = writerURL(t)
	code, out, _ = run("node-3", "--wait", "--timeout", "3s", "--interval", "1s", "--aggregator-url", url)
	assert.Equal(t, 2, code, "unknown at --timeout: exit 2")
	assert.Contains(t, out, "Node node-3: UNKNOWN")
	fault(t, "node-3", "agent-start")

	// No such node: waiting cannot change it, so no waiting.
	code, _, errOut = run("ghost", "--wait", "--timeout", "5m", "--aggregator-url", url)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "HTTP 404")
	assert.NotContains(t, errOut, "waiting up to")

	// Nothing answers: exit 2 with the last error.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close())
	code, _, errOut = run("node-1", "--wait", "--timeout", "3s", "--interval", "1s", "--aggregator-url", closed)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "not safe within 3s, and the last attempt failed")
}
