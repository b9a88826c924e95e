package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cozystack/cozy-health/test/ovnreal"
	"github.com/cozystack/cozy-health/test/sources/ovs"
)

// EnvOVN chooses ovn-central's servers in the lab: "real" (Debian's
// ovn-central, test/ovnreal: fail when absent), "stand-in"
// (test/sources/ovs), or unset: real where the packages are installed.
const EnvOVN = "COZY_HEALTH_LAB_OVN"

// ovnDB is one of ovn-central's clustered databases across the lab's
// ovn-central nodes, real or stood in for.
type ovnDB interface {
	name() string
	Stop(node string) error
	Start(node string) error
	// Leave makes the member leave the cluster (cluster/leave); Rejoin
	// joins it again with a fresh database file.
	Leave(node string) error
	Rejoin(node string) error
	// Freeze stops the member's server (SIGSTOP); Thaw continues it.
	Freeze(node string) error
	Thaw(node string) error
}

type fakeOVNDB struct{ *ovs.Cluster }

func (f fakeOVNDB) name() string { return f.Name }

func (f fakeOVNDB) Freeze(node string) error { return f.SetHang(node, true) }

func (f fakeOVNDB) Thaw(node string) error { return f.SetHang(node, false) }

// realOVNDB is one database of a real ovn-central (Debian's ovsdb-server)
// whose members' sockets and files are the lab nodes' OVNRun and OVNDBDir.
type realOVNDB struct {
	c      *ovnreal.Cluster
	db     string
	member map[string]int // node -> member index
}

func (r realOVNDB) name() string { return r.db }

func (r realOVNDB) proc(node string) (*ovnreal.Proc, error) {
	i, ok := r.member[node]
	if !ok {
		return nil, fmt.Errorf("%s has no member on %s", r.db, node)
	}
	return r.c.Members[i].Server(r.db), nil
}

// Stop stops the member's ovsdb-server by its pid (SIGTERM).
func (r realOVNDB) Stop(node string) error {
	p, err := r.proc(node)
	if err != nil {
		return err
	}
	return p.Stop(syscall.SIGTERM)
}

// Start starts the member's ovsdb-server again; it rejoins by itself.
func (r realOVNDB) Start(node string) error {
	p, err := r.proc(node)
	if err != nil {
		return err
	}
	if p.Pid() != 0 {
		return nil
	}
	return p.Start()
}

// Leave runs cluster/leave on the member and waits until it has left.
func (r realOVNDB) Leave(node string) error {
	i, ok := r.member[node]
	if !ok {
		return fmt.Errorf("%s has no member on %s", r.db, node)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return r.c.Leave(ctx, i, r.db)
}

// Rejoin joins a member that left again (a fresh join-cluster).
func (r realOVNDB) Rejoin(node string) error {
	i, ok := r.member[node]
	if !ok {
		return fmt.Errorf("%s has no member on %s", r.db, node)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return r.c.Rejoin(ctx, i, r.db)
}

// Freeze stops the member's ovsdb-server with SIGSTOP.
func (r realOVNDB) Freeze(node string) error {
	p, err := r.proc(node)
	if err != nil {
		return err
	}
	return p.Signal(syscall.SIGSTOP)
}

// Thaw continues the member's ovsdb-server (SIGCONT).
func (r realOVNDB) Thaw(node string) error {
	p, err := r.proc(node)
	if err != nil {
		return err
	}
	return p.Signal(syscall.SIGCONT)
}

// startOVNCentral starts ovn-central's NB and SB members on the lab's
// ovn-central nodes: real servers where Debian's packages are installed
// (or EnvOVN=real), the stand-in otherwise (or EnvOVN=stand-in).
func startOVNCentral(s *State, ips map[string]string) (nb, sb ovnDB, closeFn func(), err error) {
	var members []*Node
	for i := range s.Nodes {
		if s.Nodes[i].OVNCentral {
			members = append(members, &s.Nodes[i])
		}
	}
	mode := os.Getenv(EnvOVN)
	avail := ovnreal.Available()
	switch {
	case mode == "real" && avail != nil:
		return nil, nil, nil, fmt.Errorf("%s=real: %w", EnvOVN, avail)
	case len(members) > 0 && (mode == "real" || mode == "" && avail == nil):
		layout := make([]ovnreal.Layout, len(members))
		index := map[string]int{}
		for i, n := range members {
			layout[i] = ovnreal.Layout{RunDir: n.OVNRun, DBDir: n.OVNDBDir, LogDir: filepath.Join(filepath.Dir(n.OVNRun), "ovn-log")}
			index[n.Name] = i
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		c, err := ovnreal.Launch(ctx, filepath.Join(s.Dir, "ovn-central"), ovnreal.Options{Northd: true, Layout: layout})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("start real ovn-central: %w", err)
		}
		return realOVNDB{c, ovnreal.Northbound, index}, realOVNDB{c, ovnreal.Southbound, index}, c.Close, nil
	case mode != "" && mode != "real" && mode != "stand-in":
		return nil, nil, nil, fmt.Errorf("%s=%q: want real or stand-in", EnvOVN, mode)
	}
	fnb, fsb := ovs.NewCluster("OVN_Northbound"), ovs.NewCluster("OVN_Southbound")
	closeFn = func() { fnb.Close(); fsb.Close() }
	for _, n := range members {
		ip := ips[n.Name]
		if err := fnb.AddMember(n.Name, "tcp:["+ip+"]:6643", filepath.Join(n.OVNRun, "ovnnb_db.ctl"), filepath.Join(n.OVNDBDir, "ovnnb_db.db")); err != nil {
			closeFn()
			return nil, nil, nil, err
		}
		if err := fsb.AddMember(n.Name, "tcp:["+ip+"]:6644", filepath.Join(n.OVNRun, "ovnsb_db.ctl"), filepath.Join(n.OVNDBDir, "ovnsb_db.db")); err != nil {
			closeFn()
			return nil, nil, nil, err
		}
	}
	return fakeOVNDB{fnb}, fakeOVNDB{fsb}, closeFn, nil
}
