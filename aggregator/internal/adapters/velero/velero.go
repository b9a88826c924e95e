// Package velero judges velero backups (velero.io/v1): one Backup
// condition per Schedule, pinned to it. A Schedule's backups carry the
// label velero.io/schedule-name; the last success is the latest
// completionTimestamp of a Completed backup, the last failure that of a
// Failed, PartiallyFailed or FailedValidation one (with its
// failureReason). A Schedule whose own phase is FailedValidation never
// runs: its history is judged as failing; a paused one (spec.paused)
// reads ScheduleSuspended. The rules are adapterkit.JudgeBackup's.
package velero

import (
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/cozystack/cozy-health/aggregator/internal/adapterkit"
	"github.com/cozystack/cozy-health/aggregator/internal/status"
)

// Sources.
var (
	Schedules = adapterkit.Source{
		GVR: schema.GroupVersionResource{Group: "velero.io", Version: "v1", Resource: "schedules"}, Kind: "Schedule", Project: projectSchedule,
	}
	Backups = adapterkit.Source{
		GVR: schema.GroupVersionResource{Group: "velero.io", Version: "v1", Resource: "backups"}, Kind: "Backup", Project: projectBackup,
	}
)

const scheduleLabel = "velero.io/schedule-name"

// Adapter is the velero adapter.
type Adapter struct{}

var _ adapterkit.Adapter = Adapter{}

// New returns the adapter.
func New() Adapter { return Adapter{} }

// Name implements adapterkit.Adapter.
func (Adapter) Name() string { return "velero" }

// Component implements adapterkit.Adapter.
func (Adapter) Component() string { return adapterkit.ComponentBackups }

// Sources implements adapterkit.Adapter.
func (Adapter) Sources() []adapterkit.Source { return []adapterkit.Source{Schedules, Backups} }

type schedule struct {
	cron, phase, validation string
	paused                  bool
	lastBackup              time.Time
}

type backup struct {
	schedule, phase, reason string
	at                      time.Time
}

func projectSchedule(u *unstructured.Unstructured) any {
	s := &schedule{cron: adapterkit.String(u, "spec", "schedule"), phase: adapterkit.String(u, "status", "phase")}
	s.paused, _ = adapterkit.Bool(u, "spec", "paused")
	errs, _, _ := unstructured.NestedStringSlice(u.Object, "status", "validationErrors")
	if len(errs) > 0 {
		s.validation = status.Truncate(errs[0])
	}
	return s
}

func projectBackup(u *unstructured.Unstructured) any {
	b := &backup{schedule: u.GetLabels()[scheduleLabel], phase: adapterkit.String(u, "status", "phase"),
		reason: status.Truncate(adapterkit.String(u, "status", "failureReason"))}
	b.at = adapterkit.FirstTime(u, []string{"status", "completionTimestamp"}, []string{"status", "startTimestamp"})
	return b
}

// Judge implements adapterkit.Adapter.
func (Adapter) Judge(in *adapterkit.Input) []adapterkit.Finding {
	hist := map[string]*adapterkit.BackupHistory{}
	scheds := in.List(Schedules.GVR)
	for _, o := range scheds {
		s, ok := o.Data.(*schedule)
		if !ok {
			continue
		}
		h := &adapterkit.BackupHistory{Schedule: s.cron, Suspended: s.paused, Since: o.CreationTimestamp.Time}
		if s.paused {
			h.SuspendedBy = "Schedule " + adapterkit.Key(o.Namespace, o.Name) + " is paused (spec.paused)"
		}
		if s.phase == "FailedValidation" {
			h.Failing = true
			h.FailureMessage = "schedule failed validation"
			if s.validation != "" {
				h.FailureMessage += ": " + s.validation
			}
		}
		hist[adapterkit.Key(o.Namespace, o.Name)] = h
	}
	for _, o := range in.List(Backups.GVR) {
		b, ok := o.Data.(*backup)
		if !ok || b.schedule == "" {
			continue
		}
		h := hist[adapterkit.Key(o.Namespace, b.schedule)]
		if h == nil {
			continue
		}
		switch b.phase {
		case "Completed":
			if b.at.After(h.LastSuccess) {
				h.LastSuccess = b.at
			}
		case "Failed", "PartiallyFailed", "FailedValidation":
			if !b.at.Before(h.LastFailure) {
				h.LastFailure = b.at
				h.FailureMessage = "Backup " + o.Name + " " + b.phase
				if b.reason != "" {
					h.FailureMessage += ": " + b.reason
				}
			}
		}
	}
	out := make([]adapterkit.Finding, 0, len(scheds))
	for _, o := range scheds {
		h := hist[adapterkit.Key(o.Namespace, o.Name)]
		if h == nil {
			continue
		}
		scope, _ := in.Scope(o.Namespace)
		c := adapterkit.JudgeBackup(in.Now, in.MaxAge(scope), *h)
		c.Resource = adapterkit.Ref(Schedules, o.Namespace, o.Name)
		out = append(out, adapterkit.Finding{Namespace: scope, Component: adapterkit.ComponentBackups, Condition: c})
	}
	return out
}
