package ovs

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
)

// Interface is one row of the Open_vSwitch database's Interface table.
type Interface struct {
	// Name is the interface name (e.g. "3f1a2b_h" for a pod's veth, as
	// kube-ovn names them, or "ovn0", "genev_sys_6081").
	Name string
	// Type is "" for a system interface, "internal", "geneve", ...
	Type string
	// OFPort is the OpenFlow port; -1 when ovs-vswitchd failed to add it.
	OFPort int
	// Error is set by ovs-vswitchd when the interface could not be
	// configured, e.g. "could not open network device 3f1a2b_h (No such
	// device)" for the port of a pod that no longer exists.
	Error string
	// LinkState and AdminState are "up" / "down"; "" leaves them unset.
	LinkState, AdminState string
	// ExternalIDs as kube-ovn sets them on a pod's port: iface-id
	// (<pod>.<namespace>), pod_name, pod_namespace, ip.
	ExternalIDs map[string]string
}

// OVSDB is an ovsdb-server stand-in serving the Open_vSwitch database.
type OVSDB struct {
	// Path is the socket path.
	Path string

	srv *rpcServer

	mu         sync.Mutex // guards the tables
	root       map[string]any
	interfaces map[string]Interface
}

// StartOVSDB serves the Open_vSwitch database at path for host. Its root
// row carries ovs_version and the external_ids kube-ovn's ovs-ovn sets.
func StartOVSDB(path, host string) (*OVSDB, error) {
	o := &OVSDB{Path: path, interfaces: map[string]Interface{}}
	o.root = map[string]any{
		"_uuid":       []any{"uuid", newUUID()},
		"ovs_version": "3.5.2",
		"db_version":  "8.8.0",
		"cur_cfg":     42,
		"next_cfg":    42,
		"system_type": "ubuntu",
		"external_ids": ovsMap(map[string]string{
			"hostname": host, "system-id": host, "rundir": "/var/run/openvswitch",
			"ovn-encap-type": "geneve", "ovn-remote": "tcp:[10.0.0.11]:6642,tcp:[10.0.0.12]:6642,tcp:[10.0.0.13]:6642",
		}),
	}
	for _, i := range []Interface{
		{Name: "br-int", Type: "internal", OFPort: 65534, LinkState: "down", AdminState: "down"},
		{Name: "ovn0", Type: "internal", OFPort: 1, LinkState: "up", AdminState: "up", ExternalIDs: map[string]string{"iface-id": "node-" + host, "ip": "100.64.0.2"}},
		{Name: "genev_sys_6081", Type: "geneve", OFPort: 2, LinkState: "up", AdminState: "up"},
		{Name: "7d3c6f4e1a2b_h", OFPort: 3, LinkState: "up", AdminState: "up", ExternalIDs: map[string]string{
			"iface-id": "coredns-5d78c9869d-8xq2k.kube-system", "pod_name": "coredns-5d78c9869d-8xq2k", "pod_namespace": "kube-system", "ip": "10.244.0.7"}},
	} {
		o.interfaces[i.Name] = i
	}
	srv, err := listenRPC(path, o.handle)
	if err != nil {
		return nil, fmt.Errorf("ovsdb-server stand-in: %w", err)
	}
	o.srv = srv
	return o, nil
}

// SetInterface adds or replaces an interface row by name.
func (o *OVSDB) SetInterface(i Interface) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.interfaces[i.Name] = i
}

// DeleteInterface removes an interface row.
func (o *OVSDB) DeleteInterface(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.interfaces, name)
}

// SetHang makes ovsdb-server accept and read requests but never answer.
func (o *OVSDB) SetHang(h bool) { o.srv.hang.Store(h) }

// Close stops serving and removes the socket, as ovsdb-server exiting does.
func (o *OVSDB) Close() { o.srv.close() }

// ovsdbError is RFC 7047's error object.
func ovsdbError(err, details string) map[string]any {
	return map[string]any{"error": err, "details": details}
}

func (o *OVSDB) handle(method string, raw json.RawMessage) (any, any) {
	ps, err := params(raw)
	if err != nil {
		return nil, ovsdbError("syntax error", err.Error())
	}
	switch method {
	case "list_dbs":
		return []string{"Open_vSwitch", "_Server"}, nil
	case "echo":
		var out []any
		_ = json.Unmarshal(raw, &out)
		return out, nil
	case "transact":
		return o.transact(ps)
	}
	return nil, ovsdbError("unknown method", fmt.Sprintf("%q is not a valid method", method))
}

type selectOp struct {
	Op      string            `json:"op"`
	Table   string            `json:"table"`
	Where   []json.RawMessage `json:"where"`
	Columns []string          `json:"columns"`
}

// transact answers RFC 7047 4.1.3: one result per operation; an operation
// that fails gets an error object and the ones after it are not run.
func (o *OVSDB) transact(ps []json.RawMessage) (any, any) {
	if len(ps) == 0 {
		return nil, ovsdbError("syntax error", "transact needs a database name")
	}
	var db string
	if err := json.Unmarshal(ps[0], &db); err != nil {
		return nil, ovsdbError("syntax error", "database name is not a string")
	}
	if db != "Open_vSwitch" {
		return nil, ovsdbError("unknown database", fmt.Sprintf("%s is not a valid database", db))
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	results := make([]any, 0, len(ps)-1)
	for _, raw := range ps[1:] {
		var op selectOp
		if err := json.Unmarshal(raw, &op); err != nil {
			results = append(results, ovsdbError("syntax error", err.Error()))
			return results, nil
		}
		if op.Op != "select" {
			results = append(results, ovsdbError("not supported", "this stand-in answers select only"))
			return results, nil
		}
		if len(op.Where) > 0 {
			results = append(results, ovsdbError("not supported", "this stand-in answers select with an empty where only"))
			return results, nil
		}
		var rows []map[string]any
		switch op.Table {
		case "Open_vSwitch":
			rows = []map[string]any{o.root}
		case "Interface":
			names := make([]string, 0, len(o.interfaces))
			for n := range o.interfaces {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				rows = append(rows, interfaceRow(o.interfaces[n]))
			}
		default:
			results = append(results, ovsdbError("unknown table", fmt.Sprintf("no table named %s", op.Table)))
			return results, nil
		}
		out := make([]map[string]any, 0, len(rows))
		for _, r := range rows {
			out = append(out, project(r, op.Columns))
		}
		results = append(results, map[string]any{"rows": out})
	}
	return results, nil
}

func project(row map[string]any, columns []string) map[string]any {
	if columns == nil {
		return row
	}
	out := make(map[string]any, len(columns))
	for _, c := range columns {
		if v, ok := row[c]; ok {
			out[c] = v
		}
	}
	return out
}

func interfaceRow(i Interface) map[string]any {
	ofport := any(i.OFPort)
	if i.Error != "" {
		ofport = -1
	}
	return map[string]any{
		"_uuid":        []any{"uuid", uuidFor(i.Name)},
		"name":         i.Name,
		"type":         i.Type,
		"ofport":       ofport,
		"error":        optional(i.Error),
		"link_state":   optional(i.LinkState),
		"admin_state":  optional(i.AdminState),
		"external_ids": ovsMap(i.ExternalIDs),
	}
}

// optional is an RFC 7047 value of a column with min 0, max 1: the atom, or
// the empty set.
func optional(s string) any {
	if s == "" {
		return []any{"set", []any{}}
	}
	return s
}

func ovsMap(m map[string]string) any {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	pairs := make([]any, 0, len(keys))
	for _, k := range keys {
		pairs = append(pairs, []any{k, m[k]})
	}
	return []any{"map", pairs}
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// uuidFor is a stable UUID for a name, so a row keeps its _uuid.
func uuidFor(name string) string {
	var b [16]byte
	for i := 0; i < len(name); i++ {
		b[i%16] ^= name[i] + byte(i)
	}
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
