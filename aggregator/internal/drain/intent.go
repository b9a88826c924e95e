package drain

import "github.com/cozystack/cozy-health/pkg/drainapi"

// Intent is why a node is drained (drainapi.Intent, its one definition).
type Intent = drainapi.Intent

// The intents.
const (
	IntentReboot       = drainapi.IntentReboot
	IntentDecommission = drainapi.IntentDecommission
)

// ParseIntent parses an intent; empty is IntentReboot.
func ParseIntent(s string) (Intent, error) { return drainapi.ParseIntent(s) }

// rulesFor is the rules asked for intent: Rules for a reboot; for a
// decommission, Rules and DecommissionRules (what a node that never comes
// back needs besides).
func rulesFor(intent Intent) []Rule {
	if intent == IntentDecommission {
		return append(append([]Rule{}, Rules...), DecommissionRules...)
	}
	return Rules
}

// DecommissionRules are the rules a decommission adds to Rules: the node
// does not come back, so its raft members must already be removed
// (raft-member-removed) and every resource it holds data of must be
// re-placeable on other satellites (linstor-replaceable).
var DecommissionRules = []Rule{
	raftMemberRemovedRule{},
	linstorReplaceableRule{},
}
