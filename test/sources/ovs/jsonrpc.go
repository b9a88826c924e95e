// Package ovs serves Open vSwitch's and OVN's local sockets in their real
// protocols, for tests and the lab:
//
//   - OVSDB: ovsdb-server's management protocol (RFC 7047, JSON-RPC 1.0 over
//     a unix socket, the ovs-ovn pod's /run/openvswitch/db.sock) answering
//     list_dbs, echo and transact "select" on the Open_vSwitch and
//     Interface tables, with values in RFC 7047's JSON notation (atoms,
//     ["set", [...]], ["map", [[k, v], ...]], ["uuid", "..."]).
//   - Unixctl: the control socket of an OVS/OVN daemon (ovs-vswitchd's
//     <rundir>/ovs-vswitchd.<pid>.ctl, ovn-controller's, ovsdb-server's
//     ovnnb_db.ctl / ovnsb_db.ctl), answering commands as lib/unixctl.c
//     does: {"result": "<text ending in a newline>", "error": null} or
//     {"result": null, "error": "<text>"}, one request at a time.
//   - Cluster: an OVN clustered database (OVN_Northbound / OVN_Southbound)
//     across nodes, whose members answer `cluster/status <db>` with the text
//     ovsdb/raft.c's raft_unixctl_status prints, and lose their leader when a
//     majority of members stops.
//
// Where the shapes come from: RFC 7047 (OVSDB), Open vSwitch lib/unixctl.c
// (unixctl_command_reply__: result/error strings, a trailing newline added)
// and ovsdb/raft.c (raft_unixctl_status, raft_put_sid: "self" / "unknown"),
// and the `kubectl ko nb status` sample in kube-ovn's documentation ("OVN DB
// Backup and Recovery"), which shows the fields in that order:
//
//	9182
//	Name: OVN_Northbound
//	Cluster ID: e75f (e75fa340-49ed-45ab-990e-26cb865ebc85)
//	Server ID: 9182 (9182e8dd-b5b0-4dd8-8518-598cc1e374f3)
//	Address: tcp:[10.0.128.61]:6643
//	Status: cluster member
//	Role: leader
//	Term: 1454
//	Leader: self
//	Vote: self
//
//	Last Election started 1732603 ms ago, reason: timeout
//	Last Election won: 1732587 ms ago
//	Election timer: 1000
//	Log: [7332, 12512]
//	Entries not yet committed: 1
//	Entries not yet applied: 1
//	Connections: ->f080 <-f080 <-e631 ->e631
//	Disconnections: 1
//	Servers:
//	    f080 (f080 at tcp:[10.0.129.139]:6643) next_index=12512 match_index=12510 last msg 63 ms ago
//	    9182 (9182 at tcp:[10.0.128.61]:6643) (self) next_index=10394 match_index=12510
//	    e631 (e631 at tcp:[10.0.131.173]:6643) next_index=12512 match_index=0
package ovs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
)

// handler answers one request: a result, or an error value (a string for
// unixctl, an object for OVSDB).
type handler func(method string, params json.RawMessage) (result any, rpcErr any)

// rpcServer is a JSON-RPC 1.0 stream server on a unix socket, as OVS speaks
// it: JSON objects back to back, no framing.
type rpcServer struct {
	path string
	ln   net.Listener
	h    handler
	// hang makes the server accept and read but never answer.
	hang atomic.Bool

	mu    sync.Mutex // guards conns
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func listenRPC(path string, h handler) (*rpcServer, error) {
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	s := &rpcServer{path: path, ln: ln, h: h, conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

func (s *rpcServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	}
}

type rpcMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

func (s *rpcServer) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		_ = c.Close()
	}()
	dec := json.NewDecoder(c)
	enc := json.NewEncoder(c)
	for {
		var m rpcMessage
		if err := dec.Decode(&m); err != nil {
			if !errors.Is(err, net.ErrClosed) {
				var se *json.SyntaxError
				if errors.As(err, &se) {
					// ovsdb-server closes a connection that sends bad JSON.
					return
				}
			}
			return
		}
		if s.hang.Load() {
			continue
		}
		if m.Method == "" || len(m.ID) == 0 || bytes.Equal(m.ID, []byte("null")) {
			continue // a reply or a notification: nothing to answer
		}
		res, rpcErr := s.h(m.Method, m.Params)
		reply := map[string]any{"id": m.ID, "result": res, "error": rpcErr}
		if rpcErr != nil {
			reply["result"] = nil
		}
		if err := enc.Encode(reply); err != nil {
			return
		}
	}
}

// close stops listening, removes the socket file (as a daemon exiting
// cleanly does) and drops every connection.
func (s *rpcServer) close() {
	_ = s.ln.Close()
	_ = os.Remove(s.path)
	s.mu.Lock()
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// params decodes a request's params array.
func params(raw json.RawMessage) ([]json.RawMessage, error) {
	var p []json.RawMessage
	if len(raw) == 0 {
		return nil, nil
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("params is not an array: %w", err)
	}
	return p, nil
}
