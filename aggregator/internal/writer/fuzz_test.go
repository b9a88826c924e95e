package writer

import (
	"encoding/json"
	"fmt"
	"regexp"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/aggregator/internal/status"
	healthv1alpha1 "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/wire"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// limitOf is the row of report.Limits for a CRD path.
func limitOf(path string) report.Limit {
	for _, l := range report.Limits {
		if l.CRD == path {
			return l
		}
	}
	panic("no row for " + path)
}

// checkString checks s against the row of path: the CRD counts
// characters.
func checkString(path, s string) error {
	l := limitOf(path)
	n := utf8.RuneCountInString(s)
	if n < l.MinLength || (l.MaxLength > 0 && n > l.MaxLength) {
		return fmt.Errorf("%s: %d characters, want %d..%d", path, n, l.MinLength, l.MaxLength)
	}
	if l.Pattern != "" && !regexp.MustCompile(l.Pattern).MatchString(s) {
		return fmt.Errorf("%s: %q does not match %s", path, s, l.Pattern)
	}
	return nil
}

// validStatus checks the status the writer applies, as the apiserver
// decodes it, against every row of report.Limits with a CRD path.
func validStatus(cs *status.Component) error {
	body, err := json.Marshal(statusApply("cozy-system", cs))
	if err != nil {
		return err
	}
	var h healthv1alpha1.Health
	if err := json.Unmarshal(body, &h); err != nil {
		return err
	}
	if n, max := len(h.Status.Conditions), limitOf("status.conditions").MaxItems; n > max {
		return fmt.Errorf("status.conditions: %d items, over %d", n, max)
	}
	for _, c := range h.Status.Conditions {
		for _, f := range []struct{ path, v string }{
			{"status.conditions[].type", c.Type}, {"status.conditions[].reason", c.Reason}, {"status.conditions[].message", c.Message},
		} {
			if err := checkString(f.path, f.v); err != nil {
				return err
			}
		}
		if r := c.ResourceRef; r != nil {
			for _, f := range []struct{ path, v string }{
				{"status.conditions[].resourceRef.kind", r.Kind}, {"status.conditions[].resourceRef.name", r.Name},
				{"status.conditions[].resourceRef.namespace", r.Namespace},
			} {
				if err := checkString(f.path, f.v); err != nil {
					return err
				}
			}
		}
	}
	for _, n := range h.Status.Nodes {
		if err := checkString("status.nodes{}.reason", n.Reason); err != nil {
			return err
		}
		if err := checkString("status.nodes{}.message", n.Message); err != nil {
			return err
		}
	}
	if len(body) > MaxConditionBytes+(256<<10) {
		return fmt.Errorf("status of %d bytes", len(body))
	}
	return nil
}

// FuzzReportToStatus: any payload the server decodes (UnmarshalVT) and
// accepts (ReportFromProto, bounds included), beside an honest node's
// report, rolls up and compacts into statuses that pass the CRD's limits
// table as they are: the writer has nothing to drop or cut
// (boundConditions changes nothing) for what ingest accepts.
//
//	go test -run '^$' -fuzz FuzzReportToStatus -fuzztime 60s ./aggregator/internal/writer/
func FuzzReportToStatus(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	honest := &report.NodeReport{NodeName: "n0", AgentInstanceID: "i", Sequence: 1, SentAt: now, Interval: 5 * time.Second, Observations: []report.Observation{
		{Component: report.ComponentDisk, Check: report.CheckFsyncProbe, Status: report.StatusHealthy, Reason: "Fast", ResourceRef: &report.ResourceRef{Kind: report.KindNode, Name: "n0"}},
	}}
	for _, r := range []*report.NodeReport{honest, badReports(now)["n1"].Report} {
		c := *r
		c.NodeName = "n1"
		b, err := wire.ReportToProto(&c).MarshalVT()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var p pb.NodeReport
		if p.UnmarshalVT(data) != nil {
			return
		}
		r, err := wire.ReportFromProto(&p)
		if err != nil || r.NodeName == "n0" {
			return
		}
		snap := state.Snapshot{"n0": {Report: honest, ReceivedAt: now}, r.NodeName: {Report: r, ReceivedAt: now}}
		for comp, cs := range compute(snap, now) {
			if err := validStatus(cs); err != nil {
				t.Fatalf("%s: %v", comp, err)
			}
			if _, counts := boundConditions(cs); counts != nil {
				t.Fatalf("%s: the writer had to bound an accepted report's status: %v", comp, counts)
			}
		}
	})
}

// TestValidStatusCatchesWhatTheCRDRefuses: the fuzz target's oracle
// refuses the statuses the apiserver refused before the writer bounded
// them, and accepts them bounded.
func TestValidStatusCatchesWhatTheCRDRefuses(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for comp, cs := range compute(badReports(now), now) {
		if comp != report.ComponentLinstor && comp != report.ComponentDisk {
			continue
		}
		if validStatus(cs) == nil {
			t.Errorf("%s: the unbounded status passes", comp)
		}
		b, _ := boundConditions(cs)
		if err := validStatus(b); err != nil {
			t.Errorf("%s: bounded: %v", comp, err)
		}
	}
}
