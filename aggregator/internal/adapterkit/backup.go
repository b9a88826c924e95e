package adapterkit

import (
	"fmt"
	"sync"
	"time"

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

var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

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
// schedule over its next 16 runs from now.
func ScheduleInterval(schedule string, now time.Time) (time.Duration, cron.Schedule, error) {
	scheduleCache.Lock()
	e, ok := scheduleCache.m[schedule]
	scheduleCache.Unlock()
	if ok && !now.Before(e.at) && now.Sub(e.at) < scheduleCacheTTL {
		return e.interval, e.sched, e.err
	}
	e = scheduleEntry{at: now}
	e.interval, e.sched, e.err = scheduleInterval(schedule, now)
	scheduleCache.Lock()
	if len(scheduleCache.m) > 4096 {
		clear(scheduleCache.m) // schedules are few; this bounds a pathological churn
	}
	scheduleCache.m[schedule] = e
	scheduleCache.Unlock()
	return e.interval, e.sched, e.err
}

func scheduleInterval(schedule string, now time.Time) (time.Duration, cron.Schedule, error) {
	s, err := cronParser.Parse(schedule)
	if err != nil {
		return 0, nil, fmt.Errorf("parse schedule %q: %w", schedule, err)
	}
	var longest time.Duration
	t := s.Next(now)
	if t.IsZero() {
		return 0, nil, fmt.Errorf("schedule %q never runs", schedule)
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
//   - else Healthy, BackupRecent.
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
			c.Severity, c.Reason, c.Message = report.StatusDegraded, ReasonScheduleInvalid, status.Truncate(err.Error())
			facts.MaxAge = sla
			return c
		}
	}
	facts.MaxAge = sla
	if facts.MaxAge <= 0 {
		facts.MaxAge = DefaultBackupMaxAge
		if interval > 0 {
			facts.MaxAge = interval + interval/2
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
