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
// adapterkit.JudgeBackup's.
package cozybackup

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/cozystack/cozy-health/aggregator/internal/adapterkit"
	"github.com/cozystack/cozy-health/aggregator/internal/status"
)

const group = "backups.cozystack.io"

// Sources.
var (
	Plans = adapterkit.Source{
		GVR: schema.GroupVersionResource{Group: group, Version: "v1alpha1", Resource: "plans"}, Kind: "Plan", Project: projectPlan,
	}
	BackupJobs = adapterkit.Source{
		GVR: schema.GroupVersionResource{Group: group, Version: "v1alpha1", Resource: "backupjobs"}, Kind: "BackupJob", Project: projectJob,
	}
	// Backups are optional: the adapter judges Plans and BackupJobs alone
	// where the Backup kind is not served.
	Backups = adapterkit.Source{
		GVR: schema.GroupVersionResource{Group: group, Version: "v1alpha1", Resource: "backups"}, Kind: "Backup", Optional: true, Project: projectBackup,
	}
)

// Adapter is the Cozystack backups adapter.
type Adapter struct{}

var _ adapterkit.Adapter = Adapter{}

// New returns the adapter.
func New() Adapter { return Adapter{} }

// Name implements adapterkit.Adapter.
func (Adapter) Name() string { return "cozystack-backups" }

// Component implements adapterkit.Adapter.
func (Adapter) Component() string { return adapterkit.ComponentBackups }

// Sources implements adapterkit.Adapter.
func (Adapter) Sources() []adapterkit.Source { return []adapterkit.Source{Plans, BackupJobs, Backups} }

type plan struct {
	cron, app string
}

type job struct {
	plan, phase, message string
	at                   time.Time
}

func projectPlan(u *unstructured.Unstructured) any {
	return &plan{cron: adapterkit.String(u, "spec", "schedule", "cron"),
		app: fmt.Sprintf("%s %s", adapterkit.String(u, "spec", "applicationRef", "kind"), adapterkit.String(u, "spec", "applicationRef", "name"))}
}

func projectJob(u *unstructured.Unstructured) any {
	j := &job{plan: adapterkit.String(u, "spec", "planRef", "name"), phase: adapterkit.String(u, "status", "phase"),
		message: status.Truncate(adapterkit.String(u, "status", "message"))}
	j.at = adapterkit.FirstTime(u, []string{"status", "completedAt"}, []string{"status", "startedAt"})
	return j
}

// projectBackup keeps a Backup's plan, phase, time and, when Failed, why.
// Its phase is Ready for a usable artifact (the driver's contract);
// conditions say why one failed.
func projectBackup(u *unstructured.Unstructured) any {
	b := &job{plan: adapterkit.String(u, "spec", "planRef", "name"), phase: adapterkit.String(u, "status", "phase")}
	b.at = adapterkit.FirstTime(u, []string{"spec", "takenAt"})
	if b.phase == "Failed" {
		for _, c := range adapterkit.Conditions(u) {
			if c.Status == "False" && c.Message != "" {
				b.message = c.Message
				break
			}
		}
	}
	return b
}

// Judge implements adapterkit.Adapter.
func (Adapter) Judge(in *adapterkit.Input) []adapterkit.Finding {
	hist := map[string]*adapterkit.BackupHistory{}
	plans := in.List(Plans.GVR)
	for _, o := range plans {
		p, ok := o.Data.(*plan)
		if !ok {
			continue
		}
		hist[adapterkit.Key(o.Namespace, o.Name)] = &adapterkit.BackupHistory{Schedule: p.cron, Since: o.CreationTimestamp.Time}
	}
	record := func(src adapterkit.Source, success string, o *adapterkit.Object) {
		j, ok := o.Data.(*job)
		if !ok || j.plan == "" {
			return
		}
		h := hist[adapterkit.Key(o.Namespace, j.plan)]
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
	out := make([]adapterkit.Finding, 0, len(plans))
	for _, o := range plans {
		h := hist[adapterkit.Key(o.Namespace, o.Name)]
		if h == nil {
			continue
		}
		scope, _ := in.Scope(o.Namespace)
		c := adapterkit.JudgeBackup(in.Now, in.MaxAge(scope), *h)
		c.Resource = adapterkit.Ref(Plans, o.Namespace, o.Name)
		c.Message = status.Truncate(o.Data.(*plan).app + ": " + c.Message)
		out = append(out, adapterkit.Finding{Namespace: scope, Component: adapterkit.ComponentBackups, Condition: c})
	}
	return out
}
