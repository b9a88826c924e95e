// Package drbd judges every DRBD resource on this node as the local kernel
// sees it (`drbdsetup status --json`, run without a shell under the check's
// deadline), when the agent runs with a drbdsetup.
//
// The LINSTOR controller's view of every replica (each satellite follows
// its kernel's state with `drbdsetup events2` and reports it) is read once
// per interval by the aggregator (aggregator/internal/linstorview),
// not by every agent. The shipped agent image is FROM scratch and carries
// no drbdsetup (reading the kernel's drbd genetlink family needs
// CAP_NET_ADMIN in the host's network namespace): there the check is not
// applicable and the controller's view is the DRBD source. A configured
// drbdsetup that is missing reads Unknown (InputMissing) naming the fix.
package drbd

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"sort"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/pkg/linstorapi/diskstate"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Check is the drbd-resource check.
type Check struct {
	drbdsetup string
	node      string
}

var _ checkkit.Check = (*Check)(nil)

// New returns the check; an empty drbdsetup makes it not applicable.
func New(drbdsetup, node string) *Check {
	return &Check{drbdsetup: drbdsetup, node: node}
}

// Fix is what the Unknown observation of a node whose configured drbdsetup
// is missing tells the operator.
const Fix = "ship drbd-utils in the agent image or unset --drbdsetup (the aggregator reads DRBD state from the LINSTOR controller: aggregator.linstor.url)"

// Name implements checkkit.Check.
func (*Check) Name() string { return report.CheckDRBDResource }

// Component implements checkkit.Check.
func (*Check) Component() string { return report.ComponentLinstor }

// Run implements checkkit.Check.
func (c *Check) Run(ctx context.Context) ([]report.Observation, error) {
	if c.drbdsetup == "" {
		return nil, checkkit.NotApplicable("no drbdsetup configured: DRBD state comes from the LINSTOR controller's view, read by the aggregator")
	}
	bin, err := exec.LookPath(c.drbdsetup)
	if err != nil {
		// Asked for, not there: the operator expects local DRBD state.
		return nil, &checkkit.InputError{Reason: report.ReasonInputMissing,
			Message: fmt.Sprintf("drbdsetup %q not found (%v): %s", c.drbdsetup, err, Fix), Err: err}
	}
	local, err := Resources(ctx, bin)
	if err != nil {
		return nil, err
	}
	return checkkit.Stamp(c, Judge(c.node, local)...), nil
}

// localState is a resource's worst local device state from drbdsetup.
func localState(r Resource) string {
	if len(r.Devices) == 0 {
		return ""
	}
	worst := "UpToDate"
	for _, d := range r.Devices {
		s := d.DiskState
		if d.Client && s == "Diskless" {
			s = "Diskless"
		}
		if diskstate.Rank(s) > diskstate.Rank(worst) {
			worst = s
		}
	}
	if worst == "UpToDate" && slices.ContainsFunc(r.Devices, func(d Device) bool { return d.DiskState == "Diskless" }) {
		return "Diskless"
	}
	return worst
}

// Judge turns drbdsetup's local status into one observation per resource
// on node, with the replica counts of its DRBD peers' view (this node and
// every peer it has a connection to; a peer counts UpToDate when connected
// and every peer volume is UpToDate).
func Judge(node string, local []Resource) []report.Observation {
	sorted := slices.Clone(local)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	out := make([]report.Observation, 0, len(sorted))
	for i, r := range sorted {
		if r.Name == "" || (i > 0 && sorted[i-1].Name == r.Name) {
			continue
		}
		state := localState(r)
		replicas, upToDate := 1, 0
		if state == "UpToDate" {
			upToDate = 1
		}
		for _, c := range r.Connections {
			peerUp := len(c.PeerDevices) > 0 && c.ConnectionState == "Connected"
			for _, pd := range c.PeerDevices {
				if pd.PeerDiskState != "UpToDate" {
					peerUp = false
				}
			}
			replicas++
			if peerUp {
				upToDate++
			}
		}
		o := report.Observation{
			ResourceRef: &report.ResourceRef{Kind: report.KindResource, Name: r.Name},
			Status:      diskstate.StatusOf(state),
			Attributes: map[string]float64{
				report.AttrUpToDate:         b2f(state == "UpToDate"),
				report.AttrDiskless:         b2f(state == "Diskless"),
				report.AttrReplicas:         float64(replicas),
				report.AttrUpToDateReplicas: float64(upToDate),
			},
		}
		shown := state
		if shown == "" {
			shown, o.Reason = "unknown (no device)", "DiskStateUnknown"
		} else {
			o.Reason = "Disk" + state
		}
		o.Message = fmt.Sprintf("resource %s on %s: disk %s (from drbdsetup); %d of %d replica(s) UpToDate, as this node's DRBD peers see it",
			r.Name, node, shown, upToDate, replicas)
		out = append(out, o)
	}
	return out
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
