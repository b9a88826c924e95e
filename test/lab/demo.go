package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	healthv1alpha1 "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
	"github.com/cozystack/cozy-health/pkg/client/clientset/versioned"
	"github.com/cozystack/cozy-health/pkg/report"
)

// RunKubectl runs the lab's kubectl with the lab's kubeconfig and returns its
// exit code.
func RunKubectl(ctx context.Context, dir string, args []string, stdout, stderr io.Writer) (int, error) {
	s, err := LoadState(dir)
	if err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, s.Kubectl, append([]string{"--kubeconfig=" + s.Kubeconfig}, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	return 0, err
}

// Healths returns the platform Health objects by name.
func (l *Lab) Healths(ctx context.Context) (map[string]*healthv1alpha1.Health, error) {
	cs, err := l.healthClient()
	if err != nil {
		return nil, err
	}
	return listHealths(ctx, cs)
}

func listHealths(ctx context.Context, cs versioned.Interface) (map[string]*healthv1alpha1.Health, error) {
	list, err := cs.HealthV1alpha1().Healths(PlatformNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make(map[string]*healthv1alpha1.Health, len(list.Items))
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out, nil
}

// Condition is a predicate on the platform Health objects; the string says
// what it saw, for progress lines and timeouts.
type Condition func(map[string]*healthv1alpha1.Health, time.Time) (bool, string)

// WaitFor polls the Health objects until cond holds or timeout passes,
// printing a progress line to w (nil: quiet). It returns how long it took.
func (l *Lab) WaitFor(ctx context.Context, w io.Writer, what string, timeout time.Duration, cond Condition) (time.Duration, error) {
	cs, err := l.healthClient()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	last := ""
	tty := isTerminal(w)
	lastLine := time.Time{}
	for {
		hs, err := listHealths(ctx, cs)
		if err == nil {
			ok, seen := cond(hs, time.Now())
			last = seen
			if ok {
				if w != nil {
					if tty {
						fmt.Fprint(w, "\r")
					}
					fmt.Fprintf(w, "    %s: yes, after %.1fs%s\n", what, time.Since(start).Seconds(), strings.Repeat(" ", 30))
				}
				return time.Since(start), nil
			}
		} else {
			last = err.Error()
		}
		switch {
		case w == nil:
		case tty:
			fmt.Fprintf(w, "\r    waiting for %s ... %.0fs (now: %s)%s", what, time.Since(start).Seconds(), report.Truncate(last, 60), strings.Repeat(" ", 5))
		case time.Since(lastLine) >= 5*time.Second:
			fmt.Fprintf(w, "    waiting for %s ... %.0fs (now: %s)\n", what, time.Since(start).Seconds(), report.Truncate(last, 80))
			lastLine = time.Now()
		}
		if time.Since(start) > timeout {
			if w != nil && tty {
				fmt.Fprintln(w)
			}
			return time.Since(start), fmt.Errorf("%s: not within %s (last seen: %s)", what, timeout, last)
		}
		select {
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// AllHealthy holds when every node-local component is Healthy and fresh,
// on every node.
func AllHealthy(components []string) Condition {
	return func(hs map[string]*healthv1alpha1.Health, now time.Time) (bool, string) {
		var bad []string
		for _, c := range components {
			h, ok := hs[c]
			switch {
			case !ok:
				bad = append(bad, c+"=missing")
			case h.Status.FreshUntil == nil || now.After(h.Status.FreshUntil.Time):
				bad = append(bad, c+"=stale")
			case h.Status.Overall != healthv1alpha1.StatusHealthy:
				bad = append(bad, c+"="+string(h.Status.Overall))
			default:
				for n, st := range h.Status.Nodes {
					if st.Status != healthv1alpha1.StatusHealthy {
						bad = append(bad, c+"/"+n+"="+string(st.Status))
					}
				}
			}
		}
		if len(bad) == 0 {
			return true, "all Healthy"
		}
		sort.Strings(bad)
		return false, strings.Join(bad, " ")
	}
}

// ComponentIs holds when component's overall is want and, if node is not
// empty, the node is listed in degradedNodes.
func ComponentIs(component string, want healthv1alpha1.Status, node string) Condition {
	return func(hs map[string]*healthv1alpha1.Health, _ time.Time) (bool, string) {
		h, ok := hs[component]
		if !ok {
			return false, component + " missing"
		}
		seen := fmt.Sprintf("%s %s degraded=[%s]", component, h.Status.Overall, h.Status.DegradedNodes)
		if h.Status.Overall != want {
			return false, seen
		}
		if node != "" && !containsNode(h.Status.DegradedNodes, node) {
			return false, seen
		}
		return true, seen
	}
}

// NodeEntryIs holds when component's nodes[node] has status want (and
// reason, if not empty).
func NodeEntryIs(component, node string, want healthv1alpha1.Status, reason string) Condition {
	return func(hs map[string]*healthv1alpha1.Health, _ time.Time) (bool, string) {
		h, ok := hs[component]
		if !ok {
			return false, component + " missing"
		}
		st, ok := h.Status.Nodes[node]
		if !ok {
			return false, fmt.Sprintf("%s has no entry for %s", component, node)
		}
		seen := fmt.Sprintf("%s/%s %s %s", component, node, st.Status, st.Reason)
		return st.Status == want && (reason == "" || st.Reason == reason), seen
	}
}

// ConditionWant selects conditions of a Health object; an empty field
// matches anything.
type ConditionWant struct {
	Type string
	// RefKind and RefName: the condition's resourceRef (a Node, a
	// Resource, an OVNDatabase...); NoRef: it has none (component-level).
	RefKind, RefName string
	NoRef            bool
	Status           healthv1alpha1.ConditionStatus
	Reason           string
	// MessageHas: every string must be in the message.
	MessageHas []string
}

func (w ConditionWant) where(c healthv1alpha1.HealthCondition) bool {
	switch {
	case w.Type != "" && c.Type != w.Type,
		w.NoRef && c.ResourceRef != nil,
		(w.RefKind != "" || w.RefName != "") && c.ResourceRef == nil,
		w.RefKind != "" && c.ResourceRef.Kind != w.RefKind,
		w.RefName != "" && c.ResourceRef.Name != w.RefName:
		return false
	}
	return true
}

func (w ConditionWant) is(c healthv1alpha1.HealthCondition) bool {
	if (w.Status != "" && c.Status != w.Status) || (w.Reason != "" && c.Reason != w.Reason) {
		return false
	}
	for _, m := range w.MessageHas {
		if !strings.Contains(c.Message, m) {
			return false
		}
	}
	return true
}

func (w ConditionWant) String() string {
	s := w.Type
	if w.RefKind != "" || w.RefName != "" {
		s += " on " + w.RefKind + "/" + w.RefName
	}
	if w.Status != "" {
		s += " " + string(w.Status)
	}
	if w.Reason != "" {
		s += " " + w.Reason
	}
	if len(w.MessageHas) > 0 {
		s += fmt.Sprintf(" naming %q", w.MessageHas)
	}
	return strings.TrimSpace(s)
}

// ConditionIs holds when one of component's conditions has want's type and
// resourceRef, and its status, reason and message are as want says. What
// it saw is the conditions of that type and resourceRef.
func ConditionIs(component string, want ConditionWant) Condition {
	return func(hs map[string]*healthv1alpha1.Health, _ time.Time) (bool, string) {
		h, ok := hs[component]
		if !ok {
			return false, component + " missing"
		}
		var seen []string
		for _, c := range h.Status.Conditions {
			if !want.where(c) {
				continue
			}
			ref := ""
			if c.ResourceRef != nil {
				ref = " on " + c.ResourceRef.Kind + "/" + c.ResourceRef.Name
			}
			d := fmt.Sprintf("%s %s%s %s %s: %s", component, c.Type, ref, c.Status, c.Reason, c.Message)
			if want.is(c) {
				return true, d
			}
			seen = append(seen, d)
		}
		if len(seen) == 0 {
			return false, fmt.Sprintf("%s has no %s condition", component, want)
		}
		return false, fmt.Sprintf("want %s; seen: %s", want, strings.Join(seen, "; "))
	}
}

// Not holds when cond does not.
func Not(cond Condition) Condition {
	return func(hs map[string]*healthv1alpha1.Health, now time.Time) (bool, string) {
		ok, seen := cond(hs, now)
		return !ok, "not: " + seen
	}
}

// Any holds when at least one condition holds.
func Any(conds ...Condition) Condition {
	return func(hs map[string]*healthv1alpha1.Health, now time.Time) (bool, string) {
		seen := make([]string, 0, len(conds))
		for _, c := range conds {
			ok, s := c(hs, now)
			if ok {
				return true, s
			}
			seen = append(seen, s)
		}
		return false, strings.Join(seen, "; ")
	}
}

// All holds when every condition holds.
func All(conds ...Condition) Condition {
	return func(hs map[string]*healthv1alpha1.Health, now time.Time) (bool, string) {
		var seen []string
		okAll := true
		for _, c := range conds {
			ok, s := c(hs, now)
			okAll = okAll && ok
			if !ok {
				seen = append(seen, s)
			}
		}
		return okAll, strings.Join(seen, "; ")
	}
}

func containsNode(list, node string) bool {
	for _, n := range strings.Split(list, ",") {
		if strings.TrimSpace(n) == node {
			return true
		}
	}
	return false
}

// Demo is `make demo`: a 3-node lab, all Healthy; etcd stopped on one node
// (etcd Degraded naming it); the agent stopped on another (its entries go
// Unknown); both restored (Healthy again); a failing HelmRelease with three
// releases waiting on it read as one root cause; torn down.
func Demo(ctx context.Context, o Options, w io.Writer) (err error) {
	if o.Nodes < 3 {
		return fmt.Errorf("demo needs at least 3 nodes, got %d", o.Nodes)
	}
	step := func(n int, format string, args ...any) {
		fmt.Fprintf(w, "\n\033[1mStep %d: %s\033[0m\n", n, fmt.Sprintf(format, args...))
	}
	show := func(args ...string) {
		fmt.Fprintf(w, "\n  $ kubectl %s\n", strings.Join(args, " "))
		var out bytes.Buffer
		_, _ = RunKubectl(ctx, o.Dir, args, &out, &out)
		for _, ln := range strings.Split(strings.TrimRight(out.String(), "\n"), "\n") {
			fmt.Fprintf(w, "    %s\n", ln)
		}
	}
	started := time.Now()
	step(0, "start a %d-node lab in %s (first run builds the control plane: ~10 min)", o.Nodes, o.Dir)
	l, err := Up(ctx, o)
	if err != nil {
		return err
	}
	defer func() {
		step(7, "tear the lab down (logs stay in %s/logs)", o.Dir)
		if derr := l.Down(); derr != nil && err == nil {
			err = derr
		}
		if err == nil {
			fmt.Fprintf(w, "\nDemo finished in %s. Every step behaved as promised.\n", time.Since(started).Round(time.Second))
		}
	}()
	etcdNode, agentNode := "node-2", "node-3"
	components := []string{"etcd", "disk", "cilium", "kube-ovn", "linstor", "node"}

	step(1, "every component Healthy — facts from Talos, etcd, Cilium, kube-ovn and LINSTOR on every node")
	if _, err := l.WaitFor(ctx, w, "all Health objects Healthy", 90*time.Second, AllHealthy(components)); err != nil {
		return err
	}
	show("get", "chz", "-A")

	step(2, "stop etcd on %s: etcd must read Degraded, naming %s (2 of 3 voting members healthy keeps quorum)", etcdNode, etcdNode)
	msg, err := Fault(ctx, o.Dir, etcdNode, "etcd-stop", "")
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "    %s\n", msg)
	if _, err := l.WaitFor(ctx, w, "etcd Degraded naming "+etcdNode, 60*time.Second, ComponentIs("etcd", healthv1alpha1.StatusDegraded, etcdNode)); err != nil {
		return err
	}
	show("get", "chz", "-A")
	show("get", "health", "etcd", "-n", PlatformNamespace, "-o",
		`jsonpath={range .status.conditions[?(@.status!="True")]}{.type}{"\t"}{.status}{"\t"}{.reason}{"\t"}{.resourceRef.kind}/{.resourceRef.name}{"\t"}{.message}{"\n"}{end}`)

	step(3, "stop the agent on %s: after the heartbeat grace every entry its agent feeds must read Unknown, never stay green: AgentSilent, as its kubelet still renews the node's Lease", agentNode)
	msg, err = Fault(ctx, o.Dir, agentNode, "agent-stop", "")
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "    %s\n", msg)
	unknown := make([]Condition, 0, len(components))
	for _, c := range components {
		if c == "linstor" {
			// linstor's facts come from the LINSTOR controller, not from
			// the agent: the node's satellite stays as the controller
			// confirms it (the same rule as the e2e's agent-stop case).
			continue
		}
		unknown = append(unknown, NodeEntryIs(c, agentNode, healthv1alpha1.StatusUnknown, "AgentSilent"))
	}
	unknown = append(unknown, NodeEntryIs("linstor", agentNode, healthv1alpha1.StatusHealthy, ""))
	if _, err := l.WaitFor(ctx, w, agentNode+" Unknown in a first Health object", 60*time.Second, Any(unknown[:len(unknown)-1]...)); err != nil {
		return err
	}
	// One rollup turns the node Unknown in every object at once
	// (TestSilentNodeUnknownEverywhereInOneRollup), but the leader writes
	// the objects one at a time under its write budget: a listing taken
	// between two writes shows the objects not yet written still green.
	// Wait for all of them, within what the budget allows.
	bound, perSecond, err := l.writeBound(len(components))
	if err != nil {
		return err
	}
	if _, err := l.WaitFor(ctx, w, "every agent-fed Health object reading "+agentNode+" Unknown, linstor as its controller confirms it", bound, All(unknown...)); err != nil {
		return fmt.Errorf("%w: the leader writes the %d objects at %g writes/s, so every one should read %s Unknown within %s of the first; "+
			"one that does not was not written (see the aggregators' logs in %s/logs)", err, len(components), perSecond, agentNode, bound, o.Dir)
	}
	show("get", "chz", "-A")
	if hs, err := l.Healths(ctx); err == nil {
		printNodes(w, hs["cilium"])
		printNodeEverywhere(w, hs, components, agentNode)
	}
	fmt.Fprintf(w, "\n    Note linstor: %s's entry is read from the LINSTOR controller, which still confirms its satellite,\n"+
		"    so it stays Healthy on that evidence; every entry the agent feeds reads Unknown.\n", agentNode)
	fmt.Fprintf(w, "\n    Note etcd: 1 of 3 voting members is known healthy, %s is known down and %s is unobserved.\n"+
		"    Whether a quorum holds hinges on %s, so etcd's Quorum reads Unknown (QuorumUndetermined)\n"+
		"    and etcd Degraded: an unknown member is counted neither healthy nor lost (the apiserver that\n"+
		"    accepted this write had quorum). Facts, never a silent green, and never a false red.\n", etcdNode, agentNode, agentNode)

	step(4, "restore etcd on %s and the agent on %s: everything must read Healthy again", etcdNode, agentNode)
	for _, f := range [][2]string{{etcdNode, "etcd-start"}, {agentNode, "agent-start"}} {
		msg, err := Fault(ctx, o.Dir, f[0], f[1], "")
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "    %s\n", msg)
	}
	if _, err := l.WaitFor(ctx, w, "all Health objects Healthy", 90*time.Second, AllHealthy(components)); err != nil {
		return err
	}
	show("get", "chz", "-A")

	step(5, "fill etcd with real writes to %.0f%% of its quota (etcd's own etcd_server_quota_backend_bytes): every member reads Degraded (DBSizeNearQuota) and still votes", NearQuotaRatio*100)
	msg, err = Fault(ctx, o.Dir, "", "etcd-db-near-quota", "")
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "    %s\n", msg)
	near := make([]Condition, 0, len(l.State.Nodes))
	for _, n := range l.State.Nodes {
		near = append(near, NodeEntryIs("etcd", n.Name, healthv1alpha1.StatusDegraded, "DBSizeNearQuota"))
	}
	if _, err := l.WaitFor(ctx, w, "every etcd member Degraded (DBSizeNearQuota)", 60*time.Second, All(near...)); err != nil {
		return err
	}
	show("get", "health", "etcd", "-n", PlatformNamespace, "-o",
		`jsonpath={range .status.nodes.*}{.status}{"\t"}{.reason}{"\t"}{.message}{"\n"}{end}`)
	msg, err = Fault(ctx, o.Dir, "", "etcd-db-ok", "")
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "    %s\n", msg)
	if _, err := l.WaitFor(ctx, w, "all Health objects Healthy", 90*time.Second, AllHealthy(components)); err != nil {
		return err
	}

	step(6, "a HelmRelease whose upgrade failed and three releases waiting on it: the platform object names one root cause, not four failures")
	return l.DemoRootCause(ctx, w, show)
}

// isTerminal reports whether w is a terminal (progress lines redraw in
// place there; elsewhere a line is printed every few seconds).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// printNodeEverywhere prints node's entry in every component's object.
func printNodeEverywhere(w io.Writer, hs map[string]*healthv1alpha1.Health, components []string, node string) {
	fmt.Fprintf(w, "\n  %s in every object:\n", node)
	for _, c := range components {
		h, ok := hs[c]
		if !ok {
			fmt.Fprintf(w, "    %-9s (no object)\n", c)
			continue
		}
		st := h.Status.Nodes[node]
		fmt.Fprintf(w, "    %-9s overall %-9s %s %-9s %s\n", c, h.Status.Overall, node, st.Status, st.Reason)
	}
}

// printNodes prints a Health object's status.nodes as a table.
func printNodes(w io.Writer, h *healthv1alpha1.Health) {
	if h == nil {
		return
	}
	fmt.Fprintf(w, "\n  %s/%s status.nodes:\n", h.Namespace, h.Name)
	names := make([]string, 0, len(h.Status.Nodes))
	for n := range h.Status.Nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		st := h.Status.Nodes[n]
		last := ""
		if st.LastReportAt != nil {
			last = "last report " + st.LastReportAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "    %-8s %-9s %-16s %s\n", n, st.Status, st.Reason, last)
	}
}

// writeBound is how long the leader may take to write n Health objects
// that one rollup changed together, under the write budget the chart gives
// the lab's aggregators (writes-per-second in their ConfigMap): n writes at
// that rate, plus room for the apiserver and the polls on this loaded
// machine. It returns the rate too, for messages.
func (l *Lab) writeBound(n int) (time.Duration, float64, error) {
	c, err := renderChart(l.opts)
	if err != nil {
		return 0, 0, err
	}
	var conf struct {
		WritesPerSecond float64 `json:"writes-per-second"`
	}
	if err := yaml.Unmarshal([]byte(c.configMaps["cozy-health-aggregator"]["config.yaml"]), &conf); err != nil {
		return 0, 0, fmt.Errorf("lab: the chart's aggregator config: %w", err)
	}
	if conf.WritesPerSecond <= 0 {
		return 0, 0, fmt.Errorf("lab: the chart's aggregator config has no writes-per-second")
	}
	const slack = 5 * time.Second
	return time.Duration(float64(n)/conf.WritesPerSecond*float64(time.Second)) + slack, conf.WritesPerSecond, nil
}
