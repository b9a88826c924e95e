// Package drbd judges every DRBD resource on this node: its disk state as the
// LINSTOR controller sees it (with the cluster-wide replica counts the drain
// rules need) and, where the drbdsetup binary is present, as the local
// kernel sees it (`drbdsetup status --json`, run without a shell under the
// check's deadline). The local view wins for the disk state.
//
// The shipped agent image is FROM scratch and carries no drbdsetup: DRBD 9
// no longer lists resources in /proc/drbd, and reading the kernel's drbd
// genetlink family needs CAP_NET_ADMIN in the host's network namespace. The
// LINSTOR satellite on every node already follows the kernel's state
// (`drbdsetup events2`) and reports it to the controller, so the image reads
// DRBD through LINSTOR's view. A node where DRBD is loaded (<proc-root>/drbd
// exists) but neither source is configured, or whose configured drbdsetup is
// missing, reads Unknown (InputMissing) naming the fix, never "not
// applicable": DRBD state is never silently dropped.
package drbd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"

	"github.com/cozystack/cozy-health/agent/internal/check"
	"github.com/cozystack/cozy-health/agent/internal/checks/linstor"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Check is the drbd-resource check.
type Check struct {
	linstor   *linstor.Client
	drbdsetup string
	node      string
	procRoot  string
}

var _ check.Check = (*Check)(nil)

// New returns the check; a nil LINSTOR client and an empty or missing
// drbdsetup make it not applicable. When the LINSTOR client's TLS files are
// missing, the local view (drbdsetup) is reported alone; without drbdsetup
// the check reads Unknown with the input's reason.
func New(c *linstor.Client, drbdsetup, node string) *Check {
	return &Check{linstor: c, drbdsetup: drbdsetup, node: node}
}

// WithProcRoot makes the check look for <root>/drbd (the DRBD module is
// loaded) when it has no source of DRBD state; "" skips the look.
func (c *Check) WithProcRoot(root string) *Check {
	c.procRoot = root
	return c
}

// Fix is what the Unknown observation of a node without a DRBD state source
// tells the operator.
const Fix = "set --linstor-url (chart: agent.sources.linstor.url) to read DRBD state from LINSTOR's satellites, or --drbdsetup with an image that ships drbd-utils"

// Name implements check.Check.
func (*Check) Name() string { return report.CheckDRBDResource }

// Component implements check.Check.
func (*Check) Component() string { return report.ComponentLinstor }

// Run implements check.Check.
func (c *Check) Run(ctx context.Context) ([]report.Observation, error) {
	bin := ""
	var lookErr error
	if c.drbdsetup != "" {
		if bin, lookErr = exec.LookPath(c.drbdsetup); lookErr != nil {
			bin = ""
		}
	}
	if c.linstor == nil && bin == "" {
		if lookErr != nil {
			// Asked for, not there: the operator expects local DRBD state.
			return nil, &check.InputError{Reason: report.ReasonInputMissing,
				Message: fmt.Sprintf("drbdsetup %q not found (%v): %s", c.drbdsetup, lookErr, Fix), Err: lookErr}
		}
		if c.procRoot != "" {
			path := filepath.Join(c.procRoot, "drbd")
			if _, err := os.Stat(path); err == nil {
				return nil, &check.InputError{Reason: report.ReasonInputMissing,
					Message: fmt.Sprintf("DRBD is loaded on this node (%s exists) but no source of its state is configured: %s", path, Fix)}
			}
		}
		return nil, check.NotApplicable("no LINSTOR URL configured, no drbdsetup, and the DRBD module is not loaded")
	}
	var view []linstor.ResourceWithVolumes
	linstorOn := c.linstor != nil
	if linstorOn {
		local, err := c.linstor.ResourceView(ctx, []string{c.node}, nil)
		if errors.As(err, new(*check.InputError)) && bin != "" {
			// The LINSTOR client's files are not mounted (linstor-satellite
			// says so): the kernel's view still stands on its own.
			linstorOn, local, err = false, nil, nil
		}
		if err != nil {
			return nil, err
		}
		var names []string
		for _, r := range local {
			if r.NodeName == c.node && !slices.Contains(names, r.Name) {
				names = append(names, r.Name)
			}
		}
		if len(names) > 0 {
			if view, err = c.linstor.ResourceView(ctx, nil, names); err != nil {
				return nil, err
			}
		}
	}
	var local []Resource
	if bin != "" {
		var err error
		if local, err = Status(ctx, bin); err != nil {
			return nil, err
		}
	}
	return check.Stamp(c, Judge(c.node, view, local, linstorOn)...), nil
}

// rank orders disk states from good to bad for picking a resource's worst
// volume.
func rank(state string) int {
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

// StatusOf maps a DRBD disk state to a status.
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

var disklessFlags = []string{"DISKLESS", "DRBD_DISKLESS", "TIE_BREAKER", "NVME_INITIATOR", "EBS_INITIATOR"}
var goneFlags = []string{"DELETE", "DRBD_DELETE", "INACTIVE"}

func hasAny(flags, want []string) bool {
	for _, f := range flags {
		if slices.Contains(want, f) {
			return true
		}
	}
	return false
}

// linstorState is a replica's worst volume disk state in LINSTOR's view;
// "" when the controller has no state for a volume.
func linstorState(r linstor.ResourceWithVolumes) string {
	if len(r.Volumes) == 0 {
		if hasAny(r.Flags, disklessFlags) {
			return "Diskless"
		}
		return ""
	}
	worst := "UpToDate"
	for _, v := range r.Volumes {
		s := ""
		if v.State != nil {
			s = v.State.DiskState
		}
		if s == "" && hasAny(r.Flags, disklessFlags) {
			s = "Diskless"
		}
		if rank(s) > rank(worst) || s == "" {
			worst = s
		}
		if worst == "" {
			break
		}
	}
	if worst == "UpToDate" && hasAny(r.Flags, disklessFlags) {
		return "Diskless"
	}
	return worst
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
		if rank(s) > rank(worst) {
			worst = s
		}
	}
	if worst == "UpToDate" && slices.ContainsFunc(r.Devices, func(d Device) bool { return d.DiskState == "Diskless" }) {
		return "Diskless"
	}
	return worst
}

type merged struct {
	name                  string
	state, source         string
	replicas, upToDateRep int
	inLinstor, inLocal    bool
}

// Judge merges LINSTOR's view (every replica of every resource on node) and
// drbdsetup's local status into one observation per resource on node.
// linstorOn says whether LINSTOR was asked (its counts are cluster-wide);
// without it the counts come from the local peers' states.
func Judge(node string, view []linstor.ResourceWithVolumes, local []Resource, linstorOn bool) []report.Observation {
	byName := map[string]*merged{}
	get := func(name string) *merged {
		m := byName[name]
		if m == nil {
			m = &merged{name: name}
			byName[name] = m
		}
		return m
	}
	for _, r := range view {
		if hasAny(r.Flags, goneFlags) {
			continue
		}
		m := get(r.Name)
		st := linstorState(r)
		m.replicas++
		if st == "UpToDate" {
			m.upToDateRep++
		}
		if r.NodeName == node {
			m.inLinstor, m.state, m.source = true, st, "LINSTOR"
		}
	}
	for _, r := range local {
		m := get(r.Name)
		m.inLocal = true
		st := localState(r)
		if !m.inLinstor {
			// Not known to LINSTOR (or LINSTOR not asked): count from the
			// peers this node is connected to.
			m.replicas, m.upToDateRep = 1, 0
			if st == "UpToDate" {
				m.upToDateRep = 1
			}
			for _, c := range r.Connections {
				peerUp := len(c.PeerDevices) > 0 && c.ConnectionState == "Connected"
				for _, pd := range c.PeerDevices {
					if pd.PeerDiskState != "UpToDate" {
						peerUp = false
					}
				}
				m.replicas++
				if peerUp {
					m.upToDateRep++
				}
			}
		} else if m.state == "UpToDate" && st != "UpToDate" {
			m.upToDateRep-- // the local kernel knows better than the controller
		} else if m.state != "UpToDate" && st == "UpToDate" {
			m.upToDateRep++
		}
		m.state, m.source = st, "drbdsetup"
	}
	names := make([]string, 0, len(byName))
	for n, m := range byName {
		if m.inLinstor || m.inLocal {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	out := make([]report.Observation, 0, len(names))
	for _, n := range names {
		m := byName[n]
		state := m.state
		o := report.Observation{
			ResourceRef: &report.ResourceRef{Kind: report.KindResource, Name: n},
			Status:      StatusOf(state),
			Attributes: map[string]float64{
				report.AttrUpToDate:         b2f(state == "UpToDate"),
				report.AttrDiskless:         b2f(state == "Diskless"),
				report.AttrReplicas:         float64(m.replicas),
				report.AttrUpToDateReplicas: float64(max(m.upToDateRep, 0)),
			},
		}
		shown := state
		if shown == "" {
			shown = "unknown (no state from the satellite)"
			o.Reason = "DiskStateUnknown"
		} else {
			o.Reason = "Disk" + state
		}
		scope := "cluster-wide as LINSTOR sees it"
		if !m.inLinstor {
			scope = "as this node's DRBD peers see it"
			if linstorOn {
				scope += "; LINSTOR does not list it on this node"
			}
		}
		o.Message = fmt.Sprintf("resource %s on %s: disk %s (from %s); %d of %d replica(s) UpToDate, %s",
			n, node, shown, m.source, max(m.upToDateRep, 0), m.replicas, scope)
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
