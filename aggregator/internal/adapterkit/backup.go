package adapterkit

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/robfig/cron/v3"

	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/pkg/report"
)

// TypeBackup is the condition of one backed-up thing (a CNPG Cluster, a
// Cozystack backup Plan, a velero Schedule).
const TypeBackup = "Backup"

// Backup reasons.
const (
	ReasonBackupRecent         = "BackupRecent"
	ReasonBackupStale          = "BackupStale"
	ReasonBackupFailed         = "BackupFailed"
	ReasonBackupNeverSucceeded = "BackupNeverSucceeded"
	ReasonAwaitingFirstBackup  = "AwaitingFirstBackup"
	ReasonScheduleInvalid      = "ScheduleInvalid"
	ReasonScheduleSuspended    = "ScheduleSuspended"
)

// DefaultBackupMaxAge is the maxAge of a backed-up thing with neither an
// SLA nor a schedule to derive one from (a CNPG Cluster backed up on
// demand): a week, long enough for weekly manual backups, short enough
// that a backup months old never reads recent.
const DefaultBackupMaxAge = 7 * 24 * time.Hour

// BackupHistory is what the backup adapters know of one backed-up thing.
type BackupHistory struct {
	// Schedule is the cron schedule its backups run on ("" when none).
	// Five fields, or six with seconds first (CNPG's format).
	Schedule string
	// Suspended schedules expect no run: the thing reads Degraded
	// (ScheduleSuspended) whatever its age. Schedule is still their cron,
	// from which maxAge is derived.
	Suspended bool
	// SuspendedBy names the suspended schedule in the message
	// ("ScheduledBackup tenant-foo/db-daily is suspended (spec.suspend)").
	SuspendedBy string
	// Since is when backups were first expected to start: the schedule's
	// (or the backed-up thing's) creation.
	Since time.Time
	// LastSuccess is when the last successful backup ended (zero: never).
	LastSuccess time.Time
	// LastFailure is when the last failed attempt ended or was seen; a
	// failure is current when it is later than LastSuccess.
	LastFailure time.Time
	// FailureMessage says why the last attempt failed.
	FailureMessage string
	// Failing forces the last attempt to count as failed (a source that
	// says so without a time, such as CNPG's LastBackupSucceeded=False).
	Failing bool
}

// cronParser reads a schedule with robfig/cron v3.0.1: five fields, or six
// with seconds first (CNPG's format), and descriptors (@daily, @every 1h),
// each optionally prefixed by TZ=zone or CRON_TZ=zone and a space.
// velero's schedule controller and Cozystack's backup Plan controller run
// the same module with cron.ParseStandard (five fields and descriptors, no
// seconds); CNPG's ScheduledBackup controller runs robfig/cron v1.2.0's
// cron.Parse (six fields seconds first, which these options read alike;
// five it reads as seconds to month, which these do not).
// v3.0.1 panics on some inputs (a TZ= prefix with no space after it:
// "TZ=", "CRON_TZ=UTC"; robfig/cron#470, #554, unfixed upstream);
// parseSchedule guards it, so a bad schedule is an error for its own
// object, never a panic of the adapter's judgement.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// scheduleQuoteLen bounds the quoted schedule in an error: a message
// names the schedule, a long one by its start.
const scheduleQuoteLen = 64

// quoteSchedule quotes schedule (Go syntax), at most scheduleQuoteLen
// bytes of it quoted; a cut one ends with "..." after the quote.
func quoteSchedule(schedule string) string {
	if q := strconv.Quote(schedule); len(q) <= scheduleQuoteLen {
		return q
	}
	for cut := min(len(schedule)-1, scheduleQuoteLen); cut > 0; cut-- {
		if !utf8.RuneStart(schedule[cut]) {
			continue
		}
		if q := strconv.Quote(schedule[:cut]); len(q) <= scheduleQuoteLen {
			return q + "..."
		}
	}
	return `""...`
}

// scheduleError says that schedule does not parse (or never runs), naming
// it; the text fits a message.
func scheduleError(schedule, format string, args ...any) error {
	return errors.New(status.Truncate("schedule " + quoteSchedule(schedule) + " " + fmt.Sprintf(format, args...)))
}

// parseSchedule parses schedule with cronParser and walks its next runs
// from now, returning the longest gap between them. The TZ= prefix the
// parser panics on is refused before parsing, and any other panic of the
// parser or of its schedule's Next is an error for this schedule alone.
func parseSchedule(schedule string, now time.Time) (longest time.Duration, s cron.Schedule, err error) {
	if strings.HasPrefix(schedule, "TZ=") || strings.HasPrefix(schedule, "CRON_TZ=") {
		// robfig/cron v3.0.1 takes the zone up to the first space and
		// slices out of range when there is none.
		if !strings.Contains(schedule, " ") {
			return 0, nil, scheduleError(schedule, "does not parse: the time zone is not followed by a space and a schedule")
		}
	}
	defer func() {
		if p := recover(); p != nil {
			longest, s, err = 0, nil, scheduleError(schedule, "does not parse: the cron parser panicked: %v", p)
		}
	}()
	s, err = cronParser.Parse(schedule)
	if err != nil {
		return 0, nil, scheduleError(schedule, "does not parse: %v", err)
	}
	t := s.Next(now)
	if t.IsZero() {
		return 0, nil, scheduleError(schedule, "never runs")
	}
	for range 16 {
		n := s.Next(t)
		if n.IsZero() {
			break
		}
		longest = max(longest, n.Sub(t))
		t = n
	}
	return longest, s, nil
}

// scheduleCache memoises ScheduleInterval: thousands of backed-up things
// share a handful of schedules, and walking 16 runs of a cron schedule is
// most of a backup judgement's cost. An entry is reused for an hour (the
// longest gap moves only with calendar irregularities).
var scheduleCache = struct {
	sync.Mutex
	m map[string]scheduleEntry
}{m: map[string]scheduleEntry{}}

type scheduleEntry struct {
	interval time.Duration
	sched    cron.Schedule
	err      error
	at       time.Time
}

const scheduleCacheTTL = time.Hour

// ScheduleInterval is the longest gap between consecutive runs of a cron
// schedule over its next 16 runs from now. A schedule that does not parse
// (the parser's panics included) or never runs is an error naming it; it
// never panics.
func ScheduleInterval(schedule string, now time.Time) (time.Duration, cron.Schedule, error) {
	scheduleCache.Lock()
	e, ok := scheduleCache.m[schedule]
	scheduleCache.Unlock()
	if ok && !now.Before(e.at) && now.Sub(e.at) < scheduleCacheTTL {
		return e.interval, e.sched, e.err
	}
	e = scheduleEntry{at: now}
	e.interval, e.sched, e.err = parseSchedule(schedule, now)
	scheduleCache.Lock()
	if len(scheduleCache.m) > 4096 {
		clear(scheduleCache.m) // schedules are few; this bounds a pathological churn
	}
	scheduleCache.m[schedule] = e
	scheduleCache.Unlock()
	return e.interval, e.sched, e.err
}

// JudgeBackup applies the backup rules (see the rollup documentation,
// "Backups") to one backed-up thing. The age is always judged:
//
//   - maxAge is the scope's SLA (spec.sla.maxAge, from the aggregator's
//     --backup-max-age) when set, else 1.5x the schedule's interval (a
//     suspended schedule's too), else DefaultBackupMaxAge;
//   - never succeeded: Down, BackupNeverSucceeded, once the first expected
//     run (the schedule's first run after Since) is half an interval past
//     (suspended or without a schedule: once maxAge has passed since
//     Since); before that Unknown, AwaitingFirstBackup — absence of a
//     backup is never read as good;
//   - a suspended schedule: Degraded, ScheduleSuspended, naming it (no
//     backup will come; the message says whether the last success is
//     stale and whether the last attempt failed);
//   - a last attempt that failed after the last success: Degraded,
//     BackupFailed;
//   - older than maxAge: Degraded, BackupStale;
//   - else Healthy, BackupRecent;
//   - a schedule that does not parse or never runs: see judgeUnparsed
//     (Unknown, ScheduleInvalid, unless facts that need no schedule
//     already read Degraded or Down).
//
// Down wins over Degraded; the typed fields are always filled.
func JudgeBackup(now time.Time, sla time.Duration, h BackupHistory) status.Condition {
	c := status.Condition{Type: TypeBackup}
	facts := &status.BackupFacts{LastSuccessfulAt: h.LastSuccess}
	c.Backup = facts
	if !h.LastSuccess.IsZero() {
		facts.ObservedAge = max(now.Sub(h.LastSuccess), 0)
	}
	var interval time.Duration
	var sched cron.Schedule
	if h.Schedule != "" {
		var err error
		interval, sched, err = ScheduleInterval(h.Schedule, now)
		if err != nil {
			return judgeUnparsed(now, sla, h, err)
		}
	}
	facts.MaxAge = sla
	if facts.MaxAge <= 0 {
		facts.MaxAge = DefaultBackupMaxAge
		if interval > 0 {
			facts.MaxAge = interval + min(interval/2, math.MaxInt64-interval) // "@every 2562047h" must not overflow
		}
	}
	if h.Suspended {
		sched = nil // no run is expected
	}
	suspended := h.SuspendedBy
	if suspended == "" {
		suspended = "its schedule is suspended"
	}
	failed := h.Failing || (!h.LastFailure.IsZero() && h.LastFailure.After(h.LastSuccess))
	failMsg := "last backup failed"
	if h.FailureMessage != "" {
		failMsg += ": " + h.FailureMessage
	}
	if h.LastSuccess.IsZero() {
		deadline := h.Since.Add(facts.MaxAge)
		if sched != nil {
			deadline = sched.Next(h.Since).Add(interval / 2)
		}
		if !now.Before(deadline) {
			c.Severity, c.Reason = report.StatusDown, ReasonBackupNeverSucceeded
			c.Message = fmt.Sprintf("no backup has succeeded since %s (first one expected by %s)", h.Since.UTC().Format(time.RFC3339), deadline.UTC().Format(time.RFC3339))
			if failed {
				c.Message += "; " + failMsg
			}
			if h.Suspended {
				c.Message += "; " + suspended
			}
			c.Message = status.Truncate(c.Message)
			return c
		}
		switch {
		case h.Suspended:
			c.Severity, c.Reason = report.StatusDegraded, ReasonScheduleSuspended
			c.Message = suspended + "; no backup has succeeded yet"
			if failed {
				c.Message += "; " + failMsg
			}
			c.Message = status.Truncate(c.Message)
		case failed:
			c.Severity, c.Reason, c.Message = report.StatusDegraded, ReasonBackupFailed, status.Truncate(failMsg)
		default:
			c.Severity, c.Reason = report.StatusUnknown, ReasonAwaitingFirstBackup
			c.Message = fmt.Sprintf("no backup has succeeded yet; the first one is expected by %s", deadline.UTC().Format(time.RFC3339))
		}
		return c
	}
	// The messages name instants, never the age: the age moves at every
	// judgement, and a message that moves is a new status to write
	// (writer.Fingerprint). observedAge carries it, refreshed with
	// observedAt.
	last := h.LastSuccess.UTC().Format(time.RFC3339)
	stale := facts.ObservedAge > facts.MaxAge
	age := fmt.Sprintf("last successful backup at %s (maxAge %s)", last, facts.MaxAge)
	if stale {
		age = fmt.Sprintf("last successful backup at %s, stale since %s (maxAge %s)", last, h.LastSuccess.Add(facts.MaxAge).UTC().Format(time.RFC3339), facts.MaxAge)
	}
	switch {
	case h.Suspended:
		c.Severity, c.Reason = report.StatusDegraded, ReasonScheduleSuspended
		c.Message = suspended + "; " + age
		if failed {
			c.Message += "; " + failMsg
		}
		c.Message = status.Truncate(c.Message)
	case failed:
		c.Severity, c.Reason, c.Message = report.StatusDegraded, ReasonBackupFailed, status.Truncate(failMsg)
	case stale:
		c.Severity, c.Reason, c.Message = report.StatusDegraded, ReasonBackupStale, age
	default:
		c.Severity, c.Reason, c.Message = report.StatusHealthy, ReasonBackupRecent, age
	}
	return c
}

// judgeUnparsed judges a backed-up thing whose schedule does not parse
// (its controller does not run it as written, or cozy-health cannot tell
// when it runs). With no interval to measure against it is judged as if
// it had no schedule (maxAge the SLA, else DefaultBackupMaxAge), and:
//
//   - what needs no schedule to be proven bad keeps its verdict (a current
//     failure such as velero's FailedValidation, a suspension, an age past
//     maxAge, never succeeded past it), the message naming the schedule;
//   - anything else (recent, awaiting the first backup) reads Unknown,
//     ScheduleInvalid, naming the schedule: a backup cannot be called
//     recent against a schedule nobody can read.
func judgeUnparsed(now time.Time, sla time.Duration, h BackupHistory, err error) status.Condition {
	h.Schedule = ""
	c := JudgeBackup(now, sla, h)
	switch c.Severity {
	case report.StatusHealthy, report.StatusUnknown:
		c.Severity, c.Reason, c.Message = report.StatusUnknown, ReasonScheduleInvalid, err.Error()
		if !h.LastSuccess.IsZero() {
			c.Message = status.Truncate(c.Message + "; last successful backup at " + h.LastSuccess.UTC().Format(time.RFC3339))
		}
	default:
		c.Message = status.Truncate(err.Error() + "; " + c.Message)
	}
	return c
}
