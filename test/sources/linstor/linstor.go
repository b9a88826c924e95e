// Package linstor serves the LINSTOR controller's REST API endpoints the
// aggregator reads, GET /v1/nodes and GET /v1/view/resources, marshalled
// from upstream's own Go types (golinstor v0.63.0's client.Node and
// client.ResourceWithVolumes, the API of LINSTOR 1.33) with the query
// filters (nodes, resources) applied, over HTTP or mutual TLS. Node connection
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

	lapi "github.com/LINBIT/golinstor/client"
	"github.com/LINBIT/golinstor/devicelayerkind"

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
	// StandAlone lists the peers this replica is StandAlone toward (DRBD
	// gave up the connection: a split brain, or a disconnect by hand).
	StandAlone []string
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
	// requests counts requests by path.
	requests map[string]int
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
	s := &Server{nodes: map[string]string{}, minor: 1000, requests: map[string]int{}}
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

// SetStandAlone makes the replica of resource on node StandAlone toward
// every peer, and every peer StandAlone toward it (a split brain as DRBD
// leaves it: both sides disconnect after detecting it), or, with on
// false, connected again.
func (s *Server) SetStandAlone(resource, node string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, r := range s.replicas {
		if r.Resource != resource {
			continue
		}
		var peers []string
		if r.Node == node {
			for _, p := range s.replicas {
				if p.Resource == resource && p.Node != node {
					peers = append(peers, p.Node)
				}
			}
		} else {
			peers = []string{node}
		}
		for _, p := range peers {
			if on && !slices.Contains(s.replicas[i].StandAlone, p) {
				s.replicas[i].StandAlone = append(s.replicas[i].StandAlone, p)
			}
			if !on {
				s.replicas[i].StandAlone = slices.DeleteFunc(s.replicas[i].StandAlone, func(x string) bool { return x == p })
			}
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
	s.count(r)
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
	out := make([]lapi.Node, 0, len(names))
	for i, n := range names {
		out = append(out, lapi.Node{
			Name:  n,
			Type:  "SATELLITE",
			Flags: []string{},
			Props: map[string]string{"CurStltConnName": "default", "NodeUname": n},
			NetInterfaces: []lapi.NetInterface{{
				Name: "default", Address: net.IPv4(10, 0, 0, byte(10+i)), SatellitePort: 3367,
				SatelliteEncryptionType: "SSL", IsActive: true, Uuid: fmt.Sprintf("4a3c2b1e-0000-4000-8000-%012d", i),
			}},
			ConnectionStatus:     s.nodes[n],
			Uuid:                 fmt.Sprintf("9d6b2c8e-0000-4000-8000-%012d", i),
			StorageProviders:     []lapi.ProviderKind{lapi.DISKLESS, lapi.LVM, lapi.LVM_THIN, lapi.FILE, lapi.FILE_THIN},
			ResourceLayers:       []devicelayerkind.DeviceLayerKind{devicelayerkind.Drbd, devicelayerkind.Luks, devicelayerkind.Nvme, devicelayerkind.Writecache, devicelayerkind.Cache, devicelayerkind.Bcache, devicelayerkind.Storage},
			UnsupportedProviders: map[lapi.ProviderKind][]string{lapi.ZFS: {"'cat /sys/module/zfs/version' returned with exit code 1"}},
			UnsupportedLayers:    map[devicelayerkind.DeviceLayerKind][]string{},
		})
	}
	s.mu.Unlock()
	writeJSON(w, out)
}

func (s *Server) viewResources(w http.ResponseWriter, r *http.Request) {
	s.count(r)
	if s.Fault.Apply(w, r) {
		return
	}
	q := r.URL.Query()
	nodes, resources := q["nodes"], q["resources"]
	s.mu.Lock()
	out := []resourceOut{}
	for i, rep := range s.replicas {
		if len(nodes) > 0 && !slices.Contains(nodes, rep.Node) || len(resources) > 0 && !slices.Contains(resources, rep.Resource) {
			continue
		}
		out = append(out, s.resource(i, rep))
	}
	s.mu.Unlock()
	writeJSON(w, out)
}

// resourceOut is a ResourceWithVolumes with the volumes' replication
// states, which golinstor v0.63.0's VolumeState lacks (VolumeState of
// linstor-server v1.33.3 docs/rest_v1_openapi.yaml: disk_state,
// replication_states): the shallower Volumes field shadows the embedded
// one in encoding/json.
type resourceOut struct {
	lapi.ResourceWithVolumes
	Volumes []volumeOut `json:"volumes,omitempty"`
}

type volumeOut struct {
	lapi.Volume
	State *volumeStateOut `json:"state,omitempty"`
}

// replicationState is the OpenAPI schema ReplicationState (the
// controller's Json.apiToVolumeState).
type replicationState struct {
	ReplicationState string   `json:"replication_state,omitempty"`
	DonePercentage   *float64 `json:"done_percentage,omitempty"`
}

type volumeStateOut struct {
	DiskState         string                      `json:"disk_state,omitempty"`
	ReplicationStates map[string]replicationState `json:"replication_states,omitempty"`
}

// resource renders one ResourceWithVolumes as the controller fills it
// (cf. the golinstor fixture in shared/reference/samples;
// Json.apiToResourceWithVolumes of linstor-server v1.33.3). The volume
// state and the DRBD connections are left out while the node's satellite
// is not ONLINE: the controller holds no satellite state for it then
// (Json.apiToVolumeState). A diskful replica whose disk state is Diskless
// has detached its disk: the controller then sets DrbdOptions/SkipDisk
// (StateSequenceDetector.java). s.mu held.
func (s *Server) resource(i int, rep Replica) resourceOut {
	flags := []string{}
	provider, pool := lapi.LVM_THIN, "thinpool"
	if rep.Diskless {
		flags = []string{"DRBD_DISKLESS", "DISKLESS"}
		provider, pool = lapi.DISKLESS, "DfltDisklessStorPool"
	}
	minor := int32(s.minor + i)
	dev := fmt.Sprintf("/dev/drbd%d", minor)
	backing := "/dev/linstor_thinpool/" + rep.Resource + "_00000"
	vol := lapi.Volume{
		VolumeNumber:     0,
		StoragePoolName:  pool,
		ProviderKind:     provider,
		DevicePath:       dev,
		AllocatedSizeKib: 206,
		LayerDataList: []lapi.VolumeLayer{
			{Type: devicelayerkind.Drbd, Data: &lapi.DrbdVolume{
				DrbdVolumeDefinition: lapi.DrbdVolumeDefinition{VolumeNumber: 0, MinorNumber: minor},
				DevicePath:           dev, BackingDevice: backing, AllocatedSizeKib: 512148, UsableSizeKib: 512000,
			}},
			{Type: devicelayerkind.Storage, Data: &lapi.StorageVolume{
				VolumeNumber: 0, DevicePath: backing, AllocatedSizeKib: 516096, UsableSizeKib: 516096, DiskState: "[]",
			}},
		},
		Uuid: fmt.Sprintf("03b8ffd6-0000-4000-8000-%012d", i),
	}
	online := s.nodes[rep.Node] == "ONLINE"
	var state *volumeStateOut
	var conns map[string]lapi.DrbdConnection
	props := map[string]string{"StorPoolName": pool}
	if online {
		state = &volumeStateOut{DiskState: rep.DiskState, ReplicationStates: map[string]replicationState{}}
		conns = map[string]lapi.DrbdConnection{}
		for _, peer := range s.replicas {
			if peer.Resource != rep.Resource || peer.Node == rep.Node {
				continue
			}
			msg, repl := "Connected", "Established"
			switch {
			case slices.Contains(rep.StandAlone, peer.Node):
				msg, repl = "StandAlone", "Off"
			case s.nodes[peer.Node] != "ONLINE":
				msg, repl = "Connecting", "Off"
			}
			conns[peer.Node] = lapi.DrbdConnection{Connected: msg == "Connected", Message: msg}
			state.ReplicationStates[peer.Node] = replicationState{ReplicationState: repl}
		}
	}
	if !rep.Diskless && rep.DiskState == "Diskless" {
		props["DrbdOptions/SkipDisk"] = "True"
	}
	inUse := false
	created := lapi.TimeStampMs{Time: time.UnixMilli(1622636098831)}
	return resourceOut{ResourceWithVolumes: lapi.ResourceWithVolumes{
		Resource: lapi.Resource{
			Name:     rep.Resource,
			NodeName: rep.Node,
			Props:    props,
			Flags:    flags,
			LayerObject: &lapi.ResourceLayer{
				Children: []lapi.ResourceLayer{{Type: devicelayerkind.Storage, Storage: &lapi.StorageResource{
					StorageVolumes: []lapi.StorageVolume{{VolumeNumber: 0, DevicePath: backing, AllocatedSizeKib: 516096, UsableSizeKib: 516096, DiskState: "[]"}},
				}}},
				Type: devicelayerkind.Drbd,
				Drbd: &lapi.DrbdResource{
					DrbdResourceDefinition: lapi.DrbdResourceDefinitionLayer{PeerSlots: 7, AlStripes: 1, Port: int32(7000 + i), TransportType: "IP", Secret: "redacted"},
					NodeId:                 int32(i % 8),
					PeerSlots:              7,
					AlStripes:              1,
					AlSize:                 32,
					DrbdVolumes:            []lapi.DrbdVolume{{DrbdVolumeDefinition: lapi.DrbdVolumeDefinition{VolumeNumber: 0, MinorNumber: minor}, DevicePath: dev, AllocatedSizeKib: 512148, UsableSizeKib: 512000}},
					Connections:            conns,
					PromotionScore:         10102,
					MayPromote:             !rep.Diskless,
				},
			},
			State: &lapi.ResourceState{InUse: &inUse},
			Uuid:  fmt.Sprintf("78f0d7fe-0000-4000-8000-%012d", i),
		},
		CreateTimestamp: &created,
	}, Volumes: []volumeOut{{Volume: vol, State: state}}}
}

// count records one request by path.
func (s *Server) count(r *http.Request) {
	s.mu.Lock()
	s.requests[r.URL.Path]++
	s.mu.Unlock()
}

// Requests is how many requests each path was asked since the start.
func (s *Server) Requests() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.requests))
	for k, v := range s.requests {
		out[k] = v
	}
	return out
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
