package report

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWorsePrecedence(t *testing.T) {
	// Down > Degraded > Unknown > Healthy, whatever the argument order.
	order := []Status{StatusHealthy, StatusUnknown, StatusDegraded, StatusDown}
	for i, a := range order {
		for j, b := range order {
			want := a
			if j > i {
				want = b
			}
			assert.Equal(t, want, Worse(a, b), "Worse(%s, %s)", a, b)
			assert.Equal(t, want, Worse(b, a), "Worse(%s, %s)", b, a)
		}
	}
}

func TestParseStatusRoundTrip(t *testing.T) {
	for _, s := range Statuses {
		got, err := ParseStatus(s.String())
		require.NoError(t, err)
		assert.Equal(t, s, got)
	}
	_, err := ParseStatus("Green")
	assert.ErrorContains(t, err, `"Green"`)
}
