package ovs

import (
	"fmt"
	"path/filepath"
	"sync"
)

// Node is one node's ovs-ovn pod as its sockets show it: ovsdb-server on
// <ovsRun>/db.sock, ovs-vswitchd's control socket beside it, and
// ovn-controller's control socket in <ovnRun>. Stop and Start take the
// whole pod away and back (the lab's ovs-down / ovs-up).
type Node struct {
	OVSRun, OVNRun, Host string

	mu         sync.Mutex // guards the servers
	db         *OVSDB
	vswitchd   *Unixctl
	controller *Unixctl
	connected  string
}

// StartNode starts host's ovs-ovn sockets.
func StartNode(ovsRun, ovnRun, host string) (*Node, error) {
	n := &Node{OVSRun: ovsRun, OVNRun: ovnRun, Host: host, connected: "connected"}
	return n, n.Start()
}

// DBSocket is ovsdb-server's socket.
func (n *Node) DBSocket() string { return filepath.Join(n.OVSRun, "db.sock") }

// ControllerPidfile is ovn-controller's pidfile.
func (n *Node) ControllerPidfile() string { return filepath.Join(n.OVNRun, "ovn-controller.pid") }

// OVSDB returns the running ovsdb-server, nil while stopped.
func (n *Node) OVSDB() *OVSDB {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.db
}

// SetControllerConnected sets what ovn-controller's connection-status says.
func (n *Node) SetControllerConnected(c bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.connected = "connected"
	if !c {
		n.connected = "not connected"
	}
}

// Start starts whatever is stopped.
func (n *Node) Start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var err error
	if n.db == nil {
		if n.db, err = StartOVSDB(n.DBSocket(), n.Host); err != nil {
			return err
		}
	}
	if n.vswitchd == nil {
		n.vswitchd, err = StartDaemonCtl(n.OVSRun, "ovs-vswitchd", 1001, map[string]Command{
			"version": func([]string) (string, error) { return "ovs-vswitchd (Open vSwitch) 3.5.2", nil },
		})
		if err != nil {
			return fmt.Errorf("start ovs-vswitchd: %w", err)
		}
	}
	if n.controller == nil {
		n.controller, err = StartDaemonCtl(n.OVNRun, "ovn-controller", 1002, map[string]Command{
			"connection-status": func([]string) (string, error) {
				n.mu.Lock()
				defer n.mu.Unlock()
				return n.connected, nil
			},
			"version": func([]string) (string, error) { return "ovn-controller 25.03.1\nOpen vSwitch Library 3.5.2", nil },
		})
		if err != nil {
			return fmt.Errorf("start ovn-controller: %w", err)
		}
	}
	return nil
}

// Stop stops ovsdb-server, ovs-vswitchd and ovn-controller: their sockets
// and pidfiles are gone, as when the ovs-ovn pod is.
func (n *Node) Stop() {
	n.mu.Lock()
	db, vs, ctl := n.db, n.vswitchd, n.controller
	n.db, n.vswitchd, n.controller = nil, nil, nil
	n.mu.Unlock()
	if ctl != nil {
		ctl.Close()
	}
	if vs != nil {
		vs.Close()
	}
	if db != nil {
		db.Close()
	}
}

// Close is Stop, for io.Closer.
func (n *Node) Close() error {
	n.Stop()
	return nil
}
