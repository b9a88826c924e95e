package rollup

import "time"

// BackupFacts are the typed fields of a backup condition
// (HealthCondition.lastSuccessfulAt, maxAge, observedAge).
type BackupFacts struct {
	// LastSuccessfulAt is when the last successful backup ended; zero when
	// none ever succeeded.
	LastSuccessfulAt time.Time `json:"lastSuccessfulAt,omitzero"`
	// MaxAge is the largest age still judged Healthy; zero when neither an
	// SLA nor a schedule gives one.
	MaxAge time.Duration `json:"maxAge,omitempty"`
	// ObservedAge is the age of the last successful backup at ObservedAt of
	// the component; zero when none ever succeeded.
	ObservedAge time.Duration `json:"observedAge,omitempty"`
}
