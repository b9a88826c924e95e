package state

import (
	"time"

	"github.com/cozystack/cozy-health/pkg/report"
)

// A replica that does not hear a node's agent (a partial partition: the
// path between this replica and that node is cut, another replica's is
// not) holds the node's latest report as a peer relayed it: the agent's own
// signed bytes, verified again here (package peers). Entry.Via names the
// relaying replica. The rules between the two kinds:
//
//   - a direct report (Via "") replaces a relayed one of the same agent
//     instance and sequence: a node heard directly again reads Via "" at
//     its next report, never later;
//   - a relayed report is stored only when it is newer than what is held:
//     a higher sequence of the same instance, or a later sent-at of another
//     instance (the agent restarted while this replica did not hear it);
//   - otherwise each kind follows Accept's rule (a sequence not above the
//     held one of the same instance is ignored).

// AcceptVia stores r as the latest report of its node, heard directly
// (via "") or relayed by the replica via, under the rules above. It
// returns whether r was stored. A relayed report's receivedAt is the
// report's own sent-at (never later than now): when the node said it, not
// when the peer passed it on.
func (s *State) AcceptVia(r *report.NodeReport, receivedAt time.Time, via string) bool {
	if r == nil || r.NodeName == "" {
		return false
	}
	s.mu.Lock()
	if _, gone := s.deleted[r.NodeName]; gone {
		s.mu.Unlock()
		return false
	}
	prev, had := s.nodes[r.NodeName]
	if had && prev.Report != nil && !newer(prev, r, via) {
		s.mu.Unlock()
		return false
	}
	s.nodes[r.NodeName] = Entry{Report: r, ReceivedAt: receivedAt, Role: s.roles[r.NodeName], Via: via, Kube: prev.Kube}
	s.changed(r.NodeName)
	s.mu.Unlock()
	if s.observer != nil {
		s.observer.Accepted(r.NodeName, receivedAt)
	}
	return true
}

// newer tells whether r, heard directly (via "") or relayed, replaces
// prev's report.
func newer(prev Entry, r *report.NodeReport, via string) bool {
	p := prev.Report
	if p.AgentInstanceID != r.AgentInstanceID {
		if via == "" {
			return true // the agent restarted: its own word wins, as in Accept
		}
		return r.SentAt.After(p.SentAt)
	}
	if r.Sequence > p.Sequence {
		return true
	}
	// The same report heard directly after a peer relayed it: direct wins.
	return via == "" && prev.Via != "" && r.Sequence == p.Sequence
}

// DirectSink is the State as ingest's sink: every report it accepts was
// heard from the node's own agent (AcceptVia with via ""), so a node this
// replica hears again replaces a relayed copy of the same report.
type DirectSink struct{ S *State }

// Accept implements ingest.Sink.
func (d DirectSink) Accept(r *report.NodeReport, receivedAt time.Time) {
	d.S.AcceptVia(r, receivedAt, "")
}
