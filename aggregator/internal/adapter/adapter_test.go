package adapter

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
