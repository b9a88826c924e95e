// Package linstor serves the LINSTOR controller's REST API endpoints the
// agent reads, GET /v1/nodes and GET /v1/view/resources, with their real
// JSON shapes (rest_v1_openapi.yaml, LINSTOR 1.33) and the query filters
// (nodes, resources) applied, over HTTP or mutual TLS. Node connection
// status and each replica's disk state are settable (the lab's
// linstor-offline and drbd-outdated faults).
package linstor

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/cozystack/cozy-health/test/sources/fault"
)

// Replica is one resource on one node.
type Replica struct {
	Resource, Node string
	// DiskState is the DRBD disk state; "" omits the volume state (the
	// controller has no satellite state).
	DiskState string
	// Diskless marks a diskless (DRBD client or tie-breaker) replica.
	Diskless bool
}

// Server is a LINSTOR controller stand-in.
type Server struct {
	// URL is the base URL (http:// or https://).
	URL string
	// Fault switches misbehaviour.
	Fault fault.Switch

	srv *http.Server
	// mu guards nodes (name -> connection status) and replicas.
	mu       sync.Mutex
	nodes    map[string]string
	replicas []Replica
	minor    int
}

// Start serves on 127.0.0.1:0 (or addr); with tlsCfg non-nil it serves HTTPS.
func Start(addr string, tlsCfg *tls.Config) (*Server, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("linstor stand-in: listen: %w", err)
	}
	return Serve(ln, tlsCfg), nil
}

// Serve serves on ln, already bound (the lab binds its addresses once and
// hands the listeners over); with tlsCfg non-nil it serves HTTPS. Close
// closes ln.
func Serve(ln net.Listener, tlsCfg *tls.Config) *Server {
	s := &Server{nodes: map[string]string{}, minor: 1000}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/nodes", s.listNodes)
	mux.HandleFunc("GET /v1/view/resources", s.viewResources)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	scheme := "http"
	if tlsCfg != nil {
		scheme = "https"
		ln = tls.NewListener(ln, tlsCfg)
	}
	s.URL = scheme + "://" + ln.Addr().String()
	go func() { _ = s.srv.Serve(ln) }()
	return s
}

// SetNode adds or updates a node's connection status (ONLINE, OFFLINE...).
func (s *Server) SetNode(name, status string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes[name] = status
}

// RemoveNode forgets a node.
func (s *Server) RemoveNode(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.nodes, name)
}

// SetReplica adds or replaces the replica of r.Resource on r.Node.
func (s *Server) SetReplica(r Replica) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, old := range s.replicas {
		if old.Resource == r.Resource && old.Node == r.Node {
			s.replicas[i] = r
			return
		}
	}
	s.replicas = append(s.replicas, r)
}

// SetDiskState sets the disk state of resource on node.
func (s *Server) SetDiskState(resource, node, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, r := range s.replicas {
		if r.Resource == resource && r.Node == node {
			s.replicas[i].DiskState = state
		}
	}
}

// Close stops serving.
func (s *Server) Close() error {
	if err := s.srv.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) {
	if s.Fault.Apply(w, r) {
		return
	}
	filter := r.URL.Query()["nodes"]
	s.mu.Lock()
	var names []string
	for n := range s.nodes {
		if len(filter) == 0 || slices.Contains(filter, n) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	out := make([]map[string]any, 0, len(names))
	for i, n := range names {
		out = append(out, map[string]any{
			"name":  n,
			"type":  "SATELLITE",
			"flags": []string{},
			"props": map[string]string{"CurStltConnName": "default", "NodeUname": n},
			"net_interfaces": []map[string]any{{
				"name": "default", "address": fmt.Sprintf("10.0.0.%d", 10+i), "satellite_port": 3367,
				"satellite_encryption_type": "SSL", "is_active": true, "uuid": fmt.Sprintf("4a3c2b1e-0000-4000-8000-%012d", i),
			}},
			"connection_status":     s.nodes[n],
			"uuid":                  fmt.Sprintf("9d6b2c8e-0000-4000-8000-%012d", i),
			"storage_providers":     []string{"DISKLESS", "LVM", "LVM_THIN", "FILE", "FILE_THIN"},
			"resource_layers":       []string{"DRBD", "LUKS", "NVME", "WRITECACHE", "CACHE", "BCACHE", "STORAGE"},
			"unsupported_providers": map[string][]string{"ZFS": {"'cat /sys/module/zfs/version' returned with exit code 1"}},
			"unsupported_layers":    map[string][]string{},
		})
	}
	s.mu.Unlock()
	writeJSON(w, out)
}

func (s *Server) viewResources(w http.ResponseWriter, r *http.Request) {
	if s.Fault.Apply(w, r) {
		return
	}
	q := r.URL.Query()
	nodes, resources := q["nodes"], q["resources"]
	s.mu.Lock()
	out := []map[string]any{}
	for i, rep := range s.replicas {
		if len(nodes) > 0 && !slices.Contains(nodes, rep.Node) || len(resources) > 0 && !slices.Contains(resources, rep.Resource) {
			continue
		}
		out = append(out, s.resourceJSON(i, rep))
	}
	s.mu.Unlock()
	writeJSON(w, out)
}

// resourceJSON renders one ResourceWithVolumes the way the controller does
// (cf. the golinstor fixture in shared/reference/samples).
func (s *Server) resourceJSON(i int, rep Replica) map[string]any {
	flags := []string{}
	provider, pool := "LVM_THIN", "thinpool"
	if rep.Diskless {
		flags = []string{"DRBD_DISKLESS", "DISKLESS"}
		provider, pool = "DISKLESS", "DfltDisklessStorPool"
	}
	minor := s.minor + i
	dev := fmt.Sprintf("/dev/drbd%d", minor)
	vol := map[string]any{
		"volume_number":      0,
		"storage_pool_name":  pool,
		"provider_kind":      provider,
		"device_path":        dev,
		"allocated_size_kib": 206,
		"layer_data_list": []map[string]any{
			{"type": "DRBD", "data": map[string]any{
				"drbd_volume_definition": map[string]any{"volume_number": 0, "minor_number": minor},
				"device_path":            dev,
				"backing_device":         "/dev/linstor_thinpool/" + rep.Resource + "_00000",
				"allocated_size_kib":     512148,
				"usable_size_kib":        512000,
			}},
			{"type": "STORAGE", "data": map[string]any{
				"volume_number": 0, "device_path": "/dev/linstor_thinpool/" + rep.Resource + "_00000",
				"allocated_size_kib": 516096, "usable_size_kib": 516096, "disk_state": "[]",
			}},
		},
		"uuid": fmt.Sprintf("03b8ffd6-0000-4000-8000-%012d", i),
	}
	if rep.DiskState != "" {
		vol["state"] = map[string]any{"disk_state": rep.DiskState}
	}
	conns := map[string]any{}
	for _, peer := range s.replicas {
		if peer.Resource == rep.Resource && peer.Node != rep.Node {
			ok := s.nodes[peer.Node] == "ONLINE"
			msg := "Connected"
			if !ok {
				msg = "Connecting"
			}
			conns[peer.Node] = map[string]any{"connected": ok, "message": msg}
		}
	}
	return map[string]any{
		"name":      rep.Resource,
		"node_name": rep.Node,
		"props":     map[string]string{"StorPoolName": pool},
		"flags":     flags,
		"layer_object": map[string]any{
			"children": []map[string]any{{"type": "STORAGE", "storage": map[string]any{
				"storage_volumes": []map[string]any{{"volume_number": 0, "device_path": "/dev/linstor_thinpool/" + rep.Resource + "_00000", "allocated_size_kib": 516096, "usable_size_kib": 516096, "disk_state": "[]"}},
			}}},
			"type": "DRBD",
			"drbd": map[string]any{
				"drbd_resource_definition": map[string]any{"peer_slots": 7, "al_stripes": 1, "al_stripe_size_kib": 32, "port": 7000 + i, "transport_type": "IP", "secret": "redacted", "down": false},
				"node_id":                  i % 8,
				"peer_slots":               7,
				"al_stripes":               1,
				"al_size":                  32,
				"drbd_volumes":             []map[string]any{{"drbd_volume_definition": map[string]any{"volume_number": 0, "minor_number": minor}, "device_path": dev, "allocated_size_kib": 512148, "usable_size_kib": 512000}},
				"connections":              conns,
				"promotion_score":          10102,
				"may_promote":              !rep.Diskless,
			},
		},
		"state":            map[string]any{"in_use": false},
		"uuid":             fmt.Sprintf("78f0d7fe-0000-4000-8000-%012d", i),
		"create_timestamp": 1622636098831,
		"volumes":          []map[string]any{vol},
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
