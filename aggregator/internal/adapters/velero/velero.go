// Package velero judges velero backups (velero.io/v1): one Backup
// condition per Schedule, pinned to it. A Schedule's backups carry the
// label velero.io/schedule-name; the last success is the latest
// completionTimestamp of a Completed backup, the last failure that of a
// Failed, PartiallyFailed or FailedValidation one (with its
// failureReason). A Schedule whose own phase is FailedValidation never
// runs: its history is judged as failing; a paused one (spec.paused)
// reads ScheduleSuspended. The rules are adapter.JudgeBackup's.
package velero

import (
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/cozystack/cozy-health/aggregator/internal/adapter"
	"github.com/cozystack/cozy-health/aggregator/internal/status"
)

// Sources.
var (
	Schedules = adapter.Source{
		GVR: schema.GroupVersionResource{Group: "velero.io", Version: "v1", Resource: "schedules"}, Kind: "Schedule", Project: projectSchedule,
	}
	Backups = adapter.Source{
		GVR: schema.GroupVersionResource{Group: "velero.io", Version: "v1", Resource: "backups"}, Kind: "Backup", Project: projectBackup,
	}
)

const scheduleLabel = "velero.io/schedule-name"

// Adapter is the velero adapter.
type Adapter struct{}

var _ adapter.Adapter = Adapter{}

// New returns the adapter.
func New() Adapter { return Adapter{} }

// Name implements adapter.Adapter.
func (Adapter) Name() string { return "velero" }

// Component implements adapter.Adapter.
func (Adapter) Component() string { return adapter.ComponentBackups }

// Sources implements adapter.Adapter.
func (Adapter) Sources() []adapter.Source { return []adapter.Source{Schedules, Backups} }

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
	s := &schedule{cron: adapter.String(u, "spec", "schedule"), phase: adapter.String(u, "status", "phase")}
	s.paused, _ = adapter.Bool(u, "spec", "paused")
	errs, _, _ := unstructured.NestedStringSlice(u.Object, "status", "validationErrors")
	if len(errs) > 0 {
		s.validation = status.Truncate(errs[0])
	}
	return s
}

func projectBackup(u *unstructured.Unstructured) any {
	b := &backup{schedule: u.GetLabels()[scheduleLabel], phase: adapter.String(u, "status", "phase"),
		reason: status.Truncate(adapter.String(u, "status", "failureReason"))}
	b.at = adapter.Time(u, "status", "completionTimestamp")
	if b.at.IsZero() {
		b.at = adapter.Time(u, "status", "startTimestamp")
	}
	if b.at.IsZero() {
		b.at = u.GetCreationTimestamp().Time
	}
	return b
}

// Judge implements adapter.Adapter.
func (Adapter) Judge(in *adapter.Input) []adapter.Finding {
	hist := map[string]*adapter.BackupHistory{}
	scheds := in.List(Schedules.GVR)
	for _, o := range scheds {
		s, ok := o.Data.(*schedule)
		if !ok {
			continue
		}
		h := &adapter.BackupHistory{Schedule: s.cron, Suspended: s.paused, Since: o.CreationTimestamp.Time}
		if s.paused {
			h.SuspendedBy = "Schedule " + adapter.Key(o.Namespace, o.Name) + " is paused (spec.paused)"
		}
		if s.phase == "FailedValidation" {
			h.Failing = true
			h.FailureMessage = "schedule failed validation"
			if s.validation != "" {
				h.FailureMessage += ": " + s.validation
			}
		}
		hist[adapter.Key(o.Namespace, o.Name)] = h
	}
	for _, o := range in.List(Backups.GVR) {
		b, ok := o.Data.(*backup)
		if !ok || b.schedule == "" {
			continue
		}
		h := hist[adapter.Key(o.Namespace, b.schedule)]
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
	out := make([]adapter.Finding, 0, len(scheds))
	for _, o := range scheds {
		h := hist[adapter.Key(o.Namespace, o.Name)]
		if h == nil {
			continue
		}
		scope, _ := in.Scope(o.Namespace)
		c := adapter.JudgeBackup(in.Now, in.MaxAge(scope), *h)
		c.Resource = adapter.Ref(Schedules, o.Namespace, o.Name)
		out = append(out, adapter.Finding{Namespace: scope, Component: adapter.ComponentBackups, Condition: c})
	}
	return out
}
