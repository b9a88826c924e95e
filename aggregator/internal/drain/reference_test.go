package drain_test

import (
	"strings"
	"testing"

	"github.com/cozystack/cozy-health/aggregator/internal/drain"
	"github.com/cozystack/cozy-health/pkg/doctable"
)

// drainRulesPage is the reference page of the drain rules.
const drainRulesPage = "docs/reference/drain-rules.md"

// TestDrainRulesReference: Rules and DecommissionRules are the one list of
// drain rules; the reference page's rule table names the same rules, each
// with the intents that ask it (every rule: reboot and decommission;
// DecommissionRules: decommission only), and docs/guard.md's table of what
// each rule checks per intent names the same rules, all compared as sets.
func TestDrainRulesReference(t *testing.T) {
	var table []string
	for _, r := range drain.Rules {
		table = append(table, r.Name()+" (reboot, decommission)")
	}
	for _, r := range drain.DecommissionRules {
		table = append(table, r.Name()+" (decommission)")
	}

	var page []string
	for _, cells := range doctable.Rows(t, doctable.Read(t, drainRulesPage), "| rule | intents |") {
		page = append(page, doctable.Code(cells[0])+" ("+cells[1]+")")
	}
	doctable.SameSet(t, "drain.Rules and drain.DecommissionRules", table, drainRulesPage+"'s rule table", page)

	var guard []string
	for _, cells := range doctable.Rows(t, doctable.Read(t, "docs/guard.md"), "| rule | reboot | decommission |") {
		asked := []string{}
		if !strings.HasPrefix(cells[1], "not asked") {
			asked = append(asked, "reboot")
		}
		if !strings.HasPrefix(cells[2], "not asked") {
			asked = append(asked, "decommission")
		}
		guard = append(guard, doctable.Code(cells[0])+" ("+strings.Join(asked, ", ")+")")
	}
	doctable.SameSet(t, "drain.Rules and drain.DecommissionRules", table, "docs/guard.md's rule table", guard)
}
