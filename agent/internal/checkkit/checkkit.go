// Package checkkit is what every node-local check is built from, as
// aggregator/internal/adapterkit is for the cluster adapters: the Check
// interface each implements, Stamp, the "not applicable" and input-error
// answers, and flag helpers. Timing, deadlines, panic recovery and metrics
// live in the runner, so checks stay small; the checks themselves are the
// packages under agent/internal/checks, listed in checks.Table.
package checkkit

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/cozystack/cozy-health/pkg/report"
)

// ErrNotApplicable is returned (possibly wrapped) by a check whose source is
// absent on this node: not a control-plane node, no DRBD, an empty source
// flag. The runner omits the check from the report and counts it.
var ErrNotApplicable = errors.New("not applicable on this node")

// Check reads one local source and turns it into observations.
type Check interface {
	// Name is the check's name from pkg/report's vocabulary (Check*).
	Name() string
	// Component is the component its observations belong to (Component*).
	Component() string
	// Run reads the source once. It must honour ctx; the runner abandons a
	// check at its deadline whether or not it returns. Its observations are
	// whole as returned (Stamp: its name, component and a reason; the
	// runner rejects others as CheckFailed); ResourceRef may be left nil
	// for an observation about the node itself, which the runner names.
	Run(ctx context.Context) ([]report.Observation, error)
}

// NotApplicable wraps ErrNotApplicable with the reason the source is absent.
func NotApplicable(why string) error {
	return &notApplicableError{why: why}
}

type notApplicableError struct{ why string }

func (e *notApplicableError) Error() string { return "not applicable: " + e.why }
func (e *notApplicableError) Unwrap() error { return ErrNotApplicable }

// InputError is returned (possibly wrapped) by a check whose source is
// configured but whose local input is missing or unreadable: a client
// certificate from an optional Secret mount, the talosconfig, a unix socket.
// The runner reports the check Unknown with Reason and Message, so the
// operator reads what to fix; the check keeps being run and recovers by
// itself once the input is there.
type InputError struct {
	// Reason is report.ReasonInputMissing or report.ReasonInputUnreadable.
	Reason string
	// Message names the input and says what to fix.
	Message string
	// Err is the underlying error.
	Err error
}

func (e *InputError) Error() string { return e.Message }
func (e *InputError) Unwrap() error { return e.Err }

// Input wraps err, the failure to read the input what at path, into an
// *InputError: ReasonInputMissing when the path does not exist, otherwise
// ReasonInputUnreadable. fix says what to do about it ("mount Secret ...").
func Input(what, path, fix string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return &InputError{Reason: report.ReasonInputMissing, Message: fmt.Sprintf("%s %s not found: %s", what, path, fix), Err: err}
	}
	return &InputError{Reason: report.ReasonInputUnreadable, Message: fmt.Sprintf("%s %s unreadable (%v): %s", what, path, err, fix), Err: err}
}

// Stamp completes observations with what the check itself says of them:
// its name and component, and a Reason (the status) where it gave none. A
// check returns what Stamp returns, so its observations are whole as it
// returns them; the runner only adds the node itself as ResourceRef where
// an observation names no resource (it is the report's node).
func Stamp(c Check, obs ...report.Observation) []report.Observation {
	for i := range obs {
		o := &obs[i]
		if o.Component == "" {
			o.Component = c.Component()
		}
		if o.Check == "" {
			o.Check = c.Name()
		}
		if o.Reason == "" {
			o.Reason = o.Status.String()
		}
	}
	return obs
}
