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

// RulesFor is the rules asked for intent: Rules for a reboot; for a
// decommission, Rules and DecommissionRules (what a node that never comes
// back needs besides).
func RulesFor(intent Intent) []Rule {
	if intent == IntentDecommission {
		return append(append([]Rule{}, Rules...), DecommissionRules...)
	}
	return Rules
}

// DecommissionRules are the rules a decommission adds to Rules. None is
// written yet (the node's raft members already removed, its LINSTOR
// resources re-placeable): a decommission is judged as a reboot until
// they are.
var DecommissionRules = []Rule{}
