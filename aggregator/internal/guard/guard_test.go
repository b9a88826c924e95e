package guard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/cozystack/cozy-health/aggregator/internal/drain"
)

func pod(ns, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}, Spec: corev1.PodSpec{NodeName: node}}
}

func node(name string, cordoned bool, ann map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann}, Spec: corev1.NodeSpec{Unschedulable: cordoned}}
}

func result(v drain.Verdict) drain.Result {
	return drain.Result{Verdict: v, Reasons: []drain.Reason{
		{Rule: "etcd-quorum", Verdict: v, Message: "etcd says " + string(v)},
		{Rule: "linstor-last-replica", Verdict: drain.Safe, Message: "fine"},
	}}
}

func TestDecide(t *testing.T) {
	verdict := drain.Blocked
	var asked drain.Intent
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	g, err := New(Config{ExemptNamespaces: []string{"cozy-health"}, UnknownFor: time.Minute},
		func(_ string, intent drain.Intent) (drain.Result, error) {
			asked = intent
			if verdict == "" {
				return drain.Result{}, errors.New("boom")
			}
			return result(verdict), nil
		}, clk, nil, nil)
	require.NoError(t, err)

	for _, c := range []struct {
		name    string
		in      Input
		verdict drain.Verdict
		allowed bool
		why     string
		intent  drain.Intent
		message string
	}{
		{name: "own pods are exempt", in: Input{Namespace: "cozy-health", Pod: pod("cozy-health", "n1"), Node: node("n1", true, nil)}, allowed: true, why: "exempt"},
		{name: "pod gone", in: Input{Namespace: "a"}, allowed: true, why: "pod_gone"},
		{name: "unbound", in: Input{Namespace: "a", Pod: pod("a", "")}, allowed: true, why: "unbound"},
		{name: "node gone", in: Input{Namespace: "a", Pod: pod("a", "n1")}, allowed: true, why: "node_gone"},
		{name: "not cordoned", in: Input{Namespace: "a", Pod: pod("a", "n1"), Node: node("n1", false, nil)}, verdict: drain.Blocked, allowed: true, why: "not_cordoned"},
		{name: "override", in: Input{Namespace: "a", Pod: pod("a", "n1"), Node: node("n1", true, map[string]string{AnnotationGuard: GuardDisabled})}, verdict: drain.Blocked, allowed: true, why: "override",
			message: "cozy-health drain guard disabled on node n1 by its annotation health.cozystack.io/drain-guard=disabled"},
		{name: "safe", in: Input{Namespace: "a", Pod: pod("a", "n1"), Node: node("n1", true, nil)}, verdict: drain.Safe, allowed: true, why: "safe", intent: drain.IntentReboot},
		{name: "blocked", in: Input{Namespace: "a", Pod: pod("a", "n1"), Node: node("n1", true, nil)}, verdict: drain.Blocked, why: "blocked", intent: drain.IntentReboot,
			message: "cozy-health: draining n1 (reboot) is blocked: etcd-quorum: etcd says blocked"},
		{name: "decommission intent", in: Input{Namespace: "a", Pod: pod("a", "n1"), Node: node("n1", true, map[string]string{AnnotationIntent: "decommission"})}, verdict: drain.Blocked, why: "blocked", intent: drain.IntentDecommission,
			message: "cozy-health: draining n1 (decommission) is blocked: etcd-quorum: etcd says blocked"},
		{name: "bad intent", in: Input{Namespace: "a", Pod: pod("a", "n1"), Node: node("n1", true, map[string]string{AnnotationIntent: "vacation"})}, verdict: drain.Safe, why: "no_verdict",
			message: `cozy-health: node n1: annotation health.cozystack.io/drain-intent: intent "vacation": want reboot or decommission`},
		{name: "unknown within the bound", in: Input{Namespace: "a", Pod: pod("a", "n2"), Node: node("n2", true, nil)}, verdict: drain.Unknown, why: "unknown", intent: drain.IntentReboot,
			message: "cozy-health: draining n2 (reboot) is unknown: etcd-quorum: etcd says unknown; refused until 1970-01-01T00:17:40Z (1m0s after the cordon), or set the annotation health.cozystack.io/drain-guard=disabled on the Node"},
		{name: "no verdict is unknown", in: Input{Namespace: "a", Pod: pod("a", "n2"), Node: node("n2", true, nil)}, why: "no_verdict", intent: drain.IntentReboot,
			message: "cozy-health: draining n2 (reboot) is unknown: no drain verdict: boom; refused until 1970-01-01T00:17:40Z (1m0s after the cordon), or set the annotation health.cozystack.io/drain-guard=disabled on the Node"},
	} {
		t.Run(c.name, func(t *testing.T) {
			verdict, asked = c.verdict, ""
			d := g.Decide(c.in)
			assert.Equal(t, c.allowed, d.Allowed)
			assert.Equal(t, c.why, d.Why)
			assert.Equal(t, c.intent, asked)
			assert.Equal(t, c.message, d.Message)
		})
	}

	// Past the bound after the cordon was seen: unknown is allowed, with a
	// warning.
	clk.SetTime(clk.Now().Add(time.Minute))
	verdict = drain.Unknown
	d := g.Decide(Input{Namespace: "a", Pod: pod("a", "n2"), Node: node("n2", true, nil)})
	assert.True(t, d.Allowed)
	assert.Equal(t, "unknown_expired", d.Why)
	assert.Equal(t, "cozy-health: draining n2 (reboot) is unknown (etcd-quorum: etcd says unknown), allowed: cordoned more than 1m0s ago", d.Message)
	// A blocked verdict is never allowed by time.
	verdict = drain.Blocked
	assert.False(t, g.Decide(Input{Namespace: "a", Pod: pod("a", "n2"), Node: node("n2", true, nil)}).Allowed)
}

// A dry-run eviction from a Node that is not cordoned (kubectl drain
// --dry-run=server cordons in a dry run too) is judged as a drain that
// cordons now, and leaves no cordon time behind.
func TestDecideDryRunPreviews(t *testing.T) {
	verdict := drain.Blocked
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	g, err := New(Config{UnknownFor: time.Minute}, func(string, drain.Intent) (drain.Result, error) { return result(verdict), nil }, clk, nil, nil)
	require.NoError(t, err)
	preview := func() Decision {
		return g.Decide(Input{Namespace: "a", Pod: pod("a", "n3"), Node: node("n3", false, nil), DryRun: true})
	}

	d := preview()
	assert.False(t, d.Allowed)
	assert.Equal(t, "blocked", d.Why)
	assert.Equal(t, "cozy-health: draining n3 (reboot) is blocked: etcd-quorum: etcd says blocked", d.Message)
	assert.True(t, g.Decide(Input{Namespace: "a", Pod: pod("a", "n3"), Node: node("n3", false, nil)}).Allowed, "the same eviction for real on a schedulable node is not a drain")

	verdict = drain.Safe
	d = preview()
	assert.True(t, d.Allowed)
	assert.Equal(t, "safe", d.Why)

	verdict = drain.Unknown
	d = preview()
	assert.False(t, d.Allowed)
	assert.Equal(t, "unknown", d.Why)
	assert.Contains(t, d.Message, "refused until 1970-01-01T00:17:40Z (1m0s after the cordon)")
	// Later previews count from their own now: no cordon time was kept.
	clk.SetTime(clk.Now().Add(2 * time.Minute))
	d = preview()
	assert.False(t, d.Allowed, "a preview of an unknown drain is refused as the drain would be right after its cordon")
	assert.Contains(t, d.Message, "refused until 1970-01-01T00:19:40Z")
	// The real cordon, seen now, starts its own bound.
	d = g.Decide(Input{Namespace: "a", Pod: pod("a", "n3"), Node: node("n3", true, nil)})
	assert.False(t, d.Allowed)
	assert.Contains(t, d.Message, "refused until 1970-01-01T00:19:40Z")
}

func TestWebhookAnswers429(t *testing.T) {
	g, err := New(Config{}, func(string, drain.Intent) (drain.Result, error) { return result(drain.Blocked), nil }, nil, nil, nil)
	require.NoError(t, err)
	h := NewHandler(g, func(context.Context, string, string) (*corev1.Pod, *corev1.Node, error) {
		return pod("a", "n1"), node("n1", true, nil), nil
	}, nil)
	review := admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: types.UID("u1"), Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			SubResource: "eviction", Operation: admissionv1.Create, Namespace: "a", Name: "p"}}
	body, err := json.Marshal(review)
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body)))
	require.Equal(t, http.StatusOK, rec.Code)
	var got admissionv1.AdmissionReview
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
	require.NotNil(t, got.Response)
	assert.Equal(t, types.UID("u1"), got.Response.UID)
	assert.False(t, got.Response.Allowed)
	assert.Equal(t, int32(http.StatusTooManyRequests), got.Response.Result.Code)
	assert.Equal(t, metav1.StatusReasonTooManyRequests, got.Response.Result.Reason)
	assert.Equal(t, "cozy-health: draining n1 (reboot) is blocked: etcd-quorum: etcd says blocked", got.Response.Result.Message)

	// A dry-run eviction from a schedulable Node is judged (a preview); the
	// same request for real is not a drain.
	h = NewHandler(g, func(context.Context, string, string) (*corev1.Pod, *corev1.Node, error) {
		return pod("a", "n1"), node("n1", false, nil), nil
	}, nil)
	// The dry run arrives either as the request's dryRun (?dryRun=All) or
	// in the Eviction's deleteOptions (kubectl drain --dry-run=server,
	// client-go's Evict), which the apiserver does not copy to the request.
	evictionOf := func(dryRun []string) runtime.RawExtension {
		raw, err := json.Marshal(policyv1.Eviction{TypeMeta: metav1.TypeMeta{APIVersion: "policy/v1", Kind: "Eviction"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p"}, DeleteOptions: &metav1.DeleteOptions{DryRun: dryRun}})
		require.NoError(t, err)
		return runtime.RawExtension{Raw: raw}
	}
	for _, c := range []struct {
		name    string
		request *bool
		object  runtime.RawExtension
		dry     bool
	}{
		{name: "request dryRun", request: ptr.To(true), dry: true},
		{name: "deleteOptions dryRun", request: ptr.To(false), object: evictionOf([]string{metav1.DryRunAll}), dry: true},
		{name: "for real", request: ptr.To(false), object: evictionOf(nil)},
		{name: "no object"},
	} {
		review.Request.DryRun, review.Request.Object = c.request, c.object
		body, err := json.Marshal(review)
		require.NoError(t, err)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body)))
		var got admissionv1.AdmissionReview
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
		assert.Equal(t, !c.dry, got.Response.Allowed, c.name)
	}
	review.Request.DryRun, review.Request.Object = nil, runtime.RawExtension{}

	// Not ready: refused as unavailable, never judged on a partial state.
	h = NewHandler(g, func(context.Context, string, string) (*corev1.Pod, *corev1.Node, error) {
		t.Fatal("looked up while not ready")
		return nil, nil, nil
	}, func() bool { return false })
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body)))
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
	assert.False(t, got.Response.Allowed)
	assert.Equal(t, int32(http.StatusTooManyRequests), got.Response.Result.Code)
}
