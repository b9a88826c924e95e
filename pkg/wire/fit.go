package wire

import (
	"fmt"
	"sort"

	"google.golang.org/protobuf/proto"

	"github.com/cozystack/cozy-health/pkg/report"
)

// FitResult says what Fit changed to make a report fit.
type FitResult struct {
	// Bounded is the number of fields cut to report.Limits
	// (Observation.Bound).
	Bounded int
	// Stripped is the number of Healthy observations whose message was
	// left out (the rollup writes no message for a Healthy fact).
	Stripped int
	// Folded is the number of observations folded into summaries.
	Folded int
	// Cut is the number of messages cut to fitMessage bytes, the last
	// resort.
	Cut int
	// Bytes is the serialized size of the report returned.
	Bytes int
}

// fitMessage is what a message is cut to when nothing else makes a report
// fit: the rollup writes at most 256 bytes of one.
const fitMessage = 256

// Fit returns r, or a copy of it, that fits maxBytes serialized and the
// counts of report.Limits, changing as little as it takes, in this order:
//
//  1. every observation is bounded (reason, message and resource names
//     cut to report.Limits, attributes that are not finite dropped);
//  2. Healthy observations lose their message, which the rollup never
//     writes;
//  3. the observations of the largest checks are folded: the worst N of
//     a check (by status, Down first) are kept verbatim and the rest
//     become one summary observation of the check (reason
//     ObservationsFolded, no resource, counts per status in its
//     attributes), N shrinking until the report fits. The summary's
//     status is the worst of those it folds, and at least Unknown: the
//     aggregator does not know the facts folded away (which resources,
//     their replicas), so it must not read them as Healthy; the
//     judgement of the node never gets greener;
//  4. messages are cut to 256 bytes.
//
// If even that does not fit, the report is returned as it is and ingest
// refuses it as oversized. r is not modified.
func Fit(r *report.NodeReport, maxBytes int) (*report.NodeReport, FitResult) {
	var res FitResult
	c := *r
	c.Observations = make([]report.Observation, len(r.Observations))
	copy(c.Observations, r.Observations)
	for i := range c.Observations {
		res.Bounded += c.Observations[i].Bound()
	}
	fits := func(x *report.NodeReport) bool {
		res.Bytes = proto.Size(ReportToProto(x))
		return res.Bytes <= maxBytes && len(x.Observations) <= report.MaxObservations
	}
	if fits(&c) {
		return &c, res
	}
	for i := range c.Observations {
		if o := &c.Observations[i]; o.Status == report.StatusHealthy && o.Message != "" {
			o.Message = ""
			res.Stripped++
		}
	}
	if fits(&c) {
		return &c, res
	}
	largest := 0
	for _, g := range groups(c.Observations) {
		largest = max(largest, len(g))
	}
	var folded *report.NodeReport
	for keep := largest - 1; keep >= 1; keep = min(keep-1, keep*3/4) {
		f := c
		f.Observations, res.Folded = fold(c.Observations, keep, maxBytes)
		folded = &f
		if fits(folded) {
			return folded, res
		}
	}
	if folded == nil {
		folded = &c
	}
	for i := range folded.Observations {
		if o := &folded.Observations[i]; len(o.Message) > fitMessage {
			o.Message = report.Truncate(o.Message, fitMessage)
			res.Cut++
		}
	}
	fits(folded) // sets res.Bytes
	return folded, res
}

type checkKey struct{ component, check string }

// groups are the indices of obs by check, in the order of their first
// observation.
func groups(obs []report.Observation) [][]int {
	idx := map[checkKey]int{}
	var out [][]int
	for i, o := range obs {
		k := checkKey{o.Component, o.Check}
		g, ok := idx[k]
		if !ok {
			g = len(out)
			idx[k] = g
			out = append(out, nil)
		}
		out[g] = append(out[g], i)
	}
	return out
}

// fold keeps the worst keep observations of every check verbatim, in
// their order, and replaces the rest of the check with one summary after
// them. It returns the new observations and how many were folded.
func fold(obs []report.Observation, keep, maxBytes int) ([]report.Observation, int) {
	out := make([]report.Observation, 0, len(obs))
	n := 0
	for _, g := range groups(obs) {
		if len(g) <= keep {
			for _, i := range g {
				out = append(out, obs[i])
			}
			continue
		}
		byRank := append([]int(nil), g...)
		sort.SliceStable(byRank, func(a, b int) bool { return obs[byRank[a]].Status.Rank() > obs[byRank[b]].Status.Rank() })
		kept := byRank[:keep]
		sort.Ints(kept)
		for _, i := range kept {
			out = append(out, obs[i])
		}
		var counts [4]int
		worst := report.StatusUnknown
		for _, i := range byRank[keep:] {
			counts[obs[i].Status]++
			worst = report.Worse(worst, obs[i].Status)
		}
		first := obs[g[0]]
		folded := len(g) - keep
		n += folded
		out = append(out, report.Observation{
			Component: first.Component,
			Check:     first.Check,
			Status:    worst,
			Reason:    report.ReasonObservationsFolded,
			Message: fmt.Sprintf("%d more %s observations folded to fit the %d-byte report budget: %d Down, %d Degraded, %d Unknown, %d Healthy",
				folded, first.Check, maxBytes, counts[report.StatusDown], counts[report.StatusDegraded], counts[report.StatusUnknown], counts[report.StatusHealthy]),
			Attributes: map[string]float64{
				report.AttrFolded:         float64(folded),
				report.AttrFoldedDown:     float64(counts[report.StatusDown]),
				report.AttrFoldedDegraded: float64(counts[report.StatusDegraded]),
				report.AttrFoldedUnknown:  float64(counts[report.StatusUnknown]),
				report.AttrFoldedHealthy:  float64(counts[report.StatusHealthy]),
			},
		})
	}
	return out, n
}
