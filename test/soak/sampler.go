package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cozystack/cozy-health/pkg/client/clientset/versioned"
	"github.com/cozystack/cozy-health/pkg/drainapi"
	"github.com/cozystack/cozy-health/test/lab"
)

// Sample is one second's reading.
type Sample struct {
	At time.Time
	// Health is each component's overall as its Health object says it,
	// Unknown past freshUntil, NoAnswer when the object or the list is
	// missing.
	Health map[string]string
	// Metric is each component's cozy_health_component_status{status}
	// series at value 1 on the replica whose cozy_health_leader is 1;
	// NoAnswer when no leader's series answered.
	Metric map[string]string
	// Drain is each node's drain-check verdict from a Ready replica (in
	// turn, as the Service routes); NoAnswer when none answered.
	Drain map[string]string
	// Entries is each component's node entries (status.nodes) as its
	// Health object says them: component -> node -> status, Unknown past
	// freshUntil.
	Entries map[string]map[string]string
	// Reasons is each component's node entries' reason as the Health
	// object says it: component -> node -> reason ("" past freshUntil).
	Reasons map[string]map[string]string
	// DrainFrom is the replica each verdict came from.
	DrainFrom map[string]string
	// Gate is each node's drain-guard answer, read as `kubectl drain
	// --dry-run=server` reads it: a dry-run eviction of the node's
	// workload pod through the apiserver, which asks every replica's
	// webhook (docs/guard.md). Let through: Safe; refused as blocked:
	// Blocked; refused as unknown, or let through past --guard-unknown-for
	// with the unknown warning, or refused while a replica warms up:
	// Undecide; any other failure: NoAnswer.
	Gate map[string]string
	// Leader is the aggregator whose metrics say it leads ("" if none).
	Leader string
}

// sampler reads the lab.
type sampler struct {
	dir  string
	cs   versioned.Interface
	kube kubernetes.Interface
	// warnings collects the apiserver's warnings of the gate's request in
	// flight (the guard's allowed-with-a-warning answers).
	warnings *warningLog
	// gateOn asks the drain guard every sample.
	gateOn bool
	http   *http.Client
	nodes  []string
	turn   int
}

func newSampler(dir string, nodes []string, gate bool) (*sampler, error) {
	s, err := lab.LoadState(dir)
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("soak: load kubeconfig: %w", err)
	}
	cfg.Timeout = 2 * time.Second
	cs, err := versioned.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("soak: health client: %w", err)
	}
	warnings := &warningLog{}
	kcfg := rest.CopyConfig(cfg)
	// The webhook's timeout is 3 s; a replica that was killed refuses the
	// connection at once.
	kcfg.Timeout, kcfg.WarningHandler = 5*time.Second, warnings
	kube, err := kubernetes.NewForConfig(kcfg)
	if err != nil {
		return nil, fmt.Errorf("soak: kube client: %w", err)
	}
	return &sampler{dir: dir, cs: cs, kube: kube, warnings: warnings, gateOn: gate, nodes: nodes, http: &http.Client{Timeout: 800 * time.Millisecond}}, nil
}

// sample takes one reading.
func (s *sampler) sample(ctx context.Context) Sample {
	now := time.Now()
	out := Sample{At: now, Health: map[string]string{}, Metric: map[string]string{}, Drain: map[string]string{}, DrainFrom: map[string]string{}, Gate: map[string]string{}, Entries: map[string]map[string]string{}, Reasons: map[string]map[string]string{}}
	for _, c := range Components {
		out.Health[c], out.Metric[c] = NoAnswer, NoAnswer
	}
	for _, n := range s.nodes {
		out.Drain[n] = NoAnswer
	}
	list, err := s.cs.HealthV1alpha1().Healths(lab.PlatformNamespace).List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, h := range list.Items {
			if _, ok := out.Health[h.Name]; !ok {
				continue
			}
			st := string(h.Status.Overall)
			if st == "" || h.Status.FreshUntil == nil || time.Now().After(h.Status.FreshUntil.Time) {
				st = Unknown
			}
			out.Health[h.Name] = st
			ent, why := map[string]string{}, map[string]string{}
			for n, ns := range h.Status.Nodes {
				ent[n], why[n] = string(ns.Status), ns.Reason
				if st == Unknown && (h.Status.FreshUntil == nil || time.Now().After(h.Status.FreshUntil.Time)) {
					ent[n], why[n] = Unknown, ""
				}
			}
			out.Entries[h.Name], out.Reasons[h.Name] = ent, why
		}
	}
	state, err := lab.LoadState(s.dir)
	if err != nil {
		return out
	}
	for _, a := range state.Aggregators {
		fams, err := s.metrics(ctx, "http://"+a.Metrics+"/metrics")
		if err != nil || !isLeader(fams) {
			continue
		}
		out.Leader = a.Name
		if mf, ok := fams["cozy_health_component_status"]; ok {
			for _, m := range mf.GetMetric() {
				l := map[string]string{}
				for _, lp := range m.GetLabel() {
					l[lp.GetName()] = lp.GetValue()
				}
				if l["namespace"] != lab.PlatformNamespace || m.GetGauge().GetValue() != 1 {
					continue
				}
				if _, ok := out.Metric[l["component"]]; ok {
					out.Metric[l["component"]] = l["status"]
				}
			}
		}
		break
	}
	// The drain verdict is read as `kubectl health drain-check` gets it
	// through the Service: from a replica whose /readyz answers 200 (the
	// chart's readiness probe), a different one each second in turn, so
	// every replica the Service would route to is judged. A replica still
	// warming up (restarted, its agents not back yet) is not asked.
	var ready []lab.Aggregator
	for _, a := range state.Aggregators {
		if s.ready(ctx, "http://"+a.HTTP) {
			ready = append(ready, a)
		}
	}
	s.turn++
	for _, n := range s.nodes {
		for i := range ready {
			a := ready[(s.turn+i)%len(ready)]
			v, err := s.drain(ctx, "http://"+a.HTTP, n)
			if err == nil {
				out.Drain[n] = v
				out.DrainFrom[n] = a.Name
				break
			}
		}
		if s.gateOn {
			out.Gate[n] = s.gate(ctx, n)
		}
	}
	return out
}

// gate asks the drain guard about node as `kubectl drain --dry-run=server`
// does: a dry-run eviction of its workload pod (lab.WorkloadNamespace),
// nothing cordoned or evicted.
func (s *sampler) gate(ctx context.Context, node string) string {
	s.warnings.reset()
	err := s.kube.PolicyV1().Evictions(lab.WorkloadNamespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Namespace: lab.WorkloadNamespace, Name: "web-" + node},
		DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}})
	return gateAnswer(err, s.warnings.all())
}

// gateAnswer reads the guard's answer from the eviction's error and the
// warnings that came with it.
func gateAnswer(err error, warnings []string) string {
	switch {
	case err == nil:
		for _, w := range warnings {
			if strings.Contains(w, ") is unknown (") {
				// Let through past --guard-unknown-for: the verdict was
				// unknown, the release is the documented bound.
				return Undecide
			}
		}
		return Safe
	case !apierrors.IsTooManyRequests(err):
		return NoAnswer
	case strings.Contains(err.Error(), ") is blocked: "):
		return Blocked
	default:
		// Unknown, warming up, the pod unreadable: not a judgement.
		return Undecide
	}
}

// warningLog is a rest.WarningHandler keeping the warnings of the request
// in flight (the sampler asks one at a time).
type warningLog struct {
	mu sync.Mutex
	w  []string
}

func (l *warningLog) HandleWarningHeader(_ int, _ string, text string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w = append(l.w, text)
}

func (l *warningLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w = nil
}

func (l *warningLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.w)
}

func isLeader(fams map[string]*dto.MetricFamily) bool {
	mf, ok := fams["cozy_health_leader"]
	if !ok {
		return false
	}
	for _, m := range mf.GetMetric() {
		if m.GetGauge().GetValue() == 1 {
			return true
		}
	}
	return false
}

func (s *sampler) metrics(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(resp.Body)
}

// ready tells whether the replica's /readyz answers 200.
func (s *sampler) ready(ctx context.Context, base string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (s *sampler) drain(ctx context.Context, base, node string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+drainapi.Path+"?node="+url.QueryEscape(node), nil)
	if err != nil {
		return "", err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("drain-check %s: %s", node, resp.Status)
	}
	var a drainapi.Result
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		return "", fmt.Errorf("drain-check %s: %w", node, err)
	}
	return string(a.Verdict), nil
}
