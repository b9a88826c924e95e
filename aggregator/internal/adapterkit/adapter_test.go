package adapterkit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/aggregator/internal/writer"
)

func TestIsTenantNamespace(t *testing.T) {
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   bool
	}{
		{"tenant-root", map[string]string{"tenant.cozystack.io/tenant-root": ""}, true},
		{"tenant-foo-bar", map[string]string{"tenant.cozystack.io/tenant-root": "", "tenant.cozystack.io/tenant-foo": "", "tenant.cozystack.io/tenant-foo-bar": ""}, true},
		// Before cozystack 1ac9398a deeper tenants missed tenant-root but kept their own label.
		{"tenant-foo-bar", map[string]string{"tenant.cozystack.io/tenant-foo-bar": ""}, true},
		{"tenant-foo", nil, false}, // a name alone is not a tenant
		{"cozy-system", map[string]string{"tenant.cozystack.io/tenant-root": ""}, false}, // a platform namespace a tenant may reach
		{"default", nil, false},
	} {
		assert.Equal(t, c.want, IsTenantNamespace(c.name, c.labels), "%s %v", c.name, c.labels)
	}
}

func TestScheduleInterval(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for sched, want := range map[string]time.Duration{
		"0 0 0 * * *": 24 * time.Hour, // CNPG's six fields
		"30 * * * *":  time.Hour,      // five fields
		"0 3 * * 1-5": 72 * time.Hour, // weekdays: the weekend gap counts
		"@every 6h":   6 * time.Hour,  // descriptor
	} {
		got, _, err := ScheduleInterval(sched, now)
		require.NoError(t, err, sched)
		assert.Equal(t, want, got, sched)
	}
	_, _, err := ScheduleInterval("every day", now)
	assert.Error(t, err)
}

// TestBackupJudgementStableOverTime: judged again later with nothing new,
// a backup condition is the same status for the writer (its fingerprint):
// only observedAge moves, and it is refreshed with observedAt. A message
// carrying the age made every periodic judgement rewrite every backups
// object, which queued status changes behind those writes.
func TestBackupJudgementStableOverTime(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	histories := map[string]BackupHistory{
		"recent":   {Schedule: "0 0 0 * * *", Since: now.Add(-72 * time.Hour), LastSuccess: now.Add(-2 * time.Hour)},
		"stale":    {Schedule: "0 0 0 * * *", Since: now.Add(-72 * time.Hour), LastSuccess: now.Add(-50 * time.Hour)},
		"failed":   {Schedule: "0 0 0 * * *", Since: now.Add(-72 * time.Hour), LastSuccess: now.Add(-26 * time.Hour), LastFailure: now.Add(-time.Hour), FailureMessage: "AccessDenied"},
		"never":    {Schedule: "0 0 0 * * *", Since: now.Add(-72 * time.Hour)},
		"awaiting": {Schedule: "0 0 0 * * *", Since: now.Add(-time.Hour)},
		"no-sla":   {Since: now.Add(-72 * time.Hour), LastSuccess: now.Add(-2 * time.Hour)},
	}
	for name, h := range histories {
		a := JudgeBackup(now, 0, h)
		b := JudgeBackup(now.Add(37*time.Second), 0, h)
		assert.Equal(t, a.Reason, b.Reason, name)
		assert.Equal(t, a.Message, b.Message, name)
		if !h.LastSuccess.IsZero() {
			assert.Equal(t, 37*time.Second, b.Backup.ObservedAge-a.Backup.ObservedAge, "%s: observedAge moves", name)
		}
		fa := writer.Fingerprint(&status.Component{Component: ComponentBackups, Overall: a.Severity, Conditions: []status.Condition{a}})
		fb := writer.Fingerprint(&status.Component{Component: ComponentBackups, Overall: b.Severity, Conditions: []status.Condition{b}})
		assert.Equal(t, fa, fb, "%s: %q then %q", name, a.Message, b.Message)
	}
	assert.Equal(t, "last successful backup at 2026-11-29T08:00:00Z, stale since 2026-11-30T20:00:00Z (maxAge 36h0m0s)", JudgeBackup(now, 0, histories["stale"]).Message)
}

// FirstTime: the first set time of the paths, in order; a malformed one is
// unset; with none set, the object's creation.
func TestFirstTime(t *testing.T) {
	created := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	obj := func(status map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"status": status}}
		u.SetCreationTimestamp(metav1.NewTime(created))
		return u
	}
	end, start := []string{"status", "stoppedAt"}, []string{"status", "startedAt"}
	assert.Equal(t, time.Date(2026, 12, 1, 10, 5, 0, 0, time.UTC),
		FirstTime(obj(map[string]any{"stoppedAt": "2026-12-01T10:05:00Z", "startedAt": "2026-12-01T10:00:00Z"}), end, start))
	assert.Equal(t, time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
		FirstTime(obj(map[string]any{"stoppedAt": "not a time", "startedAt": "2026-12-01T10:00:00Z"}), end, start))
	assert.True(t, created.Equal(FirstTime(obj(map[string]any{}), end, start)), "the creation timestamp")
}
