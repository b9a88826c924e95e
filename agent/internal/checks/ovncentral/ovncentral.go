// Package ovncentral reads this node's ovn-central raft members: for the
// OVN_Northbound and OVN_Southbound clustered databases it asks the local
// ovsdb-server, on its unixctl control socket (/var/run/ovn/ovnnb_db.ctl,
// ovnsb_db.ctl, shared with the host by kube-ovn's ovn-central pods), for
// `cluster/status <db>` exactly as `ovn-appctl -t <ctl> cluster/status <db>`
// does, and judges the member from its role, status, leader and
// connections. A node holding a database file (kube-ovn's OVN_DIR, the
// ovn-central pod's hostPath: /var/lib/ovn in Cozystack) but no answering control socket hosts a member
// that is not running; a node with neither hosts none.
package ovncentral

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/agent/internal/sources/ovsrpc"
	"github.com/cozystack/cozy-health/pkg/report"
)

// The clustered databases of ovn-central.
const (
	Northbound = "OVN_Northbound"
	Southbound = "OVN_Southbound"
)

// Reasons. For the quorum rule (aggregator/internal/quorum) Down means
// "this member cannot vote": MemberNotRunning, MemberNotListening,
// MemberFailed, MemberLeftCluster, NoLeader, StorageError. Degraded means
// it votes but warns: LeaderLostMajority, MemberJoining. Unknown:
// StatusUnreadable, StatusTimeout. Healthy: ClusterMember, Standalone.
const (
	ReasonClusterMember      = "ClusterMember"
	ReasonNoLeader           = "NoLeader"
	ReasonMemberFailed       = "MemberFailed"
	ReasonMemberLeftCluster  = "MemberLeftCluster"
	ReasonMemberJoining      = "MemberJoining"
	ReasonMemberNotRunning   = "MemberNotRunning"
	ReasonMemberNotListening = "MemberNotListening"
	ReasonStatusUnreadable   = "StatusUnreadable"
	// ReasonStatusTimeout: the member's ovsdb-server accepted the
	// connection but did not answer within its database's share of the
	// check's deadline (a frozen or wedged server).
	ReasonStatusTimeout = "StatusTimeout"
	// ReasonLeaderLostMajority: this member leads but is connected to
	// fewer than a majority of the servers; OVS steps it down after an
	// election timeout, and no write commits meanwhile.
	ReasonLeaderLostMajority = "LeaderLostMajority"
	// ReasonStandalone: a non-clustered database whose storage is ok
	// (`ovsdb-server/get-db-storage-status`, as kube-ovn reads it).
	ReasonStandalone = "Standalone"
	// ReasonStorageError: a non-clustered database whose storage reports
	// an error.
	ReasonStorageError = "StorageError"
)

// Config says where the members' sockets and files are.
type Config struct {
	// NBCtl and SBCtl are the databases' control sockets (--ovn-nb-ctl,
	// --ovn-sb-ctl); empty skips that database.
	NBCtl, SBCtl string
	// DBDir holds the ovn-central database files on the host
	// (--ovn-db-dir, kube-ovn's OVN_DIR: /var/lib/ovn in Cozystack,
	// /etc/origin/ovn upstream); empty: a missing control
	// socket always means "no member here".
	DBDir string
}

// Check is the ovn-central-member check.
type Check struct{ cfg Config }

var _ checkkit.Check = (*Check)(nil)

// New returns the check.
func New(cfg Config) *Check { return &Check{cfg: cfg} }

// Name implements checkkit.Check.
func (*Check) Name() string { return report.CheckOVNCentralMember }

// Component implements checkkit.Check.
func (*Check) Component() string { return report.ComponentKubeOVN }

type database struct{ name, ctl, file string }

// outcome is one database's reading: an observation of a member this node
// hosts, or absent (known to host none), or unsure (could not tell).
type outcome struct {
	obs    report.Observation
	absent bool
	unsure string
}

// Run implements checkkit.Check. The databases are read at once, each within
// three quarters of what is left of the deadline, so a frozen
// ovsdb-server of one reads Unknown naming its database while the other
// is still reported.
func (c *Check) Run(ctx context.Context) ([]report.Observation, error) {
	var dbs []database
	for _, db := range []database{{Northbound, c.cfg.NBCtl, "ovnnb_db.db"}, {Southbound, c.cfg.SBCtl, "ovnsb_db.db"}} {
		if db.ctl != "" {
			dbs = append(dbs, db)
		}
	}
	if len(dbs) == 0 {
		return nil, checkkit.NotApplicable("no ovn-central control socket configured")
	}
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Until(dl)*3/4)
		defer cancel()
	}
	res := make([]outcome, len(dbs))
	var wg sync.WaitGroup
	for i, db := range dbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i] = c.member(ctx, db)
		}()
	}
	wg.Wait()
	var out []report.Observation
	var absent, unsure []string
	for i, r := range res {
		switch {
		case r.absent:
			absent = append(absent, dbs[i].ctl)
		case r.unsure != "":
			unsure = append(unsure, r.unsure)
		default:
			r.obs.ResourceRef = &report.ResourceRef{Kind: report.KindOVNDatabase, Name: dbs[i].name}
			out = append(out, r.obs)
		}
	}
	if len(out) > 0 {
		// This node hosts ovn-central: a database it could not tell
		// about is a member whose state is unknown.
		for i, r := range res {
			if r.unsure != "" {
				out = append(out, report.Observation{Status: report.StatusUnknown, Reason: ReasonStatusUnreadable, Message: r.unsure,
					ResourceRef: &report.ResourceRef{Kind: report.KindOVNDatabase, Name: dbs[i].name}})
			}
		}
		return checkkit.Stamp(c, out...), nil
	}
	if len(unsure) > 0 {
		// "I could not ask" is not "none here": the runner reports the
		// check Unknown with this error.
		return nil, fmt.Errorf("cannot tell whether this node hosts an ovn-central member: %s", strings.Join(unsure, "; "))
	}
	return nil, checkkit.NotApplicable(fmt.Sprintf("no ovn-central member on this node: no %s and no database file in %q", strings.Join(absent, ", "), c.cfg.DBDir))
}

// member reads one database's member.
func (c *Check) member(ctx context.Context, db database) outcome {
	file := ""
	var fileErr error
	if c.cfg.DBDir != "" {
		file = filepath.Join(c.cfg.DBDir, db.file)
		if _, err := os.Stat(file); err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				fileErr = err
			} else if _, derr := os.Stat(c.cfg.DBDir); derr != nil {
				// The database directory itself is gone: a mount that
				// failed tells nothing about the node.
				fileErr = derr
			}
			file = ""
		}
	}
	if _, err := os.Stat(db.ctl); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return outcome{unsure: fmt.Sprintf("%s control socket %s: %v", db.name, db.ctl, err)}
		}
		switch {
		case file != "":
			return outcome{obs: report.Observation{Status: report.StatusDown, Reason: ReasonMemberNotRunning,
				Message: fmt.Sprintf("this node hosts a %s member (database file %s) but its ovsdb-server is not running: no control socket %s", db.name, file, db.ctl)}}
		case fileErr != nil:
			return outcome{unsure: fmt.Sprintf("no %s control socket %s and the database file cannot be read: %v", db.name, db.ctl, fileErr)}
		}
		return outcome{absent: true}
	}
	o, err := c.status(ctx, db, file)
	if err != nil {
		return outcome{unsure: err.Error()}
	}
	return outcome{obs: o}
}

// status asks a running member's ovsdb-server for its cluster status.
func (c *Check) status(ctx context.Context, db database, file string) (report.Observation, error) {
	text, err := ovsrpc.Appctl(ctx, db.ctl, "cluster/status", db.name)
	var rpcErr *ovsrpc.Error
	switch {
	case err == nil:
	case ctx.Err() != nil, errors.Is(err, context.DeadlineExceeded):
		return report.Observation{Status: report.StatusUnknown, Reason: ReasonStatusTimeout,
			Message: fmt.Sprintf("%s ovsdb-server on %s did not answer cluster/status in time (frozen or overloaded): %v", db.name, db.ctl, err)}, nil
	case errors.Is(err, syscall.ECONNREFUSED):
		return report.Observation{Status: report.StatusDown, Reason: ReasonMemberNotListening,
			Message: fmt.Sprintf("%s control socket %s exists but its ovsdb-server does not accept connections: %v", db.name, db.ctl, err)}, nil
	case errors.As(err, &rpcErr) && strings.Contains(rpcErr.Message, "unknown cluster") && file != "":
		// raft_unixctl_status: the server runs but holds no clustered
		// database of that name, while this node's OVN_DIR holds its
		// file: the member left the cluster (cluster/leave completed, or
		// it was kicked) and does not come back by itself. kube-ovn's
		// ovn-healthcheck.sh fails on it.
		return report.Observation{Status: report.StatusDown, Reason: ReasonMemberLeftCluster,
			Message: fmt.Sprintf("%s member on %s has left the cluster (cluster/status: %s) while its database file %s remains: it serves nothing and does not vote", db.name, db.ctl, rpcErr.Message, file)}, nil
	case errors.As(err, &rpcErr) && strings.Contains(rpcErr.Message, "is not a valid command"):
		// An ovsdb-server with no clustered database at all has no
		// cluster/ commands: a standalone database.
		return c.standalone(ctx, db)
	default:
		return report.Observation{Status: report.StatusUnknown, Reason: ReasonStatusUnreadable,
			Message: fmt.Sprintf("ovn-appctl -t %s cluster/status %s: %v", db.ctl, db.name, err)}, nil
	}
	st, err := Parse(text)
	if err != nil {
		return report.Observation{Status: report.StatusUnknown, Reason: ReasonStatusUnreadable,
			Message: fmt.Sprintf("%s cluster/status: %v", db.name, err)}, nil
	}
	return Judge(st), nil
}

// standalone judges a non-clustered database as kube-ovn does: from
// `ovsdb-server/get-db-storage-status <db>` ("status: ok").
func (c *Check) standalone(ctx context.Context, db database) (report.Observation, error) {
	text, err := ovsrpc.Appctl(ctx, db.ctl, "ovsdb-server/get-db-storage-status", db.name)
	switch {
	case err == nil:
	case ctx.Err() != nil, errors.Is(err, context.DeadlineExceeded):
		return report.Observation{Status: report.StatusUnknown, Reason: ReasonStatusTimeout,
			Message: fmt.Sprintf("standalone %s ovsdb-server on %s did not answer get-db-storage-status in time: %v", db.name, db.ctl, err)}, nil
	default:
		return report.Observation{Status: report.StatusUnknown, Reason: ReasonStatusUnreadable,
			Message: fmt.Sprintf("ovn-appctl -t %s ovsdb-server/get-db-storage-status %s (a standalone database): %v", db.ctl, db.name, err)}, nil
	}
	status := strings.TrimSpace(text)
	attrs := map[string]float64{report.AttrRaftServers: 1, report.AttrIsLeader: 1, report.AttrRaftConnectedPeers: 0}
	if strings.TrimSpace(strings.TrimPrefix(status, "status:")) == "ok" {
		return report.Observation{Status: report.StatusHealthy, Reason: ReasonStandalone, Attributes: attrs,
			Message: fmt.Sprintf("%s is a standalone (not clustered) database on %s, storage %s", db.name, db.ctl, status)}, nil
	}
	return report.Observation{Status: report.StatusDown, Reason: ReasonStorageError, Attributes: attrs,
		Message: fmt.Sprintf("%s is a standalone (not clustered) database on %s whose storage fails: %.200s", db.name, db.ctl, status)}, nil
}

// Server is one line of the Servers: block.
type Server struct {
	ID, Address string
	Self        bool
}

// ClusterStatus is what `cluster/status` prints (ovsdb/raft.c,
// raft_unixctl_status), the fields kube-ovn's ovn-monitor parses too.
type ClusterStatus struct {
	// ServerID is this server's short id (the first line).
	ServerID string
	Name     string
	Address  string
	// Status: "cluster member", "joining cluster", "leaving cluster",
	// "left cluster", "failed", "disconnected from the cluster (election
	// timeout)".
	Status string
	// Role: leader, follower or candidate.
	Role string
	Term uint64
	// Leader: "self", "unknown" or the leader's short id.
	Leader string
	Vote   string
	// Connected and Failed are the peers with a live or a failed
	// connection (Connections: "->f080 <-f080 (->e631)").
	Connected, Failed []string
	Servers           []Server
}

// Parse reads the text of `cluster/status`.
func Parse(text string) (*ClusterStatus, error) {
	st := &ClusterStatus{}
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	inServers := false
	connected, failed := map[string]bool{}, map[string]bool{}
	for i, line := range lines {
		if i == 0 && !strings.Contains(line, ":") {
			st.ServerID = strings.TrimSpace(line)
			continue
		}
		if inServers {
			if strings.HasPrefix(line, " ") && strings.TrimSpace(line) != "" {
				f := strings.Fields(line)
				srv := Server{ID: f[0], Self: strings.Contains(line, "(self)")}
				if at := strings.Index(line, " at "); at >= 0 {
					rest := line[at+4:]
					if end := strings.Index(rest, ")"); end >= 0 {
						srv.Address = rest[:end]
					}
				}
				st.Servers = append(st.Servers, srv)
				continue
			}
			inServers = false
		}
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		switch key {
		case "Name":
			st.Name = val
		case "Server ID":
			if st.ServerID == "" {
				st.ServerID = strings.Fields(val + " ")[0]
			}
		case "Address":
			st.Address = val
		case "Status":
			st.Status = val
		case "Role":
			st.Role = val
		case "Term":
			t, err := strconv.ParseUint(val, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("parse Term %q: %w", val, err)
			}
			st.Term = t
		case "Leader":
			st.Leader = val
		case "Vote":
			st.Vote = val
		case "Connections":
			for _, tok := range strings.Fields(val) {
				bad := strings.HasPrefix(tok, "(")
				id := strings.TrimLeft(strings.Trim(tok, "()"), "<->")
				if bad {
					failed[id] = true
				} else {
					connected[id] = true
				}
			}
		case "Servers":
			inServers = true
		}
	}
	if st.Name == "" || st.Status == "" || st.Role == "" {
		return nil, fmt.Errorf("not a cluster/status answer (want Name, Status and Role): %.120q", text)
	}
	for id := range connected {
		st.Connected = append(st.Connected, id)
	}
	for id := range failed {
		if !connected[id] {
			st.Failed = append(st.Failed, id)
		}
	}
	sort.Strings(st.Connected)
	sort.Strings(st.Failed)
	return st, nil
}

// Judge turns a member's status into its observation.
func Judge(st *ClusterStatus) report.Observation {
	self := st.ServerID
	peers, connected := 0, 0
	isConnected := map[string]bool{}
	for _, id := range st.Connected {
		isConnected[id] = true
	}
	var down []string
	for _, s := range st.Servers {
		if s.Self || s.ID == self {
			continue
		}
		peers++
		if isConnected[s.ID] {
			connected++
		} else {
			down = append(down, s.ID)
		}
	}
	o := report.Observation{Attributes: map[string]float64{
		report.AttrRaftServers:        float64(len(st.Servers)),
		report.AttrIsLeader:           b2f(st.Role == "leader"),
		report.AttrRaftTerm:           float64(st.Term),
		report.AttrRaftConnectedPeers: float64(connected),
	}}
	msg := fmt.Sprintf("%s member %s (%s): %s, role %s, term %d, leader %s, %d of %d peers connected",
		st.Name, self, st.Address, st.Status, st.Role, st.Term, st.Leader, connected, peers)
	if len(down) > 0 {
		msg += " (not connected: " + strings.Join(down, ", ") + ")"
	}
	switch {
	case strings.Contains(st.Status, "failed"):
		o.Status, o.Reason = report.StatusDown, ReasonMemberFailed
	case strings.Contains(st.Status, "left") || strings.Contains(st.Status, "leaving"):
		o.Status, o.Reason = report.StatusDown, ReasonMemberLeftCluster
	case strings.Contains(st.Status, "joining"):
		o.Status, o.Reason = report.StatusDegraded, ReasonMemberJoining
	case st.Role == "candidate" || st.Leader == "unknown" || st.Leader == "":
		// Without a leader the database serves no transaction: this
		// member cannot serve, whatever its process does.
		o.Status, o.Reason = report.StatusDown, ReasonNoLeader
	case st.Role == "leader" && 2*(connected+1) <= len(st.Servers):
		// A leader connected to fewer than a majority (itself included)
		// commits nothing; OVS steps it down only after an election
		// timeout. It still votes: Degraded, not Down.
		o.Status, o.Reason = report.StatusDegraded, ReasonLeaderLostMajority
		msg += fmt.Sprintf("; a leader connected to %d of the %d servers (itself included), fewer than the %d a majority needs: no write commits", connected+1, len(st.Servers), len(st.Servers)/2+1)
	case st.Role == "leader" || st.Role == "follower":
		o.Status, o.Reason = report.StatusHealthy, ReasonClusterMember
	default:
		o.Status, o.Reason = report.StatusUnknown, ReasonStatusUnreadable
	}
	o.Message = msg
	return o
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
