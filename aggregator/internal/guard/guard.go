// Package guard turns the drain verdict into an eviction refusal every
// drain tool already obeys: a validating admission webhook on
// pods/eviction CREATE, served by every aggregator replica from its own
// full state (docs/guard.md says why this mechanism and what it was
// measured to do).
//
// For one eviction, in order (Decide):
//   - the pod is gone, not bound to a node, or in an exempt namespace
//     (cozy-health's own): allowed;
//   - its Node is gone or not cordoned (spec.unschedulable): allowed. Every
//     drain cordons first; an eviction from a schedulable node is not a
//     drain (the descheduler, a person) and not this guard's business.
//     A dry-run eviction (`kubectl drain --dry-run=server`, whose cordon is
//     a dry run too, or any client asking "would this be let through?") is
//     judged as if the Node were cordoned: a preview that changes nothing;
//   - the Node carries health.cozystack.io/drain-guard=disabled (an
//     operator's override): allowed, with a warning;
//   - the drain verdict for the Node (the intent the Node names in
//     health.cozystack.io/drain-intent, reboot by default) is safe:
//     allowed; blocked: refused; unknown: refused until UnknownFor has
//     passed since this replica saw the Node cordoned, then allowed with a
//     warning.
//
// A refusal is HTTP 429 TooManyRequests in the admission response's
// status, with every blocking and unknown reason in the message: the
// apiserver passes the code to the client (webhook errors.ToStatusErr
// keeps any code >= 400), and kubectl drain (k8s.io/kubectl/pkg/drain)
// retries a 429 every 5 s exactly as it retries a PodDisruptionBudget's.
// When no replica answers within the webhook's timeout, the apiserver's
// failurePolicy Ignore lets the eviction through: the guard never wedges a
// cluster whose cozy-health is down.
package guard

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/cozystack/cozy-health/aggregator/internal/drain"
	"github.com/cozystack/cozy-health/aggregator/internal/watch"
)

// Node annotations an operator sets.
const (
	// AnnotationGuard set to GuardDisabled lets every eviction from the
	// Node through: the per-node override.
	AnnotationGuard = "health.cozystack.io/drain-guard"
	// GuardDisabled is AnnotationGuard's one meaningful value.
	GuardDisabled = "disabled"
	// AnnotationIntent names the drain intent the guard asks the verdict
	// for (drain.IntentReboot when absent).
	AnnotationIntent = "health.cozystack.io/drain-intent"
)

// Path is the webhook's HTTP path on the guard listener.
const Path = "/v1/guard/eviction"

// Verdicts answers the drain check for a node and an intent: in the
// aggregator, drain.Service.CheckIntent.
type Verdicts func(node string, intent drain.Intent) (drain.Result, error)

// Config configures a Guard.
type Config struct {
	// ExemptNamespaces: evictions of pods in these namespaces are always
	// allowed (cozy-health's own release namespace: the node the
	// aggregator leader runs on can be drained when the verdict is safe).
	ExemptNamespaces []string
	// UnknownFor is how long after this replica saw a Node cordoned an
	// unknown verdict still refuses its evictions; after it they are
	// allowed with a warning. 0 allows an unknown verdict at once.
	UnknownFor time.Duration
}

// Guard decides evictions. Safe for concurrent use.
type Guard struct {
	cfg      Config
	verdicts Verdicts
	clock    clock.PassiveClock
	log      *zap.Logger
	m        *metrics

	// mu guards cordonedSince: when this replica first saw each Node
	// cordoned (a Node cordoned before the replica started counts from
	// the informer's first delivery).
	mu            sync.Mutex
	cordonedSince map[string]time.Time
}

// New returns a Guard. reg may be nil.
func New(cfg Config, verdicts Verdicts, clk clock.PassiveClock, log *zap.Logger, reg prometheus.Registerer) (*Guard, error) {
	if cfg.UnknownFor < 0 {
		return nil, fmt.Errorf("guard: UnknownFor must be >= 0, got %s", cfg.UnknownFor)
	}
	if verdicts == nil {
		return nil, fmt.Errorf("guard: nil verdicts")
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	if log == nil {
		log = zap.NewNop()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Guard{cfg: cfg, verdicts: verdicts, clock: clk, log: log.With(zap.String("component", "guard")), m: m,
		cordonedSince: map[string]time.Time{}}, nil
}

// TrackCordons registers a handler on the Node informer that records when
// each Node was first seen cordoned. It only registers: the informer runs
// where it is started.
func (g *Guard) TrackCordons(inf cache.SharedIndexInformer) error {
	seen := func(n *corev1.Node) {
		g.mu.Lock()
		defer g.mu.Unlock()
		_, had := g.cordonedSince[n.Name]
		switch {
		case n.Spec.Unschedulable && !had:
			g.cordonedSince[n.Name] = g.clock.Now()
		case !n.Spec.Unschedulable && had:
			delete(g.cordonedSince, n.Name)
		}
	}
	err := watch.Handle(inf, seen, func(n *corev1.Node) {
		g.mu.Lock()
		delete(g.cordonedSince, n.Name)
		g.mu.Unlock()
	})
	if err != nil {
		return fmt.Errorf("guard node informer: %w", err)
	}
	return nil
}

// cordoned returns when this replica first saw node cordoned; the zero
// time when it has not seen it cordoned (then now counts).
func (g *Guard) cordoned(node string, now time.Time) time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	t, ok := g.cordonedSince[node]
	if !ok {
		// Cordoned in the Node the caller read, not yet delivered here:
		// start counting now.
		g.cordonedSince[node] = now
		return now
	}
	return t
}

// Decision is the guard's answer to one eviction.
type Decision struct {
	// Allowed lets the eviction through.
	Allowed bool
	// Why is a short label, the metric's: exempt, pod_gone, unbound,
	// node_gone, not_cordoned, override, safe, blocked, unknown,
	// unknown_expired, no_verdict, unavailable.
	Why string
	// Message is the refusal's text (with cozy-health's reasons), or the
	// warning attached to an allowed eviction.
	Message string
	// Node and Verdict, when a verdict was asked.
	Node    string
	Verdict drain.Verdict
}

// Input is what Decide reads for one eviction.
type Input struct {
	// Namespace and Name of the pod to evict.
	Namespace, Name string
	// Pod is the pod, nil when it does not exist.
	Pod *corev1.Pod
	// Node is the pod's Node, nil when it does not exist.
	Node *corev1.Node
	// DryRun is a dry-run eviction (the AdmissionRequest's dryRun): judged
	// on a Node that is not cordoned as on a cordoned one, as a preview.
	DryRun bool
}

// Decide answers one eviction as the package comment says.
func (g *Guard) Decide(in Input) Decision {
	d := g.decide(in)
	g.m.decisions.WithLabelValues(d.Why, allowedLabel(d.Allowed)).Inc()
	if !d.Allowed || d.Message != "" {
		g.log.Info("eviction", zap.String("pod", in.Namespace+"/"+in.Name), zap.String("node", d.Node), zap.Bool("allowed", d.Allowed),
			zap.String("why", d.Why), zap.String("verdict", string(d.Verdict)))
	}
	return d
}

func allowedLabel(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

func (g *Guard) decide(in Input) Decision {
	switch {
	case slices.Contains(g.cfg.ExemptNamespaces, in.Namespace):
		return Decision{Allowed: true, Why: "exempt"}
	case in.Pod == nil:
		return Decision{Allowed: true, Why: "pod_gone"}
	case in.Pod.Spec.NodeName == "":
		return Decision{Allowed: true, Why: "unbound"}
	}
	node := in.Pod.Spec.NodeName
	switch {
	case in.Node == nil:
		return Decision{Allowed: true, Why: "node_gone", Node: node}
	case !in.Node.Spec.Unschedulable && !in.DryRun:
		return Decision{Allowed: true, Why: "not_cordoned", Node: node}
	case in.Node.Annotations[AnnotationGuard] == GuardDisabled:
		return Decision{Allowed: true, Why: "override", Node: node,
			Message: fmt.Sprintf("cozy-health drain guard disabled on node %s by its annotation %s=%s", node, AnnotationGuard, GuardDisabled)}
	}
	intent := drain.IntentReboot
	if v, ok := in.Node.Annotations[AnnotationIntent]; ok {
		parsed, err := drain.ParseIntent(v)
		if err != nil {
			return Decision{Why: "no_verdict", Node: node,
				Message: fmt.Sprintf("cozy-health: node %s: annotation %s: %v", node, AnnotationIntent, err)}
		}
		intent = parsed
	}
	now := g.clock.Now()
	res, err := g.verdicts(node, intent)
	if err != nil {
		// The node is a Kubernetes Node (the caller read it): the check can
		// only fail on input it would refuse; no verdict is no permission.
		return g.unknown(in.Node, intent, now, fmt.Sprintf("no drain verdict: %v", err), "no_verdict")
	}
	switch res.Verdict {
	case drain.Safe:
		return Decision{Allowed: true, Why: "safe", Node: node, Verdict: res.Verdict}
	case drain.Blocked:
		return Decision{Why: "blocked", Node: node, Verdict: res.Verdict,
			Message: fmt.Sprintf("cozy-health: draining %s (%s) is blocked: %s", node, intent, reasons(res, drain.Blocked))}
	default:
		d := g.unknown(in.Node, intent, now, reasons(res, drain.Unknown), "unknown")
		d.Verdict = res.Verdict
		return d
	}
}

// unknown refuses while UnknownFor has not passed since the node was seen
// cordoned, and allows with a warning after. A Node that is not cordoned
// (a dry-run preview) is answered as a drain that cordons now would be,
// and leaves no cordon time behind.
func (g *Guard) unknown(n *corev1.Node, intent drain.Intent, now time.Time, why, label string) Decision {
	node := n.Name
	since := now
	if n.Spec.Unschedulable {
		since = g.cordoned(node, now)
	}
	until := since.Add(g.cfg.UnknownFor)
	if now.Before(until) {
		return Decision{Why: label, Node: node, Verdict: drain.Unknown,
			Message: fmt.Sprintf("cozy-health: draining %s (%s) is unknown: %s; refused until %s (%s after the cordon), or set the annotation %s=%s on the Node",
				node, intent, why, until.UTC().Format(time.RFC3339), g.cfg.UnknownFor, AnnotationGuard, GuardDisabled)}
	}
	return Decision{Allowed: true, Why: "unknown_expired", Node: node, Verdict: drain.Unknown,
		Message: fmt.Sprintf("cozy-health: draining %s (%s) is unknown (%s), allowed: cordoned more than %s ago", node, intent, why, g.cfg.UnknownFor)}
}

// maxReasons bounds the reasons listed in one message.
const maxReasons = 5

// reasons lists res's reasons of verdict v as "rule: message; ...".
func reasons(res drain.Result, v drain.Verdict) string {
	var out []string
	n := 0
	for _, r := range res.Reasons {
		if r.Verdict != v {
			continue
		}
		n++
		if len(out) < maxReasons {
			out = append(out, r.Rule+": "+r.Message)
		}
	}
	if n > maxReasons {
		out = append(out, fmt.Sprintf("and %d more", n-maxReasons))
	}
	if len(out) == 0 {
		return string(v)
	}
	return strings.Join(out, "; ")
}

// metrics are the guard's Prometheus metrics.
type metrics struct {
	decisions *prometheus.CounterVec
	reviews   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cozy_health", Subsystem: "guard", Name: "evictions_total",
			Help: "Evictions the drain guard answered, by why (exempt, pod_gone, unbound, node_gone, not_cordoned, override, safe, blocked, unknown, unknown_expired, no_verdict, unavailable) and allowed."},
			[]string{"why", "allowed"}),
		reviews: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cozy_health", Subsystem: "guard", Name: "reviews_rejected_total",
			Help: "Admission requests the guard could not read, by reason (method, body, kind)."}, []string{"reason"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.decisions, m.reviews} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register guard metrics: %w", err)
			}
		}
	}
	return m, nil
}

// Lookup reads the pod and its Node for one eviction: in the aggregator, a
// GET of the pod and the Node informer's cache.
type Lookup func(ctx context.Context, namespace, name string) (*corev1.Pod, *corev1.Node, error)
