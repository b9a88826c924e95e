package ovs

import (
	"fmt"
	"os"
	"strings"
	"sync"
)

// Cluster is one OVN clustered database (OVN_Northbound or OVN_Southbound)
// whose members live on different nodes. Each running member serves its
// node's control socket (ovnnb_db.ctl / ovnsb_db.ctl) answering
// `cluster/status <db>` with what raft_unixctl_status prints for the
// cluster's current state: with a majority of members running there is one
// leader and the others follow; below a majority every running member is a
// candidate retrying its election, with no leader.
type Cluster struct {
	// Name is the schema name: OVN_Northbound or OVN_Southbound.
	Name string

	mu      sync.Mutex // guards members, leader, term
	cid     string
	members []*member
	leader  int // index in members, -1 without a leader
	term    uint64
}

type member struct {
	node, address, ctl, dbFile string
	sid                        string
	ctlSrv                     *Unixctl
	// left: the member ran cluster/leave; its ovsdb-server runs on
	// without the database, which the others no longer list.
	left bool
}

// NewCluster returns a cluster of database name with no members.
func NewCluster(name string) *Cluster {
	return &Cluster{Name: name, cid: newUUID(), leader: -1, term: 1}
}

// AddMember adds node's member, with its raft address (tcp:[ip]:6643), its
// control socket path and its database file (created, as ovn-central's
// start-db.sh leaves <OVN_DIR>/ovnnb_db.db on the host), and starts it.
func (c *Cluster) AddMember(node, address, ctl, dbFile string) error {
	c.mu.Lock()
	m := &member{node: node, address: address, ctl: ctl, dbFile: dbFile, sid: newUUID()}
	c.members = append(c.members, m)
	c.mu.Unlock()
	if dbFile != "" {
		// A clustered database file starts with the CLUSTER magic
		// (ovsdb/log.c); the agent only needs it to exist.
		hdr := fmt.Sprintf("CLUSTER 0 0\n{\"cluster_id\":[\"uuid\",%q],\"server_id\":[\"uuid\",%q],\"name\":%q,\"local_address\":%q}\n", c.cid, m.sid, c.Name, address)
		if err := os.WriteFile(dbFile, []byte(hdr), 0o640); err != nil {
			return fmt.Errorf("ovn-central stand-in: write %s: %w", dbFile, err)
		}
	}
	return c.Start(node)
}

// Start starts node's member (serves its control socket).
func (c *Cluster) Start(node string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, err := c.member(node)
	if err != nil {
		return err
	}
	if m.ctlSrv != nil {
		return nil
	}
	srv, err := StartUnixctl(m.ctl, map[string]Command{
		"cluster/status": func(args []string) (string, error) { return c.status(m, args) },
		// ovsdb-server answers "status: ok" for a healthy database of
		// either storage (as Debian's ovsdb-server 3.1 does).
		"ovsdb-server/get-db-storage-status": func(args []string) (string, error) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if len(args) != 1 || args[0] != c.Name || m.left {
				return "", fmt.Errorf("Failed to find the database.")
			}
			return "status: ok", nil
		},
	})
	if err != nil {
		return err
	}
	m.ctlSrv = srv
	return nil
}

// Stop stops node's member: its ovsdb-server exits, the control socket is
// gone, the database file stays.
func (c *Cluster) Stop(node string) error {
	c.mu.Lock()
	m, err := c.member(node)
	srv := (*Unixctl)(nil)
	if err == nil {
		srv, m.ctlSrv = m.ctlSrv, nil
	}
	c.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
	return err
}

// Leave makes node's member leave the cluster, as `ovn-appctl -t <ctl>
// cluster/leave <db>` does once it completes (observed on Debian's
// ovn-central 23.03): its ovsdb-server keeps running and answers
// cluster/status with "unknown cluster", its database file stays on disk,
// and the others no longer list it. Start after Stop does not bring it
// back; Rejoin does.
func (c *Cluster) Leave(node string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, err := c.member(node)
	if err != nil {
		return err
	}
	if c.leader >= 0 && c.members[c.leader] == m {
		c.leader = -1
	}
	m.left = true
	return nil
}

// Rejoin puts a member that left back into the cluster with a new server
// id (a fresh `ovsdb-tool join-cluster`).
func (c *Cluster) Rejoin(node string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, err := c.member(node)
	if err != nil {
		return err
	}
	m.left, m.sid = false, newUUID()
	return nil
}

// SetHang makes node's member accept requests on its control socket and
// never answer (a frozen ovsdb-server, SIGSTOP), or answer again.
func (c *Cluster) SetHang(node string, hang bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, err := c.member(node)
	if err != nil {
		return err
	}
	if m.ctlSrv == nil {
		return fmt.Errorf("%s member on %s does not run", c.Name, node)
	}
	m.ctlSrv.SetHang(hang)
	return nil
}

// Running tells whether node's member runs.
func (c *Cluster) Running(node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, err := c.member(node)
	return err == nil && m.ctlSrv != nil
}

// Close stops every member.
func (c *Cluster) Close() {
	c.mu.Lock()
	nodes := make([]string, 0, len(c.members))
	for _, m := range c.members {
		nodes = append(nodes, m.node)
	}
	c.mu.Unlock()
	for _, n := range nodes {
		_ = c.Stop(n)
	}
}

func (c *Cluster) member(node string) (*member, error) {
	for _, m := range c.members {
		if m.node == node {
			return m, nil
		}
	}
	return nil, fmt.Errorf("%s has no member on %s", c.Name, node)
}

// elect settles the leader for the running members. Caller holds mu.
func (c *Cluster) elect() {
	running, voters := 0, 0
	for _, m := range c.members {
		if m.left {
			continue
		}
		voters++
		if m.ctlSrv != nil {
			running++
		}
	}
	if running < voters/2+1 {
		if c.leader >= 0 {
			c.leader = -1
			c.term++
		}
		return
	}
	if c.leader >= 0 && c.members[c.leader].ctlSrv != nil {
		return
	}
	for i, m := range c.members {
		if m.ctlSrv != nil && !m.left {
			c.leader = i
			c.term++
			return
		}
	}
}

func short(sid string) string { return sid[:4] }

// status prints what raft_unixctl_status prints (ovsdb/raft.c).
func (c *Cluster) status(self *member, args []string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(args) != 1 || args[0] != c.Name || self.left {
		return "", fmt.Errorf("unknown cluster")
	}
	c.elect()
	role, status, leader, vote := "follower", "cluster member", "unknown", "unknown"
	switch {
	case c.leader < 0:
		role, status, vote = "candidate", "disconnected from the cluster (election timeout)", "self"
	case c.members[c.leader] == self:
		role, leader, vote = "leader", "self", "self"
	default:
		leader, vote = short(c.members[c.leader].sid), short(c.members[c.leader].sid)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", short(self.sid))
	fmt.Fprintf(&b, "Name: %s\n", c.Name)
	fmt.Fprintf(&b, "Cluster ID: %s (%s)\n", short(c.cid), c.cid)
	fmt.Fprintf(&b, "Server ID: %s (%s)\n", short(self.sid), self.sid)
	fmt.Fprintf(&b, "Address: %s\n", self.address)
	fmt.Fprintf(&b, "Status: %s\n", status)
	fmt.Fprintf(&b, "Role: %s\n", role)
	fmt.Fprintf(&b, "Term: %d\n", c.term)
	fmt.Fprintf(&b, "Leader: %s\n", leader)
	fmt.Fprintf(&b, "Vote: %s\n", vote)
	b.WriteString("\n")
	fmt.Fprintf(&b, "Last Election started %d ms ago, reason: timeout\n", 1732603)
	if role == "leader" {
		fmt.Fprintf(&b, "Last Election won: %d ms ago\n", 1732587)
	}
	b.WriteString("Election timer: 1000\n")
	next := 100 + c.term
	fmt.Fprintf(&b, "Log: [2, %d]\n", next)
	b.WriteString("Entries not yet committed: 0\nEntries not yet applied: 0\n")
	b.WriteString("Connections:")
	for _, m := range c.members {
		if m == self || m.left {
			continue
		}
		if m.ctlSrv != nil {
			fmt.Fprintf(&b, " ->%s <-%s", short(m.sid), short(m.sid))
		} else {
			fmt.Fprintf(&b, " (->%s)", short(m.sid))
		}
	}
	b.WriteString("\n")
	b.WriteString("Disconnections: 0\n")
	b.WriteString("Servers:\n")
	for _, m := range c.members {
		if m.left {
			continue
		}
		fmt.Fprintf(&b, "    %s (%s at %s)", short(m.sid), short(m.sid), m.address)
		if m == self {
			b.WriteString(" (self)")
		}
		switch role {
		case "candidate":
			if m == self {
				fmt.Fprintf(&b, " (voted for %s)", short(self.sid))
			}
		case "leader":
			match := next - 1
			if m.ctlSrv == nil {
				match = 0
			}
			fmt.Fprintf(&b, " next_index=%d match_index=%d", next, match)
		}
		b.WriteString("\n")
	}
	return b.String(), nil
}
