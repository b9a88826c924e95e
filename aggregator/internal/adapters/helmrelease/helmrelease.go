// Package helmrelease judges Flux HelmReleases (helm.toolkit.fluxcd.io/v2)
// and collapses chains of releases waiting on their dependencies into
// their root causes.
//
// A release is judged from its conditions (helm-controller's Ready copies
// the status, reason and message of its first failing summary condition):
//
//   - Ready=True and status.observedGeneration >= metadata.generation:
//     ready (no condition of its own, counted in the summary).
//   - Ready=True with spec.suspend: Degraded, Suspended. Flux stopped
//     reconciling it, so its Ready=True is frozen at the suspension: not
//     a fresh green (what runs may have drifted, no upgrade will come).
//     Its dependents are not held up by it (Flux reads its Ready).
//   - Ready=True with an older observedGeneration: Unknown,
//     GenerationNotObserved (its spec changed; no verdict on it yet).
//   - Stalled=True, or Ready=False for any reason other than
//     DependencyNotReady, SourceNotReady, ArtifactFailed and
//     HealthCheckCanceled, or Reconciling=True with ProgressingWithRetry:
//     failing, Degraded, with the release's own reason (UpgradeFailed,
//     InstallFailed, ...). A failing release is a root cause. When
//     helm-controller remediated the failed action, its Ready copies the
//     remediation's success (RollbackSucceeded, UninstallSucceeded); the
//     reason and error are then Released's, the remediation named after
//     them.
//   - Ready=Unknown with Released=False: failing with Released's reason
//     and error, "retrying": helm-controller runs the action again after
//     a failed one (with Cozystack's RetryOnFailure strategy a release that
//     keeps failing spends most of its time so).
//   - Ready=False with SourceNotReady or ArtifactFailed: a wait for the
//     chart, no verdict of its own. helm-controller writes SourceNotReady
//     on every install, upgrade and chart change until source-controller
//     has fetched the chart (and as long as the source fails: the release
//     alone cannot tell), and ArtifactFailed when it cannot get the chart
//     source-controller advertises (the artifact is gone from its storage,
//     its server is unreachable, the HelmChart object cannot be read); it
//     retries both and never stalls on them, and no Helm action ran. The
//     release reads as it was before the wait: failing with Released's
//     reason and error when its last action failed (Released=False),
//     else Unknown with the wait's reason, no root cause.
//   - Ready=False with HealthCheckCanceled (helm-controller v1.5+, with
//     its CancelHealthCheckOnNewRevision feature): Unknown, no root cause.
//     helm-controller stopped waiting for the release's resources because
//     a new reconciliation was queued (a new chart revision, a spec
//     change), and runs it at once; the canceled wait leaves a
//     Released=False that is no failure of the release.
//   - Ready=False with DependencyNotReady: waiting. spec.dependsOn is walked
//     (namespace defaults to the release's own) to the first releases up
//     the chain that are not waiting: failing ones, missing ones
//     (DependencyMissing) and cycles (DependencyCycle) are root causes and
//     make the waiting release Degraded; a dependency still progressing
//     (installing, upgrading, generation not observed) is no root cause:
//     the release is waiting on it (Unknown, DependencyNotReady, "waiting
//     on x (Progressing)") and the summary lists it apart ("waiting on
//     progressing x").
//   - Ready=Unknown or absent (installing, upgrading): Unknown, Progressing.
//
// Every release that is not ready gets a Release condition pinned to it;
// the object's Releases condition summarises the scope: "91 of 98 ready;
// 1 root cause: cozy-system/x (UpgradeFailed: ...), 7 waiting on it;
// waiting on progressing: cozy-system/y (Progressing), 2 waiting on it;
// 1 suspended: cozy-system/z". Helm's errors run to hundreds of bytes: a
// message naming root causes cuts their details (to 120, 60, then 0 bytes)
// until it fits, so the counts and every root cause stay in it.
// Releases in a Cozystack tenant namespace land in that tenant's apps
// object, all others in the platform namespace's platform object.
package helmrelease

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/cozystack/cozy-health/aggregator/internal/adapterkit"
	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Source is the watched resource.
var Source = adapterkit.Source{
	GVR:     schema.GroupVersionResource{Group: "helm.toolkit.fluxcd.io", Version: "v2", Resource: "helmreleases"},
	Kind:    "HelmRelease",
	Project: project,
}

// Condition types and reasons.
const (
	TypeRelease  = "Release"
	TypeReleases = "Releases"

	ReasonDependencyNotReady    = "DependencyNotReady"
	ReasonDependencyMissing     = "DependencyMissing"
	ReasonDependencyCycle       = "DependencyCycle"
	ReasonProgressing           = "Progressing"
	ReasonGenerationNotObserved = "GenerationNotObserved"
	ReasonNoStatus              = "NoStatus"
	ReasonSuspended             = "Suspended"
	ReasonSourceNotReady        = "SourceNotReady"
	ReasonArtifactFailed        = "ArtifactFailed"
	ReasonHealthCheckCanceled   = "HealthCheckCanceled"
	ReasonAllReady              = "AllReleasesReady"
	ReasonNotReady              = "ReleasesNotReady"
)

// Adapter is the HelmRelease adapterkit.
type Adapter struct{}

var _ adapterkit.Adapter = Adapter{}

// New returns the adapterkit.
func New() Adapter { return Adapter{} }

// Name implements adapterkit.Adapter.
func (Adapter) Name() string { return "helmrelease" }

// Component implements adapterkit.Adapter.
func (Adapter) Component() string { return adapterkit.ComponentPlatform }

// Sources implements adapterkit.Adapter.
func (Adapter) Sources() []adapterkit.Source { return []adapterkit.Source{Source} }

// release is what is kept of a HelmRelease.
type release struct {
	deps                []string // namespace/name
	ready               *adapterkit.Cond
	stalled             *adapterkit.Cond
	released            *adapterkit.Cond // only when False: the last release action failed
	remediated          *adapterkit.Cond // only when True
	retrying            bool
	observedGen, gen    int64
	suspended           bool
	hasObservedGenField bool
}

func project(u *unstructured.Unstructured) any {
	r := &release{gen: u.GetGeneration()}
	for _, c := range adapterkit.Conditions(u) {
		switch c.Type {
		case "Ready":
			r.ready = &c
		case "Stalled":
			if c.Status == "True" {
				r.stalled = &c
			}
		case "Reconciling":
			r.retrying = c.Status == "True" && c.Reason == "ProgressingWithRetry"
		case "Released":
			if c.Status == "False" {
				r.released = &c
			}
		case "Remediated":
			if c.Status == "True" {
				r.remediated = &c
			}
		}
	}
	if _, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "status", "observedGeneration"); ok {
		r.hasObservedGenField = true
		r.observedGen = adapterkit.Int(u, "status", "observedGeneration")
	}
	r.suspended, _ = adapterkit.Bool(u, "spec", "suspend")
	deps, _, _ := unstructured.NestedSlice(u.Object, "spec", "dependsOn")
	for _, d := range deps {
		m, _ := d.(map[string]any)
		name, _ := m["name"].(string)
		if name == "" {
			continue
		}
		ns, _ := m["namespace"].(string)
		if ns == "" {
			ns = u.GetNamespace()
		}
		r.deps = append(r.deps, ns+"/"+name)
	}
	return r
}

type state int

const (
	stateReady state = iota
	stateStale
	stateProgressing
	stateFailing
	stateWaiting
	stateSuspended
)

type node struct {
	key   string
	obj   *adapterkit.Object
	r     *release
	state state
	// roots of a waiting release (resolved lazily).
	roots    []*root
	resolved bool
	visiting bool
}

// root is one root cause.
type root struct {
	key    string // the release, the missing dependency, or the cycle
	kind   string // failing, missing, cycle, progressing
	reason string
	detail string
}

// describe names the root cause, its detail cut to budget bytes (none
// when budget is 0).
func (rt *root) describe(budget int) string {
	switch rt.kind {
	case "missing":
		return rt.key + " (missing)"
	case "cycle":
		return "cycle " + rt.detail
	}
	if rt.detail == "" || budget <= 0 {
		return fmt.Sprintf("%s (%s)", rt.key, rt.reason)
	}
	return fmt.Sprintf("%s (%s: %s)", rt.key, rt.reason, clip(rt.detail, budget))
}

// detailBudgets are the lengths a root cause's detail is cut to, longest
// first, until a message that names several fits status.MaxMessage: Helm's
// errors run to hundreds of bytes, and one of them must not push the
// counts and the other root causes out of the message.
var detailBudgets = []int{status.MaxMessage, 120, 60, 0}

// fit is the first of render(budget) over detailBudgets that fits
// status.MaxMessage, else the last one truncated.
func fit(render func(budget int) string) string {
	var s string
	for _, b := range detailBudgets {
		if s = render(b); len(s) <= status.MaxMessage {
			return s
		}
	}
	return status.Truncate(s)
}

// clip is s on one line (whitespace runs collapsed: Helm's errors are
// multi-line lists) cut to n bytes by the one truncation helper.
func clip(s string, n int) string {
	return report.Truncate(strings.Join(strings.Fields(s), " "), n)
}

// withSuffix is msg cut so that suffix still fits limit bytes.
func withSuffix(msg, suffix string, limit int) string {
	if len(msg)+len(suffix) <= limit {
		return msg + suffix
	}
	return clip(msg, limit-len(suffix)) + suffix
}

// waitingReserve is room kept at the end of a failing release's message
// for " (N waiting on it)", added once every release is judged.
const waitingReserve = len(" (9999 waiting on it)")

func classify(o *adapterkit.Object, r *release) state {
	switch {
	case r.stalled != nil:
		return stateFailing
	case r.ready == nil:
		return stateProgressing
	case r.ready.Status == "True":
		if r.hasObservedGenField && r.observedGen < r.gen {
			return stateStale
		}
		if r.suspended {
			return stateSuspended
		}
		return stateReady
	case r.ready.Status == "False" && r.ready.Reason == ReasonDependencyNotReady:
		return stateWaiting
	case r.waitingForChart():
		// helm-controller waits for the chart before any Helm action: no
		// verdict of its own, the release is what its last action made
		// it (see waitingForChart).
		if r.released != nil && r.released.Reason != "" {
			return stateFailing
		}
		return stateProgressing
	case r.ready.Status == "False" && r.ready.Reason == ReasonHealthCheckCanceled:
		// helm-controller v1.5+ (CancelHealthCheckOnNewRevision) stopped
		// waiting for the release's resources because a new
		// reconciliation is queued, and runs it at once
		// (internal/controller/helmrelease_controller.go, v1.5.0): the
		// canceled wait is no failure, the next verdict is pending.
		return stateProgressing
	case r.ready.Status == "False":
		return stateFailing
	case r.retrying:
		return stateFailing
	case r.released != nil && r.released.Status == "False":
		// Ready=Unknown while helm-controller runs the action again after
		// a failed one (Reconciling=True Progressing, "Running 'install'
		// action with timeout of ..."): the release is not released until
		// it succeeds. With a retry strategy (Cozystack's RetryOnFailure)
		// a release that keeps failing spends most of its time here.
		return stateFailing
	}
	return stateProgressing
}

// Judge implements adapterkit.Adapter.
func (Adapter) Judge(in *adapterkit.Input) []adapterkit.Finding {
	objs := in.List(Source.GVR)
	nodes := make(map[string]*node, len(objs))
	order := make([]*node, 0, len(objs))
	for _, o := range objs {
		r, ok := o.Data.(*release)
		if !ok {
			continue
		}
		n := &node{key: o.Namespace + "/" + o.Name, obj: o, r: r}
		n.state = classify(o, r)
		nodes[n.key] = n
		order = append(order, n)
	}
	var stack []string
	var resolve func(n *node) []*root
	resolve = func(n *node) []*root {
		if n.resolved {
			return n.roots
		}
		if n.visiting {
			return nil // the caller that closes the cycle reports it
		}
		n.visiting = true
		stack = append(stack, n.key)
		seen := map[string]bool{}
		add := func(rt *root) {
			if !seen[rt.kind+rt.key] {
				seen[rt.kind+rt.key] = true
				n.roots = append(n.roots, rt)
			}
		}
		for _, dk := range n.r.deps {
			d := nodes[dk]
			switch {
			case d == nil:
				add(&root{key: dk, kind: "missing", reason: ReasonDependencyMissing})
			case d.visiting:
				cyc := canonicalCycle(stack[indexOf(stack, dk):])
				add(&root{key: cyc[0], kind: "cycle", reason: ReasonDependencyCycle, detail: strings.Join(append(cyc, cyc[0]), " -> ")})
			case d.state == stateFailing:
				add(&root{key: dk, kind: "failing", reason: d.r.failReason(), detail: d.r.failMessage()})
			case d.state == stateWaiting:
				for _, rt := range resolve(d) {
					add(rt)
				}
			case d.state == stateProgressing || d.state == stateStale:
				add(&root{key: dk, kind: "progressing", reason: ReasonProgressing})
			}
		}
		stack = stack[:len(stack)-1]
		n.visiting = false
		n.resolved = true
		return n.roots
	}
	waitingOn := map[*root]int{}
	rootsByKey := map[string]*root{}
	canon := func(rt *root) *root {
		k := rt.kind + "\x00" + rt.key + "\x00" + rt.detail
		if c, ok := rootsByKey[k]; ok {
			return c
		}
		rootsByKey[k] = rt
		return rt
	}
	type scopeTally struct {
		total, ready int
		worst        report.Status
		roots        map[*root]int
		failing      []*root
		suspended    []string
	}
	scopes := map[string]*scopeTally{}
	component := map[string]string{}
	var out []adapterkit.Finding
	for _, n := range order {
		scope, comp := in.AppsScope(n.obj.Namespace)
		component[scope] = comp
		t := scopes[scope]
		if t == nil {
			t = &scopeTally{worst: report.StatusHealthy, roots: map[*root]int{}}
			scopes[scope] = t
		}
		t.total++
		ref := adapterkit.Ref(Source, n.obj.Namespace, n.obj.Name)
		c := status.Condition{Type: TypeRelease, Resource: ref}
		switch n.state {
		case stateReady:
			t.ready++
			continue
		case stateSuspended:
			c.Severity, c.Reason = report.StatusDegraded, ReasonSuspended
			c.Message = "reconciliation suspended (spec.suspend): Ready=True"
			if n.r.ready.Reason != "" {
				c.Message += " (" + n.r.ready.Reason + ")"
			}
			c.Message += " dates from before the suspension and is no longer verified"
			t.suspended = append(t.suspended, n.key)
		case stateStale:
			c.Severity, c.Reason = report.StatusUnknown, ReasonGenerationNotObserved
			c.Message = fmt.Sprintf("generation %d not yet observed (status is of generation %d)", n.r.gen, n.r.observedGen)
		case stateProgressing:
			c.Severity, c.Reason, c.Message = report.StatusUnknown, ReasonProgressing, "no verdict yet"
			if n.r.ready != nil {
				c.Message = n.r.ready.Message
				if n.r.ready.Reason != "" {
					c.Reason = n.r.ready.Reason
				}
			} else {
				c.Reason = ReasonNoStatus
			}
		case stateFailing:
			c.Severity, c.Reason, c.Message = report.StatusDegraded, n.r.failReason(), n.r.failMessage()
			t.failing = append(t.failing, &root{key: n.key, kind: "failing", reason: c.Reason, detail: c.Message})
		case stateWaiting:
			roots := resolve(n)
			c.Severity, c.Reason = report.StatusUnknown, ReasonDependencyNotReady
			var canonRoots []*root
			for _, rt := range roots {
				rt = canon(rt)
				canonRoots = append(canonRoots, rt)
				waitingOn[rt]++
				t.roots[rt]++
				if rt.kind != "progressing" {
					c.Severity = report.StatusDegraded
				}
				if rt.kind == "missing" && c.Reason == ReasonDependencyNotReady {
					c.Reason = ReasonDependencyMissing
				}
				if rt.kind == "cycle" && onCycle(rt, n.key) {
					c.Reason = ReasonDependencyCycle
				}
			}
			named := func(budget int) string {
				var s []string
				for _, rt := range canonRoots {
					s = append(s, rt.describe(budget))
				}
				return strings.Join(s, ", ")
			}
			switch {
			case len(roots) == 0:
				c.Message = "its dependencies are ready; waiting for its next reconciliation"
			case c.Reason == ReasonDependencyCycle:
				c.Message = "dependency cycle: " + cycleOf(roots)
			case c.Severity == report.StatusUnknown:
				// Every dependency it waits on is still progressing.
				c.Message = fit(func(b int) string { return "waiting on " + named(b) })
			default:
				c.Message = fit(func(b int) string { return "waiting on root cause " + named(b) })
			}
		}
		if n.r.suspended && n.state != stateSuspended {
			c.Message = withSuffix(c.Message, " (suspended)", status.MaxMessage)
		}
		c.Message = status.Truncate(c.Message)
		t.worst = report.Worse(t.worst, c.Severity)
		out = append(out, adapterkit.Finding{Namespace: scope, Component: comp, Condition: c})
	}
	// A failing release others wait on says how many.
	for i := range out {
		f := &out[i]
		if f.Condition.Severity != report.StatusDegraded || f.Condition.Reason == ReasonDependencyNotReady {
			continue
		}
		key := f.Condition.Resource.Namespace + "/" + f.Condition.Resource.Name
		for rt, k := range waitingOn {
			if rt.kind == "failing" && rt.key == key {
				f.Condition.Message = withSuffix(f.Condition.Message, fmt.Sprintf(" (%d waiting on it)", k), status.MaxMessage)
			}
		}
	}
	for scope, t := range scopes {
		c := status.Condition{Type: TypeReleases, Severity: t.worst}
		if t.ready == t.total {
			c.Reason, c.Message = ReasonAllReady, fmt.Sprintf("%d of %d ready", t.ready, t.total)
		} else {
			c.Reason = ReasonNotReady
			c.Message = fit(func(b int) string { return summary(t.ready, t.total, t.roots, t.failing, t.suspended, b) })
		}
		out = append(out, adapterkit.Finding{Namespace: scope, Component: component[scope], Condition: c})
	}
	return out
}

// summary is "91 of 98 ready; 1 root cause: X (UpgradeFailed: ...), 7
// waiting on it; waiting on progressing: Y (Progressing), 2 waiting on it;
// 1 suspended: Z". Failing releases nobody waits on are root causes too;
// a progressing dependency is no root cause.
func summary(ready, total int, waiting map[*root]int, failing []*root, suspended []string, budget int) string {
	type entry struct {
		desc string
		n    int
	}
	var causes, progressing []entry
	named := map[string]bool{}
	for rt, n := range waiting {
		if rt.kind == "progressing" {
			progressing = append(progressing, entry{rt.describe(budget), n})
			continue
		}
		causes = append(causes, entry{rt.describe(budget), n})
		if rt.kind == "failing" {
			named[rt.key] = true
		}
	}
	for _, rt := range failing {
		if !named[rt.key] {
			causes = append(causes, entry{rt.describe(budget), 0})
		}
	}
	order := func(entries []entry) {
		sort.Slice(entries, func(i, j int) bool {
			if entries[i].n != entries[j].n {
				return entries[i].n > entries[j].n
			}
			return entries[i].desc < entries[j].desc
		})
	}
	write := func(b *strings.Builder, entries []entry) {
		for i, e := range entries {
			if i > 0 {
				b.WriteString("; ")
			}
			b.WriteString(e.desc)
			if e.n > 0 {
				fmt.Fprintf(b, ", %d waiting on it", e.n)
			}
		}
	}
	order(causes)
	order(progressing)
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d ready", ready, total)
	if len(causes) > 0 {
		fmt.Fprintf(&b, "; %s: ", adapterkit.Plural(len(causes), "root cause", "root causes"))
		write(&b, causes)
	}
	if len(progressing) > 0 {
		b.WriteString("; waiting on progressing: ")
		write(&b, progressing)
	}
	if len(suspended) > 0 {
		sort.Strings(suspended)
		fmt.Fprintf(&b, "; %s: %s", adapterkit.Plural(len(suspended), "suspended", "suspended"), strings.Join(suspended, ", "))
	}
	return b.String()
}

func cycleOf(roots []*root) string {
	for _, rt := range roots {
		if rt.kind == "cycle" {
			return rt.detail
		}
	}
	return ""
}

// canonicalCycle rotates a cycle to start at its smallest key, so one
// cycle reads the same from wherever it was entered.
func canonicalCycle(path []string) []string {
	first := 0
	for i, k := range path {
		if k < path[first] {
			first = i
		}
	}
	return append(append([]string{}, path[first:]...), path[:first]...)
}

func onCycle(rt *root, key string) bool {
	for _, k := range strings.Split(rt.detail, " -> ") {
		if k == key {
			return true
		}
	}
	return false
}

// failReason is Ready's reason when Ready=False (helm-controller copies the
// failing action's there: UpgradeFailed, InstallFailed...), else Stalled's;
// Released's when Ready copies a remediation (see failMessage), or says
// that the chart is awaited (SourceNotReady, ArtifactFailed) after a failed
// action; never HealthCheckCanceled, which is no failure.
func (r *release) failReason() string {
	if r.remediatedFailure() || r.retryingFailure() || r.failedWaitingForChart() {
		return r.released.Reason
	}
	if r.ready != nil && r.ready.Status == "False" && r.ready.Reason != "" && r.ready.Reason != ReasonHealthCheckCanceled {
		return r.ready.Reason
	}
	if r.stalled != nil && r.stalled.Reason != "" {
		return r.stalled.Reason
	}
	if r.ready != nil && r.ready.Reason != "" {
		return r.ready.Reason
	}
	return "ReconciliationFailed"
}

// failMessage is Ready's message when Ready=False, then Stalled's, cut to
// leave room for " (N waiting on it)" and on one line.
//
// A failed action that helm-controller remediated (rolled back, or
// uninstalled) leaves Ready=False copying Remediated=True
// (RollbackSucceeded, "Helm rollback to ... succeeded"): the failure is then
// the Released condition's (UpgradeFailed and the error), and the
// remediation is said after it.
func (r *release) failMessage() string {
	var head string
	var tail []string
	switch {
	case r.remediatedFailure():
		head = r.released.Message
		tail = append(tail, "remediated: "+r.remediated.Reason)
	case r.retryingFailure():
		head = r.released.Message
		tail = append(tail, "retrying")
	case r.failedWaitingForChart():
		head = r.released.Message
		if r.remediated != nil {
			tail = append(tail, "remediated: "+r.remediated.Reason)
		}
		tail = append(tail, "waiting for its chart: "+r.ready.Reason)
	case r.ready != nil && r.ready.Status == "False":
		head = r.ready.Message
	}
	if r.stalled != nil && r.stalled.Message != "" {
		tail = append([]string{"stalled: " + r.stalled.Message}, tail...)
	}
	if head == "" && len(tail) == 0 && r.ready != nil {
		head = r.ready.Message
	}
	if head == "" {
		return strings.Join(tail, "; ")
	}
	limit := status.MaxMessage - waitingReserve
	if len(tail) == 0 {
		return clip(head, limit)
	}
	return withSuffix(clip(head, limit), "; "+strings.Join(tail, "; "), limit)
}

// waitingForChart says helm-controller is waiting for the release's chart
// (Ready=False SourceNotReady or ArtifactFailed) before any Helm action.
//
// helm-controller v1.4.3 (internal/controller/helmrelease_controller.go,
// reconcileRelease) writes ArtifactFailed in three places, none of which
// marks Stalled or runs a Helm action (Released is left as it was):
// "could not get Source object: ..." (the HelmChart or OCIRepository cannot
// be read; retried with backoff), "Source not ready: artifact not found.
// Retrying in <requeue-dependency>" (source-controller's storage no longer
// holds the artifact its status advertises; requeued as the dependency
// wait, errWaitForDependency, which does not even update
// observedGeneration) and "Could not load chart: ..." (the download or the
// chart failed, source-controller unreachable included; retried with
// backoff). Each clears to Ready=Unknown once the chart loads. Like
// SourceNotReady, they say where the chart is, not how the release is.
func (r *release) waitingForChart() bool {
	return r.ready != nil && r.ready.Status == "False" &&
		(r.ready.Reason == ReasonSourceNotReady || r.ready.Reason == ReasonArtifactFailed)
}

// failedWaitingForChart says the release's last action failed
// (Released=False) and helm-controller waits for the chart to run one
// again: still failing, with Released's reason.
func (r *release) failedWaitingForChart() bool {
	return r.waitingForChart() && r.released != nil && r.released.Status == "False" && r.released.Reason != ""
}

// retryingFailure says helm-controller runs a release action again after
// a failed one (Ready not False, Released=False).
func (r *release) retryingFailure() bool {
	return (r.ready == nil || r.ready.Status != "False") && r.stalled == nil &&
		r.released != nil && r.released.Status == "False" && r.released.Reason != ""
}

// remediatedFailure says Ready=False is helm-controller's copy of
// Remediated=True after a failed release action (Released=False).
func (r *release) remediatedFailure() bool {
	return r.ready != nil && r.ready.Status == "False" && r.remediated != nil && r.ready.Reason == r.remediated.Reason &&
		r.released != nil && r.released.Status == "False" && r.released.Reason != ""
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return 0
}
