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

// useRealOVN tells whether the lab runs Debian's ovn-central and Open
// vSwitch (EnvOVN=real, or unset and the packages installed).
func useRealOVN() (bool, error) {
	mode := os.Getenv(EnvOVN)
	avail := ovnreal.Available()
	switch {
	case mode == "real" && avail != nil:
		return false, fmt.Errorf("%s=real: %w", EnvOVN, avail)
	case mode != "" && mode != "real" && mode != "stand-in":
		return false, fmt.Errorf("%s=%q: want real or stand-in", EnvOVN, mode)
	}
	return mode == "real" || mode == "" && avail == nil, nil
}

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
//
// With the real servers, the first member's node also runs a real Open
// vSwitch node in its OVSRun and OVNRun (the Open_vSwitch ovsdb-server, a
// userspace ovs-vswitchd and ovn-controller connected to the real
// southbound database), returned in realOVS by node name; the other nodes
// keep the stand-in sockets.
func startOVNCentral(s *State, ips map[string]string) (nb, sb ovnDB, realOVS map[string]*ovnreal.OVSNode, closeFn func(), err error) {
	var members []*Node
	for i := range s.Nodes {
		if s.Nodes[i].OVNCentral {
			members = append(members, &s.Nodes[i])
		}
	}
	real, err := useRealOVN()
	switch {
	case err != nil:
		return nil, nil, nil, nil, err
	case len(members) > 0 && real:
		layout := make([]ovnreal.Layout, len(members))
		index := map[string]int{}
		for i, n := range members {
			layout[i] = ovnreal.Layout{RunDir: n.OVNRun, DBDir: n.OVNDBDir, LogDir: filepath.Join(filepath.Dir(n.OVNRun), "ovn-log"), OVSRun: n.OVSRun}
			index[n.Name] = i
		}
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		defer cancel()
		c, err := ovnreal.Launch(ctx, filepath.Join(s.Dir, "ovn-central"), ovnreal.Options{Northd: true, OVS: true, Layout: layout})
		if err != nil {
			return nil, nil, nil, nil, fmt.Errorf("start real ovn-central and Open vSwitch: %w", err)
		}
		realOVS = map[string]*ovnreal.OVSNode{members[0].Name: c.Node}
		return realOVNDB{c, ovnreal.Northbound, index}, realOVNDB{c, ovnreal.Southbound, index}, realOVS, c.Close, nil
	}
	fnb, fsb := ovs.NewCluster("OVN_Northbound"), ovs.NewCluster("OVN_Southbound")
	closeFn = func() { fnb.Close(); fsb.Close() }
	for _, n := range members {
		ip := ips[n.Name]
		if err := fnb.AddMember(n.Name, "tcp:["+ip+"]:6643", filepath.Join(n.OVNRun, "ovnnb_db.ctl"), filepath.Join(n.OVNDBDir, "ovnnb_db.db")); err != nil {
			closeFn()
			return nil, nil, nil, nil, err
		}
		if err := fsb.AddMember(n.Name, "tcp:["+ip+"]:6644", filepath.Join(n.OVNRun, "ovnsb_db.ctl"), filepath.Join(n.OVNDBDir, "ovnsb_db.db")); err != nil {
			closeFn()
			return nil, nil, nil, nil, err
		}
	}
	return fakeOVNDB{fnb}, fakeOVNDB{fsb}, nil, closeFn, nil
}

// ovsDaemons are the real OVS node's daemons the per-daemon faults name.
var ovsDaemons = []string{"ovs-vswitchd", "ovn-controller", "ovs-ovsdb"}

// ovsDaemonActions are what the per-daemon faults do: SIGTERM, SIGKILL,
// SIGSTOP, SIGCONT, start again.
var ovsDaemonActions = []string{"stop", "kill", "freeze", "thaw", "start"}

func init() {
	for _, d := range ovsDaemons {
		for _, a := range ovsDaemonActions {
			Faults[d+"-"+a] = false
		}
	}
}

func (ns *nodeSources) ovsDaemon(name string) *ovnreal.Proc {
	switch name {
	case "ovs-vswitchd":
		return ns.realOVS.Vswitchd
	case "ovn-controller":
		return ns.realOVS.Controller
	case "ovs-ovsdb":
		return ns.realOVS.OVSDB
	}
	return nil
}

// realOVSFault applies a fault to the node's real Open vSwitch daemons:
// ovs-down/ovs-up (all three), or DAEMON-ACTION for one of ovsDaemons.
// ok is false when f is not such a fault.
func (ns *nodeSources) realOVSFault(f string) (msg string, ok bool, err error) {
	if f == "ovs-down" {
		for _, p := range []*ovnreal.Proc{ns.realOVS.Controller, ns.realOVS.Vswitchd, ns.realOVS.OVSDB} {
			if err := p.Stop(syscall.SIGTERM); err != nil {
				return "", true, err
			}
		}
		return fmt.Sprintf("ovs-ovn on %s is down: ovn-controller, ovs-vswitchd and the Open_vSwitch ovsdb-server stopped by SIGTERM (real daemons)", ns.name), true, nil
	}
	if f == "ovs-up" {
		for _, p := range []*ovnreal.Proc{ns.realOVS.OVSDB, ns.realOVS.Vswitchd, ns.realOVS.Controller} {
			if err := startOVSProc(p); err != nil {
				return "", true, err
			}
			if p == ns.realOVS.OVSDB {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := ovnreal.Poll(ctx, func() error { _, err := os.Stat(ns.realOVS.DBSocket); return err })
				cancel()
				if err != nil {
					return "", true, fmt.Errorf("ovsdb-server on %s made no %s: %w", ns.name, ns.realOVS.DBSocket, err)
				}
			}
		}
		return fmt.Sprintf("ovs-ovn on %s runs again (real daemons started)", ns.name), true, nil
	}
	for _, d := range ovsDaemons {
		for _, a := range ovsDaemonActions {
			if f != d+"-"+a {
				continue
			}
			p := ns.ovsDaemon(d)
			pid := p.Pid()
			switch a {
			case "stop":
				err = p.Stop(syscall.SIGTERM)
			case "kill":
				err = p.Stop(syscall.SIGKILL)
			case "freeze":
				err = p.Signal(syscall.SIGSTOP)
			case "thaw":
				err = p.Signal(syscall.SIGCONT)
			case "start":
				err = startOVSProc(p)
			}
			if err != nil {
				return "", true, fmt.Errorf("%s on %s: %w", f, ns.name, err)
			}
			verb := map[string]string{"stop": "stopped by SIGTERM", "kill": "killed by SIGKILL", "freeze": "frozen by SIGSTOP",
				"thaw": "continued by SIGCONT", "start": "started again"}[a]
			if a == "start" {
				pid = p.Pid()
			}
			return fmt.Sprintf("%s on %s %s (real daemon, pid %d)", p.Name, ns.name, verb, pid), true, nil
		}
	}
	return "", false, nil
}

// startOVSProc starts p unless it runs.
func startOVSProc(p *ovnreal.Proc) error {
	if p.Pid() != 0 {
		return nil
	}
	return p.Start()
}
