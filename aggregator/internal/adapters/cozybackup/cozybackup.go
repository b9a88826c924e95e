// Package cozybackup judges Cozystack's own backups (backups.cozystack.io/
// v1alpha1): one Backup condition per Plan, pinned to it. A Plan names
// the application it backs up and its cron schedule (spec.schedule.cron);
// the BackupJobs the Plan creates (spec.planRef) carry each run's phase
// (Pending, Running, Succeeded, Failed) and times, and the Backups the
// strategy drivers create for a successful run (spec.planRef) are the
// artifacts, each with the time it was taken (spec.takenAt) and its phase
// (Pending, Ready, Failed). A Backup outlives the BackupJob that made it,
// so the last success is the latest of a Succeeded job's completedAt (else
// startedAt, else creation) and a Ready Backup's takenAt (else creation);
// the last failure is the latest Failed job (with its status.message) or
// Failed Backup (with its Ready condition's message). The rules are
// adapter.JudgeBackup's.
package cozybackup

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/cozystack/cozy-health/aggregator/internal/adapter"
	"github.com/cozystack/cozy-health/aggregator/internal/status"
)

const group = "backups.cozystack.io"

// Sources.
var (
	Plans = adapter.Source{
		GVR: schema.GroupVersionResource{Group: group, Version: "v1alpha1", Resource: "plans"}, Kind: "Plan", Project: projectPlan,
	}
	BackupJobs = adapter.Source{
		GVR: schema.GroupVersionResource{Group: group, Version: "v1alpha1", Resource: "backupjobs"}, Kind: "BackupJob", Project: projectJob,
	}
	// Backups are optional: the adapter judges Plans and BackupJobs alone
	// where the Backup kind is not served.
	Backups = adapter.Source{
		GVR: schema.GroupVersionResource{Group: group, Version: "v1alpha1", Resource: "backups"}, Kind: "Backup", Optional: true, Project: projectBackup,
	}
)

// Adapter is the Cozystack backups adapter.
type Adapter struct{}

var _ adapter.Adapter = Adapter{}

// New returns the adapter.
func New() Adapter { return Adapter{} }

// Name implements adapter.Adapter.
func (Adapter) Name() string { return "cozystack-backups" }

// Component implements adapter.Adapter.
func (Adapter) Component() string { return adapter.ComponentBackups }

// Sources implements adapter.Adapter.
func (Adapter) Sources() []adapter.Source { return []adapter.Source{Plans, BackupJobs, Backups} }

type plan struct {
	cron, app string
}

type job struct {
	plan, phase, message string
	at                   time.Time
}

func projectPlan(u *unstructured.Unstructured) any {
	return &plan{cron: adapter.String(u, "spec", "schedule", "cron"),
		app: fmt.Sprintf("%s %s", adapter.String(u, "spec", "applicationRef", "kind"), adapter.String(u, "spec", "applicationRef", "name"))}
}

func projectJob(u *unstructured.Unstructured) any {
	j := &job{plan: adapter.String(u, "spec", "planRef", "name"), phase: adapter.String(u, "status", "phase"),
		message: status.Truncate(adapter.String(u, "status", "message"))}
	j.at = adapter.Time(u, "status", "completedAt")
	if j.at.IsZero() {
		j.at = adapter.Time(u, "status", "startedAt")
	}
	if j.at.IsZero() {
		j.at = u.GetCreationTimestamp().Time
	}
	return j
}

// projectBackup keeps a Backup's plan, phase, time and, when Failed, why.
// Its phase is Ready for a usable artifact (the driver's contract);
// conditions say why one failed.
func projectBackup(u *unstructured.Unstructured) any {
	b := &job{plan: adapter.String(u, "spec", "planRef", "name"), phase: adapter.String(u, "status", "phase")}
	b.at = adapter.Time(u, "spec", "takenAt")
	if b.at.IsZero() {
		b.at = u.GetCreationTimestamp().Time
	}
	if b.phase == "Failed" {
		for _, c := range adapter.Conditions(u) {
			if c.Status == "False" && c.Message != "" {
				b.message = c.Message
				break
			}
		}
	}
	return b
}

// Judge implements adapter.Adapter.
func (Adapter) Judge(in *adapter.Input) []adapter.Finding {
	hist := map[string]*adapter.BackupHistory{}
	plans := in.List(Plans.GVR)
	for _, o := range plans {
		p, ok := o.Data.(*plan)
		if !ok {
			continue
		}
		hist[adapter.Key(o.Namespace, o.Name)] = &adapter.BackupHistory{Schedule: p.cron, Since: o.CreationTimestamp.Time}
	}
	record := func(src adapter.Source, success string, o *adapter.Object) {
		j, ok := o.Data.(*job)
		if !ok || j.plan == "" {
			return
		}
		h := hist[adapter.Key(o.Namespace, j.plan)]
		if h == nil {
			return
		}
		switch j.phase {
		case success:
			if j.at.After(h.LastSuccess) {
				h.LastSuccess = j.at
			}
		case "Failed":
			if !j.at.Before(h.LastFailure) {
				h.LastFailure = j.at
				h.FailureMessage = j.message
				if h.FailureMessage == "" {
					h.FailureMessage = src.Kind + " " + o.Name + " failed"
				}
			}
		}
	}
	for _, o := range in.List(BackupJobs.GVR) {
		record(BackupJobs, "Succeeded", o)
	}
	for _, o := range in.List(Backups.GVR) {
		record(Backups, "Ready", o)
	}
	out := make([]adapter.Finding, 0, len(plans))
	for _, o := range plans {
		h := hist[adapter.Key(o.Namespace, o.Name)]
		if h == nil {
			continue
		}
		scope, _ := in.Scope(o.Namespace)
		c := adapter.JudgeBackup(in.Now, in.MaxAge(scope), *h)
		c.Resource = adapter.Ref(Plans, o.Namespace, o.Name)
		c.Message = status.Truncate(o.Data.(*plan).app + ": " + c.Message)
		out = append(out, adapter.Finding{Namespace: scope, Component: adapter.ComponentBackups, Condition: c})
	}
	return out
}
