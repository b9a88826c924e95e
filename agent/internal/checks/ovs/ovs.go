// Package ovs judges this node's kube-ovn dataplane (the ovs-ovn pod) from
// its own sockets on the host, not from the kube-ovn pinger, which runs on
// the pod network where the agent cannot reach it on its loopback:
//
//   - ovsdb-server: the OVSDB management protocol (RFC 7047) on db.sock,
//     one transact selecting the Open_vSwitch root row and the Interface
//     table;
//   - ovs-vswitchd: `version` on its control socket
//     (<rundir>/ovs-vswitchd.<pid>.ctl, pid from ovs-vswitchd.pid), as
//     `ovs-appctl -t ovs-vswitchd version` and kube-ovn's pinger do;
//   - ovn-controller: `connection-status` on its control socket (pid from
//     ovn-controller.pid in OVN's rundir): connected to the OVN southbound
//     database or not.
//
// A node where db.sock is absent, or where a daemon's socket refuses
// connections, is a node where kube-ovn's ovs-ovn is not running: a
// DaemonSet pod that is missing (not rolled out here), orphaned or crashed.
package ovs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/agent/internal/sources/ovsrpc"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Reasons.
const (
	ReasonHealthy             = "OVSHealthy"
	ReasonOVSDBSocketMissing  = "OVSDBSocketMissing"
	ReasonOVSDBNotListening   = "OVSDBNotListening"
	ReasonOVSDBNotInitialized = "OVSDBNotInitialized"
	// ReasonOVSDBUnresponsive: ovsdb-server accepted the connection but
	// did not answer within its share of the deadline (frozen, wedged).
	ReasonOVSDBUnresponsive         = "OVSDBUnresponsive"
	ReasonVswitchdNotRunning        = "VswitchdNotRunning"
	ReasonVswitchdUnresponsive      = "VswitchdUnresponsive"
	ReasonOVNControllerNotRunning   = "OVNControllerNotRunning"
	ReasonOVNControllerNotConnected = "OVNControllerNotConnected"
	ReasonOVNControllerUnresponsive = "OVNControllerUnresponsive"
	ReasonInterfaceErrors           = "InterfaceErrors"
)

// Config says where the sockets are.
type Config struct {
	// DBSocket is ovsdb-server's socket (--ovs-db-socket); its directory is
	// OVS's rundir, where ovs-vswitchd's pidfile and control socket live.
	// Empty disables the check.
	DBSocket string
	// ControllerPidfile is ovn-controller's pidfile (--ovn-controller-pidfile);
	// its control socket is beside it. Empty skips ovn-controller.
	ControllerPidfile string
}

// Check is the ovs check.
type Check struct{ cfg Config }

var _ checkkit.Check = (*Check)(nil)

// New returns the check.
func New(cfg Config) *Check { return &Check{cfg: cfg} }

// Name implements checkkit.Check.
func (*Check) Name() string { return report.CheckOVS }

// Component implements checkkit.Check.
func (*Check) Component() string { return report.ComponentKubeOVN }

// Columns read of the Interface table.
var interfaceColumns = []string{"name", "type", "ofport", "error", "link_state", "external_ids"}

// DB is what the check reads from ovsdb-server.
type DB struct {
	// OVSVersion is the root row's ovs_version ("" when unset).
	OVSVersion string
	// Interfaces is the Interface table.
	Interfaces []Interface
}

// Interface is one row of the Interface table.
type Interface struct {
	Name, Type string
	// OFPort is -1 when ovs-vswitchd could not add the interface, 0 when unset.
	OFPort      int
	Error       string
	ExternalIDs map[string]string
}

// finding is one part of the verdict.
type finding struct {
	status report.Status
	reason string
	text   string
}

// Run implements checkkit.Check.
func (c *Check) Run(ctx context.Context) ([]report.Observation, error) {
	if c.cfg.DBSocket == "" {
		return nil, checkkit.NotApplicable("no ovsdb-server socket configured")
	}
	if _, err := os.Stat(c.cfg.DBSocket); errors.Is(err, fs.ErrNotExist) {
		return checkkit.Stamp(c, report.Observation{Status: report.StatusDown, Reason: ReasonOVSDBSocketMissing,
			Message: fmt.Sprintf("no ovsdb-server socket at %s: kube-ovn's ovs-ovn does not run on this node (its DaemonSet pod is missing, not rolled out here, orphaned or crashed)", c.cfg.DBSocket)}), nil
	}
	// A wedged ovsdb-server must not hide the daemons: it is asked within
	// half of what is left, like each daemon within a quarter.
	dbCtx := ctx
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		dbCtx, cancel = context.WithTimeout(ctx, time.Until(dl)/2)
		defer cancel()
	}
	db, err := ReadDB(dbCtx, c.cfg.DBSocket)
	if errors.Is(err, syscall.ECONNREFUSED) {
		return checkkit.Stamp(c, report.Observation{Status: report.StatusDown, Reason: ReasonOVSDBNotListening,
			Message: fmt.Sprintf("ovsdb-server socket %s exists but nothing accepts connections (ovs-ovn crashed or is being replaced): %v", c.cfg.DBSocket, err)}), nil
	}
	var found []finding
	// The socket's deadline is the share's deadline: its i/o timeout can
	// fire a moment before dbCtx reports its own expiry.
	dbTimedOut := dbCtx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded)
	switch {
	case err != nil && dbTimedOut && ctx.Err() == nil:
		found = append(found, finding{report.StatusUnknown, ReasonOVSDBUnresponsive,
			fmt.Sprintf("ovsdb-server on %s did not answer in time (frozen or wedged): %v", c.cfg.DBSocket, err)})
		db = &DB{}
	case err != nil:
		return nil, err
	case db == nil:
		found = append(found, finding{report.StatusDown, ReasonOVSDBNotInitialized, "the Open_vSwitch table has no root row"})
		db = &DB{}
	default:
		v := db.OVSVersion
		if v == "" {
			v = "version unset"
		}
		found = append(found, finding{report.StatusHealthy, ReasonHealthy, "ovsdb-server up (Open vSwitch " + v + ")"})
	}
	unread := len(found) > 0 && found[0].reason == ReasonOVSDBUnresponsive
	found = append(found, c.daemon(ctx, filepath.Join(filepath.Dir(c.cfg.DBSocket), "ovs-vswitchd.pid"), "ovs-vswitchd", "version",
		ReasonVswitchdNotRunning, ReasonVswitchdUnresponsive, nil))
	if c.cfg.ControllerPidfile != "" {
		found = append(found, c.daemon(ctx, c.cfg.ControllerPidfile, "ovn-controller", "connection-status",
			ReasonOVNControllerNotRunning, ReasonOVNControllerUnresponsive, func(out string) finding {
				if strings.TrimSpace(out) == "connected" {
					return finding{report.StatusHealthy, ReasonHealthy, "ovn-controller connected to the southbound database"}
				}
				return finding{report.StatusDegraded, ReasonOVNControllerNotConnected,
					fmt.Sprintf("ovn-controller %s to the southbound database: new pods get no flows", strings.TrimSpace(out))}
			}))
	}
	var bad []string
	for _, i := range db.Interfaces {
		if i.Error != "" || i.OFPort == -1 {
			what := i.Name
			if pod := i.ExternalIDs["pod_name"]; pod != "" {
				what += " (pod " + i.ExternalIDs["pod_namespace"] + "/" + pod + ")"
			}
			if i.Error != "" {
				what += ": " + i.Error
			}
			bad = append(bad, what)
		}
	}
	sort.Strings(bad)
	itext := fmt.Sprintf("%d interfaces", len(db.Interfaces))
	if unread {
		itext = "interfaces not read"
	}
	if len(bad) > 0 {
		shown := bad
		if len(shown) > 5 {
			shown = shown[:5]
		}
		itext = fmt.Sprintf("%d of %d interfaces with errors: %s", len(bad), len(db.Interfaces), strings.Join(shown, "; "))
		if len(bad) > len(shown) {
			itext += fmt.Sprintf("; and %d more", len(bad)-len(shown))
		}
		found = append(found, finding{report.StatusDegraded, ReasonInterfaceErrors, itext})
	} else {
		found = append(found, finding{report.StatusHealthy, ReasonHealthy, itext})
	}

	attrs := map[string]float64{
		report.AttrInterfaces:           float64(len(db.Interfaces)),
		report.AttrInterfacesWithErrors: float64(len(bad)),
	}
	if unread {
		attrs = nil // not read: no count, not a zero
	}
	o := report.Observation{Status: report.StatusHealthy, Reason: ReasonHealthy, Attributes: attrs}
	parts := make([]string, 0, len(found))
	for _, f := range found {
		if f.status.Rank() > o.Status.Rank() {
			o.Status, o.Reason = f.status, f.reason
		}
		parts = append(parts, f.text)
	}
	// The worst finding first: the message is cut at 256 characters.
	sort.SliceStable(parts, func(i, j int) bool { return found[i].status.Rank() > found[j].status.Rank() })
	o.Message = strings.Join(parts, "; ")
	return checkkit.Stamp(c, o), nil
}

// daemon asks a daemon found through its pidfile one unixctl command.
func (c *Check) daemon(ctx context.Context, pidfile, name, command, notRunning, unresponsive string, judge func(string) finding) finding {
	b, err := os.ReadFile(pidfile)
	if err != nil {
		return finding{report.StatusDown, notRunning, fmt.Sprintf("%s not running: no pidfile %s", name, pidfile)}
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return finding{report.StatusDown, notRunning, fmt.Sprintf("%s not running: pidfile %s holds %q", name, pidfile, strings.TrimSpace(string(b)))}
	}
	ctl := filepath.Join(filepath.Dir(pidfile), fmt.Sprintf("%s.%d.ctl", name, pid))
	// A wedged daemon must not eat the whole check's deadline: each asks
	// within a quarter of what is left.
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Until(dl)/4)
		defer cancel()
	}
	out, err := ovsrpc.Appctl(ctx, ctl, command)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ECONNREFUSED):
		return finding{report.StatusDown, notRunning, fmt.Sprintf("%s not running: its control socket %s does not answer: %v", name, ctl, err)}
	case err != nil:
		return finding{report.StatusUnknown, unresponsive, fmt.Sprintf("%s %s: %v", name, command, err)}
	case judge != nil:
		return judge(out)
	}
	return finding{report.StatusHealthy, ReasonHealthy, name + " up"}
}

// ReadDB reads the Open_vSwitch root row and the Interface table in one
// transaction; a nil DB without error means the root row is missing.
func ReadDB(ctx context.Context, socket string) (*DB, error) {
	var results []json.RawMessage
	err := ovsrpc.Call(ctx, socket, "transact", []any{"Open_vSwitch",
		map[string]any{"op": "select", "table": "Open_vSwitch", "where": []any{}, "columns": []string{"ovs_version"}},
		map[string]any{"op": "select", "table": "Interface", "where": []any{}, "columns": interfaceColumns},
	}, &results)
	if err != nil {
		return nil, fmt.Errorf("read the Open_vSwitch database at %s: %w", socket, err)
	}
	return ParseTransact(results)
}

type selectResult struct {
	Rows    []map[string]json.RawMessage `json:"rows"`
	Error   string                       `json:"error"`
	Details string                       `json:"details"`
}

// ParseTransact reads the two select results of ReadDB.
func ParseTransact(results []json.RawMessage) (*DB, error) {
	if len(results) != 2 {
		return nil, fmt.Errorf("read the Open_vSwitch database: want 2 results, got %d", len(results))
	}
	var rs [2]selectResult
	for i := range rs {
		if err := json.Unmarshal(results[i], &rs[i]); err != nil {
			return nil, fmt.Errorf("read the Open_vSwitch database: result %d: %w", i, err)
		}
		if rs[i].Error != "" {
			return nil, fmt.Errorf("read the Open_vSwitch database: %s: %s", rs[i].Error, rs[i].Details)
		}
	}
	if len(rs[0].Rows) == 0 {
		return nil, nil
	}
	db := &DB{}
	var err error
	if db.OVSVersion, err = optString(rs[0].Rows[0]["ovs_version"]); err != nil {
		return nil, fmt.Errorf("read ovs_version: %w", err)
	}
	for _, row := range rs[1].Rows {
		var i Interface
		if i.Name, err = optString(row["name"]); err != nil {
			return nil, fmt.Errorf("read Interface name: %w", err)
		}
		if i.Type, err = optString(row["type"]); err != nil {
			return nil, fmt.Errorf("read Interface %s type: %w", i.Name, err)
		}
		if i.Error, err = optString(row["error"]); err != nil {
			return nil, fmt.Errorf("read Interface %s error: %w", i.Name, err)
		}
		if i.OFPort, err = optInt(row["ofport"]); err != nil {
			return nil, fmt.Errorf("read Interface %s ofport: %w", i.Name, err)
		}
		if i.ExternalIDs, err = ovsMap(row["external_ids"]); err != nil {
			return nil, fmt.Errorf("read Interface %s external_ids: %w", i.Name, err)
		}
		db.Interfaces = append(db.Interfaces, i)
	}
	return db, nil
}

// optional decodes an RFC 7047 value of a column with at most one element:
// the atom itself or ["set", [atom?]]; ok is false for the empty set.
func optional(raw json.RawMessage) (json.RawMessage, bool, error) {
	if len(raw) == 0 {
		return nil, false, nil
	}
	var set []json.RawMessage
	if json.Unmarshal(raw, &set) == nil {
		var tag string
		if len(set) != 2 || json.Unmarshal(set[0], &tag) != nil || tag != "set" {
			return nil, false, fmt.Errorf("want an atom or [\"set\", [...]], got %.60s", raw)
		}
		var elems []json.RawMessage
		if err := json.Unmarshal(set[1], &elems); err != nil {
			return nil, false, fmt.Errorf("set elements: %w", err)
		}
		if len(elems) == 0 {
			return nil, false, nil
		}
		return elems[0], true, nil
	}
	return raw, true, nil
}

func optString(raw json.RawMessage) (string, error) {
	v, ok, err := optional(raw)
	if err != nil || !ok {
		return "", err
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", fmt.Errorf("want a string, got %.60s", v)
	}
	return s, nil
}

func optInt(raw json.RawMessage) (int, error) {
	v, ok, err := optional(raw)
	if err != nil || !ok {
		return 0, err
	}
	var n int
	if err := json.Unmarshal(v, &n); err != nil {
		return 0, fmt.Errorf("want an integer, got %.60s", v)
	}
	return n, nil
}

// ovsMap decodes ["map", [[k, v], ...]] with string keys and values.
func ovsMap(raw json.RawMessage) (map[string]string, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var m []json.RawMessage
	var tag string
	if err := json.Unmarshal(raw, &m); err != nil || len(m) != 2 || json.Unmarshal(m[0], &tag) != nil || tag != "map" {
		return nil, fmt.Errorf("want [\"map\", [...]], got %.60s", raw)
	}
	var pairs [][2]string
	if err := json.Unmarshal(m[1], &pairs); err != nil {
		return nil, fmt.Errorf("map pairs: %w", err)
	}
	out := make(map[string]string, len(pairs))
	for _, p := range pairs {
		out[p[0]] = p[1]
	}
	return out, nil
}
