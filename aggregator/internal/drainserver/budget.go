package drainserver

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cozystack/cozy-health/aggregator/internal/drain"
	"github.com/cozystack/cozy-health/pkg/drainapi"
)

// Budget is the disruption budget, always computed: the reboot verdict of
// every node the state knows, as cozy_health_drain_verdict{node,verdict}
// (1 for the node's current verdict, 0 for the other two). Every replica
// computes it from its own full state, so any replica's series answer
// "which node could be drained now?" and "can any?".
type Budget struct {
	svc  *Service
	desc *prometheus.Desc

	// mu guards last: the verdict last exported per node, so a node gone
	// from the state loses its series; and latest.
	mu   sync.Mutex
	last map[string]drain.Result
	// latest is the last evaluation, served by BudgetHandler and read by
	// the rollup (Latest); nil before the first.
	latest *drain.BudgetSnapshot
	gen    uint64
}

// Accepted implements state.Observer: a report changes no verdict until
// the next evaluation.
func (b *Budget) Accepted(string, time.Time) {}

// Removed implements state.Observer: a node gone from the state (deleted
// from Kubernetes, or no longer expected) loses its series at once, as its
// other series do.
func (b *Budget) Removed(node string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.last[node]; !ok {
		return
	}
	// A copy: the map is also the latest evaluation's Results, which
	// readers of Latest range over without the lock.
	last := make(map[string]drain.Result, len(b.last))
	for n, r := range b.last {
		if n != node {
			last[n] = r
		}
	}
	b.last = last
}

// budgetVerdicts are the values of cozy_health_drain_verdict's verdict
// label, in the order Collect writes them.
var budgetVerdicts = []drain.Verdict{drain.Safe, drain.Blocked, drain.Unknown}

// Describe implements prometheus.Collector.
func (b *Budget) Describe(ch chan<- *prometheus.Desc) { ch <- b.desc }

// MetricTypes names the type of cozy_health_drain_verdict before the
// first evaluation has series (pkg/reference.Typed).
func (b *Budget) MetricTypes() map[*prometheus.Desc]prometheus.ValueType {
	return map[*prometheus.Desc]prometheus.ValueType{b.desc: prometheus.GaugeValue}
}

// Collect implements prometheus.Collector: cozy_health_drain_verdict of
// every node of the last evaluation, written at the scrape from the
// verdicts the budget keeps anyway (a GaugeVec would keep three series,
// about 2.5 KiB, per node besides).
func (b *Budget) Collect(ch chan<- prometheus.Metric) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for node, r := range b.last {
		for _, v := range budgetVerdicts {
			val := 0.0
			if r.Verdict == v {
				val = 1
			}
			ch <- prometheus.MustNewConstMetric(b.desc, prometheus.GaugeValue, val, node, string(v))
		}
	}
}

// Latest is the last evaluation; nil before the first.
func (b *Budget) Latest() *drain.BudgetSnapshot {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.latest
}

// NewBudget returns the budget of svc; reg may be nil.
func NewBudget(svc *Service, reg prometheus.Registerer) (*Budget, error) {
	b := &Budget{svc: svc, last: map[string]drain.Result{},
		desc: prometheus.NewDesc("cozy_health_drain_verdict",
			"The drain verdict (reboot) of every node, computed continuously: 1 for the node's current verdict (safe, blocked, unknown), 0 for the others.",
			[]string{"node", "verdict"}, nil)}
	if reg != nil {
		if err := reg.Register(b); err != nil {
			return nil, fmt.Errorf("register drain budget metric: %w", err)
		}
	}
	return b, nil
}

// Update evaluates every known node now and exports the verdicts; it
// returns them by node, each with its blocked and unknown reasons only
// (withoutSafeReasons).
func (b *Budget) Update() map[string]drain.Result {
	now := b.svc.clock.Now()
	snap := b.svc.Snapshot(now)
	out := drain.EvaluateAll(snap, now)
	for node, res := range out {
		out[node] = withoutSafeReasons(res)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	changed := len(b.last) != len(out)
	for node, prev := range b.last {
		if res, ok := out[node]; !ok || res.Verdict != prev.Verdict {
			changed = true
			break
		}
	}
	if changed || b.latest == nil {
		b.gen++
	}
	b.last = out
	b.latest = &drain.BudgetSnapshot{Gen: b.gen, At: now, Results: out}
	return out
}

// withoutSafeReasons is r keeping only its blocked and unknown reasons:
// the budget is read for its verdicts (the gauge, the rollup) and those
// reasons (BudgetSnapshot.API), and at thousands of nodes the safe ones
// (one or more per rule per node) were most of what an evaluation kept
// alive between two.
func withoutSafeReasons(r drain.Result) drain.Result {
	n := 0
	for _, x := range r.Reasons {
		if x.Verdict != drain.Safe {
			n++
		}
	}
	if n == len(r.Reasons) {
		return r
	}
	if n == 0 {
		r.Reasons = nil
		return r
	}
	kept := make([]drain.Reason, 0, n)
	for _, x := range r.Reasons {
		if x.Verdict != drain.Safe {
			kept = append(kept, x)
		}
	}
	r.Reasons = kept
	return r
}

// Run updates the budget every period (NextBudgetWait: longer where an
// evaluation is slow) until ctx ends.
func (b *Budget) Run(ctx context.Context, period time.Duration) {
	for {
		start := time.Now()
		b.Update()
		took := time.Since(start)
		wait := drain.NextBudgetWait(period, took)
		b.mu.Lock()
		if l := b.latest; l != nil {
			b.latest = &drain.BudgetSnapshot{Gen: l.Gen, At: l.At, Results: l.Results, Took: took, Period: wait}
		}
		b.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// BudgetHandler serves GET /v1/drain-budget: the budget's last evaluation
// as JSON (drainapi.Budget), computed every few seconds by Budget.Run, so
// an answer costs an encoding and no evaluation. The caller is authorized
// as for the drain check (the same Authorizer: get on /v1/drain-check),
// whose answers for every node it reveals. 503 before the first
// evaluation.
type BudgetHandler struct {
	b    *Budget
	auth *Authorizer
}

// NewBudgetHandler returns the HTTP front end of b; auth may be nil (see
// NewHandler).
func NewBudgetHandler(b *Budget, auth *Authorizer) *BudgetHandler {
	return &BudgetHandler{b: b, auth: auth}
}

// Mount registers the handler on mux at drainapi.BudgetPath.
func (h *BudgetHandler) Mount(mux *http.ServeMux) { mux.Handle(drainapi.BudgetPath, h) }

// ServeHTTP implements http.Handler.
func (h *BudgetHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	svc := h.b.svc
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		svc.reject("budget", "method", "")
		w.Header().Set("Allow", "GET, HEAD")
		writeJSON(w, http.StatusMethodNotAllowed, drainapi.Error{Error: "method " + r.Method + " not allowed"})
		return
	}
	if !authorizeHTTP(svc, h.auth, w, r, "budget") {
		return
	}
	snap := h.b.Latest()
	if snap == nil {
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusServiceUnavailable, drainapi.Error{Error: "the disruption budget has not been evaluated yet"})
		return
	}
	body, err := snap.JSON()
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, drainapi.Error{Error: "encode the disruption budget: " + err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}
