// Package cnpg judges CloudNativePG backups (postgresql.cnpg.io/v1) and,
// where the Barman Cloud plugin is installed, its ObjectStores
// (barmancloud.cnpg.io/v1), one Backup condition per backed-up Cluster.
//
// A Cluster is backed up when it has spec.backup, a backup plugin, a
// ScheduledBackup or a Backup. Its history:
//
//   - schedule: the ScheduledBackups naming it (spec.cluster.name), the
//     most frequent that is not suspended; six-field cron (seconds first).
//     When every one is suspended (spec.suspend) the Cluster reads
//     ScheduleSuspended, naming them;
//   - last success: the latest of status.lastSuccessfulBackup (not set for
//     plugin backups), the stoppedAt of its completed Backups and the
//     plugin's ObjectStore status.serverRecoveryWindow[server]
//     .lastSuccessfulBackupTime;
//   - last failure: the latest of status.lastFailedBackup, its failed
//     Backups (phase failed or walArchivingFailing) and the ObjectStore's
//     lastFailedBackupTime; the condition LastBackupSucceeded=False with
//     reason LastBackupFailed says the last attempt failed.
//
// The rules are adapterkit.JudgeBackup's. A Cluster whose
// ContinuousArchiving condition is False also gets an Archiving condition
// (Degraded): point-in-time recovery is not possible past the last WAL
// archived.
package cnpg

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/cozystack/cozy-health/aggregator/internal/adapterkit"
	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
)

const group = "postgresql.cnpg.io"

// Sources.
var (
	Clusters = adapterkit.Source{
		GVR: schema.GroupVersionResource{Group: group, Version: "v1", Resource: "clusters"}, Kind: "Cluster", Project: projectCluster,
	}
	Backups = adapterkit.Source{
		GVR: schema.GroupVersionResource{Group: group, Version: "v1", Resource: "backups"}, Kind: "Backup", Optional: true, Project: projectBackup,
	}
	ScheduledBackups = adapterkit.Source{
		GVR: schema.GroupVersionResource{Group: group, Version: "v1", Resource: "scheduledbackups"}, Kind: "ScheduledBackup", Optional: true, Project: projectScheduled,
	}
	ObjectStores = adapterkit.Source{
		GVR: schema.GroupVersionResource{Group: "barmancloud.cnpg.io", Version: "v1", Resource: "objectstores"}, Kind: "ObjectStore", Optional: true, Project: projectObjectStore,
	}
)

// Condition types and reasons beyond adapter's backup ones.
const (
	TypeArchiving             = "Archiving"
	ReasonArchivingFailing    = "ContinuousArchivingFailing"
	barmanPlugin              = "barman-cloud.cloudnative-pg.io"
	conditionLastBackup       = "LastBackupSucceeded"
	conditionArchiving        = "ContinuousArchiving"
	reasonLastBackupFailed    = "LastBackupFailed"
	phaseCompleted            = "completed"
	phaseFailed               = "failed"
	phaseWALArchivingFailing  = "walArchivingFailing"
	defaultObjectStoreMissing = ""
)

// Adapter is the CNPG adapter.
type Adapter struct{}

var _ adapterkit.Adapter = Adapter{}

// New returns the adapter.
func New() Adapter { return Adapter{} }

// Name implements adapterkit.Adapter.
func (Adapter) Name() string { return "cnpg" }

// Component implements adapterkit.Adapter.
func (Adapter) Component() string { return adapterkit.ComponentBackups }

// Sources implements adapterkit.Adapter.
func (Adapter) Sources() []adapterkit.Source {
	return []adapterkit.Source{Clusters, Backups, ScheduledBackups, ObjectStores}
}

type cluster struct {
	configured            bool // spec.backup or a backup plugin
	objectStore, server   string
	lastSuccess, lastFail time.Time
	lastBackup, archiving *adapterkit.Cond
}

type backup struct {
	cluster, phase, err string
	at                  time.Time // stoppedAt, else startedAt
}

type scheduled struct {
	cluster, schedule string
	suspend           bool
}

type objectStore struct {
	windows map[string][2]time.Time // server -> last success, last failure
}

func projectCluster(u *unstructured.Unstructured) any {
	c := &cluster{server: u.GetName()}
	if _, ok, _ := unstructured.NestedMap(u.Object, "spec", "backup"); ok {
		c.configured = true
		if n := adapterkit.String(u, "spec", "backup", "barmanObjectStore", "serverName"); n != "" {
			c.server = n
		}
	}
	plugins, _, _ := unstructured.NestedSlice(u.Object, "spec", "plugins")
	for _, p := range plugins {
		m, _ := p.(map[string]any)
		if name, _ := m["name"].(string); name != barmanPlugin {
			continue
		}
		c.configured = true
		params, _ := m["parameters"].(map[string]any)
		if s, _ := params["barmanObjectName"].(string); s != "" {
			c.objectStore = s
		}
		if s, _ := params["serverName"].(string); s != "" {
			c.server = s
		}
	}
	c.lastSuccess = adapterkit.Time(u, "status", "lastSuccessfulBackup")
	c.lastFail = adapterkit.Time(u, "status", "lastFailedBackup")
	conds := adapterkit.Conditions(u)
	c.lastBackup = adapterkit.Find(conds, conditionLastBackup)
	c.archiving = adapterkit.Find(conds, conditionArchiving)
	return c
}

func projectBackup(u *unstructured.Unstructured) any {
	b := &backup{cluster: adapterkit.String(u, "spec", "cluster", "name"), phase: adapterkit.String(u, "status", "phase"),
		err: status.Truncate(adapterkit.String(u, "status", "error"))}
	b.at = adapterkit.FirstTime(u, []string{"status", "stoppedAt"}, []string{"status", "startedAt"})
	return b
}

func projectScheduled(u *unstructured.Unstructured) any {
	s := &scheduled{cluster: adapterkit.String(u, "spec", "cluster", "name"), schedule: adapterkit.String(u, "spec", "schedule")}
	s.suspend, _ = adapterkit.Bool(u, "spec", "suspend")
	return s
}

func projectObjectStore(u *unstructured.Unstructured) any {
	o := &objectStore{windows: map[string][2]time.Time{}}
	w, _, _ := unstructured.NestedMap(u.Object, "status", "serverRecoveryWindow")
	for server, v := range w {
		m, _ := v.(map[string]any)
		ok, _ := m["lastSuccessfulBackupTime"].(string)
		bad, _ := m["lastFailedBackupTime"].(string)
		o.windows[server] = [2]time.Time{adapterkit.ParseTime(ok), adapterkit.ParseTime(bad)}
	}
	return o
}

// Judge implements adapterkit.Adapter.
func (Adapter) Judge(in *adapterkit.Input) []adapterkit.Finding {
	type hist struct {
		obj      *adapterkit.Object
		c        *cluster
		h        adapterkit.BackupHistory
		interval time.Duration
		tracked  bool
	}
	byKey := map[string]*hist{}
	var order []*hist
	for _, o := range in.List(Clusters.GVR) {
		c, ok := o.Data.(*cluster)
		if !ok {
			continue
		}
		h := &hist{obj: o, c: c, tracked: c.configured}
		h.h.Since = o.CreationTimestamp.Time
		h.h.LastSuccess, h.h.LastFailure = c.lastSuccess, c.lastFail
		if lb := c.lastBackup; lb != nil && lb.Status == "False" && lb.Reason == reasonLastBackupFailed {
			h.h.Failing = true
			h.h.FailureMessage = lb.Message
		}
		byKey[adapterkit.Key(o.Namespace, o.Name)] = h
		order = append(order, h)
	}
	suspended := map[*hist][]*adapterkit.Object{}
	for _, o := range in.List(ScheduledBackups.GVR) {
		s, ok := o.Data.(*scheduled)
		if !ok {
			continue
		}
		h := byKey[adapterkit.Key(o.Namespace, s.cluster)]
		if h == nil {
			continue
		}
		h.tracked = true
		if s.suspend {
			suspended[h] = append(suspended[h], o)
			continue
		}
		iv, _, err := adapterkit.ScheduleInterval(s.schedule, in.Now)
		if err != nil && h.h.Schedule == "" {
			h.h.Schedule = s.schedule // judged ScheduleInvalid
			continue
		}
		if h.h.Schedule == "" || (err == nil && iv < h.interval) {
			h.h.Schedule, h.interval = s.schedule, iv
			h.h.Since = o.CreationTimestamp.Time
		}
	}
	// A Cluster whose every ScheduledBackup is suspended expects no
	// backup: ScheduleSuspended, naming them; its age is judged against
	// the first one's cron.
	for h, objs := range suspended {
		if h.h.Schedule != "" {
			continue
		}
		h.h.Schedule, h.h.Suspended = objs[0].Data.(*scheduled).schedule, true
		h.h.SuspendedBy = "ScheduledBackup " + adapterkit.Key(objs[0].Namespace, objs[0].Name) + " is suspended (spec.suspend)"
		if len(objs) > 1 {
			names := make([]string, len(objs))
			for i, o := range objs {
				names[i] = o.Name
			}
			h.h.SuspendedBy = fmt.Sprintf("every ScheduledBackup of it is suspended (spec.suspend): %s", strings.Join(names, ", "))
		}
	}
	for _, o := range in.List(Backups.GVR) {
		b, ok := o.Data.(*backup)
		h := byKey[adapterkit.Key(o.Namespace, b.cluster)]
		if !ok || h == nil {
			continue
		}
		h.tracked = true
		switch b.phase {
		case phaseCompleted:
			if b.at.After(h.h.LastSuccess) {
				h.h.LastSuccess = b.at
			}
		case phaseFailed, phaseWALArchivingFailing:
			if !b.at.Before(h.h.LastFailure) {
				h.h.LastFailure = b.at
				if b.err != "" {
					h.h.FailureMessage = b.err
				} else {
					h.h.FailureMessage = "Backup " + o.Name + " " + b.phase
				}
			}
		}
	}
	for _, h := range order {
		if h.c.objectStore == defaultObjectStoreMissing {
			continue
		}
		o := in.Get(ObjectStores.GVR, h.obj.Namespace, h.c.objectStore)
		if o == nil {
			continue
		}
		w, ok := o.Data.(*objectStore).windows[h.c.server]
		if !ok {
			continue
		}
		if w[0].After(h.h.LastSuccess) {
			h.h.LastSuccess = w[0]
		}
		if w[1].After(h.h.LastFailure) {
			h.h.LastFailure = w[1]
		}
	}
	var out []adapterkit.Finding
	for _, h := range order {
		if !h.tracked {
			continue
		}
		scope, _ := in.Scope(h.obj.Namespace)
		ref := adapterkit.Ref(Clusters, h.obj.Namespace, h.obj.Name)
		c := adapterkit.JudgeBackup(in.Now, in.MaxAge(scope), h.h)
		c.Resource = ref
		out = append(out, adapterkit.Finding{Namespace: scope, Component: adapterkit.ComponentBackups, Condition: c})
		if a := h.c.archiving; a != nil && a.Status == "False" {
			out = append(out, adapterkit.Finding{Namespace: scope, Component: adapterkit.ComponentBackups, Condition: status.Condition{
				Type: TypeArchiving, Severity: report.StatusDegraded, Reason: ReasonArchivingFailing, Message: a.Message, Resource: ref,
			}})
		}
	}
	return out
}
