package guard

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"time"

	"go.uber.org/zap"
	admissionv1 "k8s.io/api/admission/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxReviewBytes bounds an AdmissionReview body: an Eviction is small; the
// apiserver sends the object and its options, never a pod spec.
const maxReviewBytes = 256 << 10

// lookupTimeout bounds reading the pod, well inside the webhook's own
// timeout (the chart's timeoutSeconds).
const lookupTimeout = 2 * time.Second

// Handler serves the validating webhook: POST Path with an
// admission.k8s.io/v1 AdmissionReview of a pods/eviction CREATE.
type Handler struct {
	g      *Guard
	lookup Lookup
	// ready tells whether this replica holds the state it answers from
	// (its warm-up is done); until then every eviction the guard would
	// judge is refused as unavailable (429: retried), never judged on a
	// partial state.
	ready func() bool
}

// NewHandler returns the webhook front end of g. ready may be nil (always
// ready).
func NewHandler(g *Guard, lookup Lookup, ready func() bool) *Handler {
	return &Handler{g: g, lookup: lookup, ready: ready}
}

// Mount registers the handler on mux at Path.
func (h *Handler) Mount(mux *http.ServeMux) { mux.Handle(Path, h) }

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		h.g.m.reviews.WithLabelValues("method").Inc()
		w.Header().Set("Allow", "POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewBytes+1))
	if err != nil || len(body) > maxReviewBytes {
		h.g.m.reviews.WithLabelValues("body").Inc()
		http.Error(w, "cannot read the body", http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		h.g.m.reviews.WithLabelValues("body").Inc()
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	req := review.Request
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	switch {
	case req.Resource.Resource != "pods" || req.SubResource != "eviction" || req.Operation != admissionv1.Create:
		// Not what the configuration sends: allowed, counted.
		h.g.m.reviews.WithLabelValues("kind").Inc()
	default:
		h.answer(r.Context(), req, resp)
	}
	review.Request = nil
	review.Response = resp
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(review)
}

func (h *Handler) answer(ctx context.Context, req *admissionv1.AdmissionRequest, resp *admissionv1.AdmissionResponse) {
	in := Input{Namespace: req.Namespace, Name: req.Name, DryRun: dryRun(req)}
	var d Decision
	if exempt := h.g.decide(in); exempt.Why == "exempt" {
		d = h.g.Decide(in)
	} else if h.ready != nil && !h.ready() {
		d = Decision{Why: "unavailable", Message: "cozy-health: this aggregator replica is still warming up; retry"}
		h.g.m.decisions.WithLabelValues(d.Why, "false").Inc()
	} else {
		lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
		pod, node, err := h.lookup(lctx, req.Namespace, req.Name)
		cancel()
		if err != nil {
			d = Decision{Why: "unavailable", Message: "cozy-health: cannot read the pod to evict: " + err.Error()}
			h.g.m.decisions.WithLabelValues(d.Why, "false").Inc()
			h.g.log.Warn("eviction: read the pod", zap.String("pod", req.Namespace+"/"+req.Name), zap.Error(err))
		} else {
			in.Pod, in.Node = pod, node
			d = h.g.Decide(in)
		}
	}
	resp.Allowed = d.Allowed
	if d.Allowed {
		if d.Message != "" {
			resp.Warnings = []string{d.Message}
		}
		return
	}
	// 429, as a PodDisruptionBudget refusal: every drain tool retries it.
	resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusTooManyRequests,
		Reason: metav1.StatusReasonTooManyRequests, Message: d.Message}
}

// dryRun tells whether the eviction is a dry run. The apiserver sets the
// request's dryRun from the query (?dryRun=All) only; kubectl drain
// --dry-run=server and client-go's Evict put it in the Eviction's
// deleteOptions instead, which the eviction REST (v1.37
// pkg/registry/core/pod/storage/eviction.go, propagateDryRun) honours
// after admission was asked: both are read.
func dryRun(req *admissionv1.AdmissionRequest) bool {
	if req.DryRun != nil && *req.DryRun {
		return true
	}
	var ev policyv1.Eviction
	if len(req.Object.Raw) == 0 || json.Unmarshal(req.Object.Raw, &ev) != nil || ev.DeleteOptions == nil {
		return false
	}
	return slices.Contains(ev.DeleteOptions.DryRun, metav1.DryRunAll)
}
