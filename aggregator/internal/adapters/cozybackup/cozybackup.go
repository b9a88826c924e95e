// Package cozybackup judges Cozystack's own backups (backups.cozystack.io/
// v1alpha1): one Backup condition per Plan, pinned to it. A Plan names
// the application it backs up and its cron schedule (spec.schedule.cron);
// the BackupJobs the Plan creates (spec.planRef) carry each run's phase
// (Pending, Running, Succeeded, Failed) and times. The last success is the
// latest completedAt (else startedAt, else creation) of a Succeeded job;
// the last failure that of a Failed job, with its status.message. The
// rules are adapter.JudgeBackup's.
package cozybackup

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/cozystack/cozy-health/aggregator/internal/adapter"
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
func (Adapter) Sources() []adapter.Source { return []adapter.Source{Plans, BackupJobs} }

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
		message: adapter.Truncate(adapter.String(u, "status", "message"))}
	j.at = adapter.Time(u, "status", "completedAt")
	if j.at.IsZero() {
		j.at = adapter.Time(u, "status", "startedAt")
	}
	if j.at.IsZero() {
		j.at = u.GetCreationTimestamp().Time
	}
	return j
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
	for _, o := range in.List(BackupJobs.GVR) {
		j, ok := o.Data.(*job)
		if !ok || j.plan == "" {
			continue
		}
		h := hist[adapter.Key(o.Namespace, j.plan)]
		if h == nil {
			continue
		}
		switch j.phase {
		case "Succeeded":
			if j.at.After(h.LastSuccess) {
				h.LastSuccess = j.at
			}
		case "Failed":
			if !j.at.Before(h.LastFailure) {
				h.LastFailure = j.at
				h.FailureMessage = j.message
				if h.FailureMessage == "" {
					h.FailureMessage = "BackupJob " + o.Name + " failed"
				}
			}
		}
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
		c.Message = adapter.Truncate(o.Data.(*plan).app + ": " + c.Message)
		out = append(out, adapter.Finding{Namespace: scope, Component: adapter.ComponentBackups, Condition: c})
	}
	return out
}
