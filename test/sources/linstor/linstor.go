// Package linstor serves the LINSTOR controller's REST API endpoints the
// aggregator reads, GET /v1/nodes, GET /v1/view/resources and GET
// /v1/view/storage-pools, marshalled from upstream's own Go types (golinstor
// v0.63.0's client.Node, client.ResourceWithVolumes and client.StoragePool,
// the API of LINSTOR 1.33) with the query filters (nodes, resources) applied,
// over HTTP or mutual TLS. Node connection status, each replica's disk state
// and each satellite's pool free capacity are settable (the lab's
// linstor-offline and drbd-outdated faults).
package linstor

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"math"
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
	// mu guards nodes (name -> connection status), free (name -> the
	// free capacity of its pool thinpool, KiB) and replicas.
	mu       sync.Mutex
	nodes    map[string]string
	free     map[string]int64
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
	s := &Server{nodes: map[string]string{}, free: map[string]int64{}, minor: 1000, requests: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/nodes", s.listNodes)
	mux.HandleFunc("GET /v1/view/resources", s.viewResources)
	mux.HandleFunc("GET /v1/view/storage-pools", s.viewStoragePools)
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

// Every satellite has two storage pools, as a Piraeus satellite with one
// LVM thin pool has: DfltDisklessStorPool (DISKLESS) and thinpool
// (LVM_THIN, PoolTotalKiB), which every diskful replica is in.
const (
	PoolThin     = "thinpool"
	PoolDiskless = "DfltDisklessStorPool"
	// PoolTotalKiB is thinpool's total capacity: 1 TiB.
	PoolTotalKiB = int64(1) << 30
	// DefaultFreeKiB is thinpool's free capacity unless SetPoolFree says
	// otherwise: 512 GiB, room for any replica of the stand-in (about
	// 0.5 GiB each).
	DefaultFreeKiB = int64(1) << 29
	// ReplicaSizeKiB is what each diskful replica's one volume takes in
	// thinpool (its STORAGE layer's usable size).
	ReplicaSizeKiB = int64(516096)
)

// SetPoolFree sets the free capacity of node's pool thinpool (KiB); a
// negative value leaves it out of the answer, as the controller does when
// it does not know it.
func (s *Server) SetPoolFree(node string, kib int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.free[node] = kib
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
		VolumeNumber:    0,
		StoragePoolName: pool,
		ProviderKind:    provider,
		DevicePath:      dev,
		// No allocated_size_kib nor usable_size_kib on the volume itself:
		// LINSTOR 1.33's /v1/view/resources fills neither
		// (CtrlRscApiCallHandler.listResources passes no allocated size
		// to Json.apiToVolume, which never sets usable); the sizes are on
		// the layers.
		LayerDataList: []lapi.VolumeLayer{
			{Type: devicelayerkind.Drbd, Data: &lapi.DrbdVolume{
				DrbdVolumeDefinition: lapi.DrbdVolumeDefinition{VolumeNumber: 0, MinorNumber: minor},
				DevicePath:           dev, BackingDevice: backing, AllocatedSizeKib: 512148, UsableSizeKib: 512000,
			}},
			{Type: devicelayerkind.Storage, Data: &lapi.StorageVolume{
				VolumeNumber: 0, DevicePath: backing, AllocatedSizeKib: ReplicaSizeKiB, UsableSizeKib: ReplicaSizeKiB, DiskState: "[]",
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

// poolOut is a StoragePool whose capacities are sent when known, 0
// included: the controller's JsonGenTypes.StoragePool (linstor-server
// v1.33.3) holds them as nullable Longs, so a full pool says 0, where
// golinstor's int64 with omitempty would leave a 0 out.
type poolOut struct {
	lapi.StoragePool
	FreeCapacity  *int64 `json:"free_capacity,omitempty"`
	TotalCapacity *int64 `json:"total_capacity,omitempty"`
}

// warnNotConnected is ApiConsts.WARN_NOT_CONNECTED: 1002 | MASK_WARN
// (0x8000000000000000), as a signed ret_code.
const warnNotConnected = math.MinInt64 | 1002

// viewStoragePools answers GET /v1/view/storage-pools as
// Json.storPoolApiToStoragePool fills it: a satellite that is not ONLINE
// has no capacities and a "not connected" warning
// (CtrlStorPoolListApiCallHandler.assembleList,
// ResponseUtils.makeNotConnectedWarning).
func (s *Server) viewStoragePools(w http.ResponseWriter, r *http.Request) {
	s.count(r)
	if s.Fault.Apply(w, r) {
		return
	}
	q := r.URL.Query()
	nodes, pools := q["nodes"], q["storage_pools"]
	s.mu.Lock()
	var names []string
	for n := range s.nodes {
		if len(nodes) == 0 || slices.Contains(nodes, n) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	out := []poolOut{}
	for i, n := range names {
		for _, name := range []string{PoolDiskless, PoolThin} {
			if len(pools) > 0 && !slices.Contains(pools, name) {
				continue
			}
			p := poolOut{StoragePool: lapi.StoragePool{StoragePoolName: name, NodeName: n, ProviderKind: lapi.DISKLESS,
				StaticTraits: map[string]string{"SupportsSnapshots": "false"}, FreeSpaceMgrName: n + ";" + name,
				Uuid: fmt.Sprintf("5e1f0a2b-0000-4000-8000-%06d%06d", i, len(out)), Props: map[string]string{}}}
			free, total := int64(math.MaxInt64), int64(math.MaxInt64)
			if name == PoolThin {
				p.ProviderKind = lapi.LVM_THIN
				p.Props = map[string]string{"StorDriver/LvmVg": "linstor_thinpool", "StorDriver/ThinPool": "thinpool", "StorDriver/StorPoolName": "linstor_thinpool/thinpool"}
				p.StaticTraits = map[string]string{"Provisioning": "Thin", "SupportsSnapshots": "true"}
				p.SupportsSnapshots = true
				free, total = DefaultFreeKiB, PoolTotalKiB
				if f, ok := s.free[n]; ok {
					free = f
				}
			}
			if s.nodes[n] == "ONLINE" {
				if free >= 0 {
					p.FreeCapacity = &free
				}
				p.TotalCapacity = &total
			} else {
				p.Reports = []lapi.ApiCallRc{{RetCode: warnNotConnected, Message: fmt.Sprintf("No active connection to satellite '%s'", n),
					ObjRefs: map[string]string{"Node": n}}}
			}
			out = append(out, p)
		}
	}
	s.mu.Unlock()
	writeJSON(w, out)
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
