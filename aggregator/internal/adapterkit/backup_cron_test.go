package adapterkit_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/cozystack/cozy-health/aggregator/internal/adapterkit"
	"github.com/cozystack/cozy-health/aggregator/internal/adapters/cnpg"
	"github.com/cozystack/cozy-health/aggregator/internal/adapters/cozybackup"
	"github.com/cozystack/cozy-health/aggregator/internal/adapters/velero"
	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
)

var cronNow = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// badSchedules are schedules robfig/cron v3.0.1 (the parser velero and
// Cozystack's backup controller run) either rejects or panics on.
var badSchedules = []string{
	"TZ=",                        // panics in v3.0.1: no space after the zone
	"CRON_TZ=UTC",                // panics in v3.0.1
	"CRON_TZ=",                   // panics in v3.0.1
	"TZ=UTC",                     // panics in v3.0.1
	"TZ=TZ=TZ=",                  // panics in v3.0.1 (robfig/cron#470)
	"TZ=UTC\t0 3 * * *",          // panics in v3.0.1: a tab is no space to it
	"TZ=Nowhere/Bogus * * * * *", // unknown zone
	"TZ=../../etc/passwd * * * * *",
	"",
	" ",
	"@",
	"@every",
	"@every ",
	"@every 1",
	"@every 1fortnight",
	"@sometimes",
	"* * * *",
	"61 * * * *",
	"* 24 * * *",
	"*/0 * * * *",
	"5-1 * * * *",
	"0 0 30 2 *", // never runs (February 30)
	"0 0 0 31 4 *",
	"* * * * * * *",
	strings.Repeat("* ", 4096),
	strings.Repeat("1,", 100_000) + "1 * * * * * *",
	"TZ=" + strings.Repeat("a", 100_000) + " * * * * *",
	"\xff\xfe * * * *",
}

// goodSchedules parse, each with the longest gap between runs.
var goodSchedules = map[string]time.Duration{
	"0 3 * * *":                       24 * time.Hour,
	"0 0 3 * * *":                     24 * time.Hour, // CNPG's six fields, seconds first
	"@daily":                          24 * time.Hour,
	"@every 1h30m":                    90 * time.Minute,
	"@every -1s":                      time.Second, // robfig/cron rounds it up to a second, as velero does
	"TZ=UTC 0 3 * * *":                24 * time.Hour,
	"CRON_TZ=Europe/Berlin 0 3 * * 0": 7 * 24 * time.Hour,
	"TZ=UTC @weekly":                  7 * 24 * time.Hour,
}

// guard runs f and fails t when it panics: a panic in a Judge is
// recovered by the manager for the whole adapter run, so every object of
// that adapter would read JudgeFailed.
func guard(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Errorf("%s panicked (the adapter run is recovered whole: every object of the adapter reads %s): %v", what, adapterkit.ReasonJudgeFailed, p)
		}
	}()
	f()
}

func short(s string) string { return report.Truncate(s, 40) }

// named is how a message names schedule s (ASCII here): quoted, a long one
// by its start.
func named(s string) string {
	return `schedule "` + s[:min(len(s), 17)]
}

func TestScheduleIntervalBadSchedules(t *testing.T) {
	for _, s := range badSchedules {
		t.Run(fmt.Sprintf("%q", short(s)), func(t *testing.T) {
			guard(t, "ScheduleInterval", func() {
				iv, sched, err := adapterkit.ScheduleInterval(s, cronNow)
				require.Error(t, err)
				assert.Zero(t, iv)
				assert.Nil(t, sched)
			})
		})
	}
	for s, want := range goodSchedules {
		t.Run(fmt.Sprintf("%q", short(s)), func(t *testing.T) {
			guard(t, "ScheduleInterval", func() {
				iv, sched, err := adapterkit.ScheduleInterval(s, cronNow)
				require.NoError(t, err)
				require.NotNil(t, sched)
				assert.Equal(t, want, iv)
				assert.True(t, sched.Next(cronNow).After(cronNow))
			})
		})
	}
}

// TestJudgeBackupScheduleInvalid: a schedule that does not parse reads
// Unknown ScheduleInvalid, the message naming the schedule, unless facts
// that need no schedule prove it bad (a current failure, a suspension, an
// age past the bound): those keep their verdict, the message naming the
// schedule too.
func TestJudgeBackupScheduleInvalid(t *testing.T) {
	since := cronNow.Add(-48 * time.Hour)
	cases := []struct {
		name     string
		sla      time.Duration
		h        adapterkit.BackupHistory
		severity report.Status
		reason   string
	}{
		{"recent backup", 0, adapterkit.BackupHistory{Since: since, LastSuccess: cronNow.Add(-time.Hour)}, report.StatusUnknown, adapterkit.ReasonScheduleInvalid},
		{"recent backup under an SLA", 26 * time.Hour, adapterkit.BackupHistory{Since: since, LastSuccess: cronNow.Add(-time.Hour)}, report.StatusUnknown, adapterkit.ReasonScheduleInvalid},
		{"no backup yet", 0, adapterkit.BackupHistory{Since: since}, report.StatusUnknown, adapterkit.ReasonScheduleInvalid},
		{"failing (velero's FailedValidation)", 0, adapterkit.BackupHistory{Since: since, Failing: true, FailureMessage: "schedule failed validation"}, report.StatusDegraded, adapterkit.ReasonBackupFailed},
		{"stale past the SLA", 26 * time.Hour, adapterkit.BackupHistory{Since: since, LastSuccess: cronNow.Add(-30 * time.Hour)}, report.StatusDegraded, adapterkit.ReasonBackupStale},
		{"stale past the default maxAge", 0, adapterkit.BackupHistory{Since: since.Add(-30 * 24 * time.Hour), LastSuccess: cronNow.Add(-8 * 24 * time.Hour)}, report.StatusDegraded, adapterkit.ReasonBackupStale},
		{"never succeeded past the default maxAge", 0, adapterkit.BackupHistory{Since: since.Add(-30 * 24 * time.Hour)}, report.StatusDown, adapterkit.ReasonBackupNeverSucceeded},
		{"suspended", 0, adapterkit.BackupHistory{Since: since, LastSuccess: cronNow.Add(-time.Hour), Suspended: true, SuspendedBy: "Schedule a/b is paused (spec.paused)"}, report.StatusDegraded, adapterkit.ReasonScheduleSuspended},
	}
	for _, s := range []string{"TZ=", "CRON_TZ=UTC", "61 * * * *", strings.Repeat("1,", 100_000) + "1 * * * * * *"} {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%q/%s", short(s), tc.name), func(t *testing.T) {
				h := tc.h
				h.Schedule = s
				guard(t, "JudgeBackup", func() {
					c := adapterkit.JudgeBackup(cronNow, tc.sla, h)
					assert.Equal(t, tc.severity, c.Severity, c.Message)
					assert.Equal(t, tc.reason, c.Reason, c.Message)
					assert.Contains(t, c.Message, named(s), "the message names the schedule")
					assert.LessOrEqual(t, len(c.Message), status.MaxMessage)
					require.NotNil(t, c.Backup)
					assert.Positive(t, c.Backup.MaxAge, "the typed fields are filled")
				})
			})
		}
	}
}

// TestBadScheduleJudgedAlone runs each backup adapter's Judge on a
// schedule that does not parse (one the parser panics on among them) and a
// good one: the bad one reads Unknown ScheduleInvalid naming its schedule,
// the good one reads exactly as it does alone, and the run does not fail.
func TestBadScheduleJudgedAlone(t *testing.T) {
	type fixture struct {
		a adapterkit.Adapter
		// objects of one backed-up thing named name with schedule s and a
		// success an hour ago.
		objects func(name, s string) []*unstructured.Unstructured
	}
	created := cronNow.Add(-60 * 24 * time.Hour)
	lastOK := cronNow.Add(-time.Hour).Format(time.RFC3339)
	fixtures := []fixture{
		{velero.New(), func(name, s string) []*unstructured.Unstructured {
			return []*unstructured.Unstructured{
				object("velero.io/v1", "Schedule", "tenant-foo", name, created, map[string]any{"spec": map[string]any{"schedule": s}}),
				object("velero.io/v1", "Backup", "tenant-foo", name+"-1", created, map[string]any{
					"metadata": map[string]any{"labels": map[string]any{"velero.io/schedule-name": name}},
					"status":   map[string]any{"phase": "Completed", "completionTimestamp": lastOK},
				}),
			}
		}},
		{cozybackup.New(), func(name, s string) []*unstructured.Unstructured {
			return []*unstructured.Unstructured{
				object("backups.cozystack.io/v1alpha1", "Plan", "tenant-foo", name, created, map[string]any{"spec": map[string]any{
					"applicationRef": map[string]any{"kind": "Postgres", "name": name},
					"schedule":       map[string]any{"type": "cron", "cron": s},
				}}),
				object("backups.cozystack.io/v1alpha1", "BackupJob", "tenant-foo", name+"-1", created, map[string]any{
					"spec":   map[string]any{"planRef": map[string]any{"name": name}},
					"status": map[string]any{"phase": "Succeeded", "completedAt": lastOK},
				}),
			}
		}},
		{cnpg.New(), func(name, s string) []*unstructured.Unstructured {
			return []*unstructured.Unstructured{
				object("postgresql.cnpg.io/v1", "Cluster", "tenant-foo", name, created, map[string]any{
					"spec":   map[string]any{"backup": map[string]any{"barmanObjectStore": map[string]any{"destinationPath": "s3://b"}}},
					"status": map[string]any{"lastSuccessfulBackup": lastOK},
				}),
				object("postgresql.cnpg.io/v1", "ScheduledBackup", "tenant-foo", name+"-daily", created, map[string]any{"spec": map[string]any{
					"cluster": map[string]any{"name": name}, "schedule": s,
				}}),
			}
		}},
	}
	good := map[string]string{"velero": "0 3 * * *", "cozystack-backups": "0 3 * * *", "cnpg": "0 0 3 * * *"}
	for _, f := range fixtures {
		goodAlone := judgeObjects(t, f.a, f.objects("good", good[f.a.Name()]))
		require.Len(t, goodAlone, 1)
		require.Equal(t, report.StatusHealthy, goodAlone[0].Condition.Severity, goodAlone[0].Condition.Message)
		for _, bad := range []string{"TZ=", "CRON_TZ=UTC", "CRON_TZ=", "TZ=Nowhere/Bogus * * * * *", "@every 1fortnight", strings.Repeat("* ", 4096)} {
			t.Run(fmt.Sprintf("%s/%q", f.a.Name(), short(bad)), func(t *testing.T) {
				objs := append(f.objects("bad", bad), f.objects("good", good[f.a.Name()])...)
				got := judgeObjects(t, f.a, objs)
				require.Len(t, got, 2, "one condition per backed-up thing")
				byName := map[string]adapterkit.Finding{}
				for _, fd := range got {
					require.NotNil(t, fd.Condition.Resource)
					assert.NotEqual(t, adapterkit.ReasonJudgeFailed, fd.Condition.Reason)
					byName[fd.Condition.Resource.Name] = fd
				}
				b := byName["bad"].Condition
				assert.Equal(t, report.StatusUnknown, b.Severity, b.Message)
				assert.Equal(t, adapterkit.ReasonScheduleInvalid, b.Reason, b.Message)
				assert.Contains(t, b.Message, named(bad))
				t.Logf("%s: %s %s %q", f.a.Name(), b.Severity, b.Reason, b.Message)
				assert.Equal(t, goodAlone[0], byName["good"], "the good object reads as it does alone")
			})
		}
	}
}

func object(apiVersion, kind, ns, name string, created time.Time, fields map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: fields}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetCreationTimestamp(metav1.NewTime(created))
	return u
}

// judgeObjects runs a's Judge on objs, failing t when it panics.
func judgeObjects(t *testing.T, a adapterkit.Adapter, objs []*unstructured.Unstructured) []adapterkit.Finding {
	t.Helper()
	stores := map[schema.GroupVersionResource]cache.Store{}
	for _, s := range a.Sources() {
		stores[s.GVR] = cache.NewStore(cache.MetaNamespaceKeyFunc)
	}
	for _, u := range objs {
		var src *adapterkit.Source
		for _, s := range a.Sources() {
			if s.GVR.GroupVersion().String() == u.GetAPIVersion() && s.Kind == u.GetKind() {
				src = &s
			}
		}
		require.NotNil(t, src, "%s %s is no source of %s", u.GetAPIVersion(), u.GetKind(), a.Name())
		require.NoError(t, stores[src.GVR].Add(adapterkit.CachedObject(u, src.Project)))
	}
	in := adapterkit.NewInput(cronNow, "cozy-system", stores, nil, nil)
	var out []adapterkit.Finding
	guard(t, a.Name()+"'s Judge", func() { out = a.Judge(in) })
	return out
}
