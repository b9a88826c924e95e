package drainserver

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cozystack/cozy-health/aggregator/internal/drain"
	"github.com/cozystack/cozy-health/aggregator/internal/drain/draintest"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// The intent over both front ends: node-3 of a healthy 3-member etcd is
// safe to reboot and blocked for a decommission (its member is not
// removed); an intent that is neither is refused and counted.

func TestHTTPIntent(t *testing.T) {
	svc, _, _ := newTestService(t, draintest.EtcdCluster(3, nil))
	base := serveHTTP(t, NewHandler(svc, nil))

	code, body := get(t, base+Path+"?node=node-3", "")
	require.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, "safe", body["verdict"])
	assert.Equal(t, "reboot", body["intent"], "no intent is a reboot")

	code, body = get(t, base+Path+"?node=node-3&intent=reboot", "")
	require.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, "safe", body["verdict"])

	code, body = get(t, base+Path+"?node=node-3&intent=decommission", "")
	require.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, "decommission", body["intent"])
	assert.Equal(t, "blocked", body["verdict"])
	first := body["reasons"].([]any)[0].(map[string]any)
	assert.Equal(t, drain.RuleRaftMemberRemoved, first["rule"])
	assert.Contains(t, first["message"], "remove the member first")

	code, body = get(t, base+Path+"?node=node-3&intent=retire", "")
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Equal(t, `intent "retire": want reboot or decommission`, body["error"])
	assert.Equal(t, 1.0, testutil.ToFloat64(svc.m.rejected.WithLabelValues("http", "invalid_intent")))
	assert.Equal(t, 2.0, testutil.ToFloat64(svc.m.checks.WithLabelValues("http", "safe")))
	assert.Equal(t, 1.0, testutil.ToFloat64(svc.m.checks.WithLabelValues("http", "blocked")))
}

func TestGRPCIntent(t *testing.T) {
	svc, _, _ := newTestService(t, draintest.EtcdCluster(3, nil))
	auth, _ := fakeAuthorizer(t)
	client := serveGRPC(t, svc, auth)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = bearer(ctx, goodToken)

	resp, err := client.DrainCheck(ctx, &pb.DrainCheckRequest{Node: "node-3"})
	require.NoError(t, err)
	assert.Equal(t, pb.Verdict_VERDICT_SAFE, resp.Verdict)
	assert.Equal(t, pb.DrainIntent_DRAIN_INTENT_REBOOT, resp.Intent, "unspecified is a reboot")

	resp, err = client.DrainCheck(ctx, &pb.DrainCheckRequest{Node: "node-3", Intent: pb.DrainIntent_DRAIN_INTENT_DECOMMISSION})
	require.NoError(t, err)
	assert.Equal(t, pb.Verdict_VERDICT_BLOCKED, resp.Verdict)
	assert.Equal(t, pb.DrainIntent_DRAIN_INTENT_DECOMMISSION, resp.Intent)
	assert.Equal(t, drain.RuleRaftMemberRemoved, resp.Reasons[0].Rule)

	_, err = client.DrainCheck(ctx, &pb.DrainCheckRequest{Node: "node-3", Intent: pb.DrainIntent(7)})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.Equal(t, 1.0, testutil.ToFloat64(svc.m.rejected.WithLabelValues("grpc", "invalid_intent")))
}

// TestKubectlHealthDrainCheckIntent runs the built plugin with --intent
// against the handler on a loopback listener.
func TestKubectlHealthDrainCheckIntent(t *testing.T) {
	svc, _, _ := newTestService(t, draintest.EtcdCluster(3, nil))
	base := serveHTTP(t, NewHandler(svc, nil))

	code, out, errOut := runPlugin(t, "drain-check", "node-3", "--aggregator-url", base)
	assert.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "Node node-3: SAFE\n")

	code, out, errOut = runPlugin(t, "drain-check", "node-3", "--intent", "decommission", "--aggregator-url", base)
	assert.Equal(t, 1, code, errOut)
	t.Log("\n" + out)
	assert.Contains(t, out, "Node node-3: BLOCKED (decommission)")
	assert.Regexp(t, `blocked\s+raft-member-removed\s+etcd: node-3 still holds a voting member`, out)

	code, _, errOut = runPlugin(t, "drain-check", "node-3", "--intent", "retire", "--aggregator-url", base)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `--intent: intent "retire": want reboot or decommission`)

	// An aggregator that ignores the intent (one that predates it) answers
	// a reboot: the plugin refuses to pass it off as a decommission's.
	old := serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"node": "node-3", "verdict": "safe", "reasons": []any{}})
	}))
	code, _, errOut = runPlugin(t, "drain-check", "node-3", "--intent", "decommission", "--aggregator-url", old)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "the aggregator does not judge intents")
}
