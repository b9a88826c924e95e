package diskstate

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/cozystack/cozy-health/pkg/report"
)

// Every state drbd_strings.c names, judged; an unknown string is never
// read as good.
func TestStates(t *testing.T) {
	for state, want := range map[string]report.Status{
		"UpToDate": report.StatusHealthy, "Diskless": report.StatusHealthy,
		"Consistent": report.StatusDegraded, "Attaching": report.StatusDegraded, "Detaching": report.StatusDegraded,
		"Negotiating": report.StatusDegraded, "Inconsistent": report.StatusDegraded, "Outdated": report.StatusDegraded,
		"Failed": report.StatusDown, "DUnknown": report.StatusUnknown, "": report.StatusUnknown, "Bogus": report.StatusUnknown,
	} {
		assert.Equal(t, want, StatusOf(state), state)
	}
	assert.Less(t, Rank("UpToDate"), Rank("Outdated"))
	assert.Less(t, Rank("Outdated"), Rank("Failed"))
	assert.Less(t, Rank("Outdated"), Rank(""), "no state is worse than a known bad one")
}
