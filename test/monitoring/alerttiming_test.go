//go:build alerttiming

package monitoring

import (
	"testing"
	"time"
)

// TestAlertTiming is TestAlertEvaluation with the rules exactly as the
// chart ships them (every `for` and the group's 30 s evaluation interval)
// and the chart's 30 s scrape interval, and vmalert and victoria-metrics
// with their default 30 s delays, the agents reporting every 5 s (the
// shipped default): the times docs/reference/alerts.md's
// table of the real evaluators shows. It runs about 20 minutes: `make alerts-timing` (build tag
// alerttiming), not `make test`.
func TestAlertTiming(t *testing.T) {
	res := runAlertEval(t, evalConfig{forDivisor: 1, scrape: 30 * time.Second, fireTimeout: 25 * time.Minute, report: 5 * time.Second})
	logAlertTable(t, res)
}
