// Package diskstate is DRBD's disk-state vocabulary (drbd-headers'
// drbd_strings.c, the strings LINSTOR's view and drbdsetup both use) as
// cozy-health judges it. It imports nothing, so the agent's drbdsetup check
// shares it with the LINSTOR client (pkg/linstorapi) without carrying that
// client.
package diskstate

import "github.com/cozystack/cozy-health/pkg/report"

// Rank orders DRBD disk states from good to bad, for picking a resource's
// worst volume.
func Rank(state string) int {
	switch state {
	case "UpToDate", "Diskless":
		return 0
	case "Consistent", "Attaching", "Detaching", "Negotiating":
		return 1
	case "Inconsistent":
		return 2
	case "Outdated":
		return 3
	case "Failed":
		return 5
	default: // DUnknown, "" (no state), anything unexpected
		return 4
	}
}

// StatusOf maps a DRBD disk state to a status; "" (no state) is Unknown.
func StatusOf(state string) report.Status {
	switch state {
	case "UpToDate", "Diskless":
		return report.StatusHealthy
	case "Failed":
		return report.StatusDown
	case "Consistent", "Attaching", "Detaching", "Negotiating", "Inconsistent", "Outdated":
		return report.StatusDegraded
	default:
		return report.StatusUnknown
	}
}
