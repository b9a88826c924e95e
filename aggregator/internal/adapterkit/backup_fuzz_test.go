package adapterkit

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
)

// FuzzParseSchedule: no schedule makes the parse or the judgement panic
// (a panic would fail the whole adapter run: every object JudgeFailed); a
// schedule that parses runs after now with a non-negative interval and a
// positive maxAge; one that does not is an error naming it, and its
// object reads ScheduleInvalid alone.
//
//	go test -run '^$' -fuzz FuzzParseSchedule -fuzztime 60s ./aggregator/internal/adapterkit/
func FuzzParseSchedule(f *testing.F) {
	for _, s := range []string{
		"", " ", "TZ=", "CRON_TZ=UTC", "CRON_TZ=", "TZ=TZ=TZ=", "TZ=UTC\t0 3 * * *", "TZ=Nowhere/Bogus * * * * *",
		"TZ=UTC 0 3 * * *", "CRON_TZ=Europe/Berlin 30 2 * * 0", "TZ=America/Sao_Paulo 0 0 * * *",
		"0 3 * * *", "0 0 3 * * *", "*/5 * * * * *", "0-59/7 1-23/5 ? JAN-DEC MON-FRI", "0 0 29 2 *", "0 0 30 2 *",
		"@daily", "@every 1h30m", "@every -1s", "@every 0s", "@every 2562047h", "TZ=UTC @weekly", "@every",
		"*/0 * * * *", "5-1 * * * *", "61 * * * *", "1/99999999999999999999 * * * *", "* * * * * * *",
	} {
		f.Add(s)
	}
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		iv, sched, err := parseSchedule(s, now)
		h := BackupHistory{Schedule: s, Since: now.Add(-48 * time.Hour), LastSuccess: now.Add(-time.Minute)}
		c := JudgeBackup(now, 0, h)
		if len(c.Message) > status.MaxMessage {
			t.Fatalf("message of %d bytes: %q", len(c.Message), c.Message)
		}
		if c.Backup == nil || c.Backup.MaxAge <= 0 {
			t.Fatalf("maxAge not positive: %+v", c.Backup)
		}
		if err != nil {
			if iv != 0 || sched != nil {
				t.Fatalf("error %v with interval %s, schedule %v", err, iv, sched)
			}
			if want := "schedule " + quote(s); !strings.HasPrefix(err.Error(), want) || len(err.Error()) > status.MaxMessage {
				t.Fatalf("error %q does not name the schedule as %s or is too long", err, want)
			}
			// "" is no schedule to BackupHistory: judged without one.
			if s != "" && (c.Severity != report.StatusUnknown || c.Reason != ReasonScheduleInvalid) {
				t.Fatalf("a recent backup on an unparsed schedule reads %s %s (%s)", c.Severity, c.Reason, c.Message)
			}
			return
		}
		if sched == nil || iv < 0 {
			t.Fatalf("parsed with interval %s, schedule %v", iv, sched)
		}
		if next := sched.Next(now); !next.After(now) {
			t.Fatalf("next run %s is not after now", next)
		}
		if c.Reason == ReasonScheduleInvalid {
			t.Fatalf("a schedule that parses reads %s: %s", c.Reason, c.Message)
		}
	})
}

// quote is how an error names s: its quoted form, or the quoted form of
// a prefix of it followed by "...".
func quote(s string) string {
	q := quoteSchedule(s)
	if len(q) > scheduleQuoteLen+3 {
		return "(" + q + " longer than the bound)"
	}
	if u, err := strconv.Unquote(strings.TrimSuffix(q, "...")); err != nil || !strings.HasPrefix(s, u) || (u != s) != strings.HasSuffix(q, "...") {
		return "(" + q + " does not quote a prefix of the schedule)"
	}
	return q
}
