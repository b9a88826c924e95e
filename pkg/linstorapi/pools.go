package linstorapi

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	lapi "github.com/LINBIT/golinstor/client"
	"github.com/LINBIT/golinstor/devicelayerkind"
)

// StoragePool is one entry of GET /v1/view/storage-pools: golinstor's
// client.StoragePool, and whether the controller sent its capacities.
//
// The controller (linstor-server v1.33.3, View.viewStoragePools ->
// CtrlStorPoolListApiCallHandler.assembleList -> Json.storPoolApiToStoragePool;
// JsonGenTypes.StoragePool is @JsonInclude(NON_EMPTY)) leaves
// free_capacity and total_capacity out (null) while the pool's satellite
// is not online ("not connected" warning in reports), and sends a number,
// 0 included, otherwise. golinstor's int64 fields with omitempty read both
// "absent" and 0 as 0: HasFree and HasTotal keep the difference, so that
// an unknown free capacity is never read as a full pool or as room.
type StoragePool struct {
	lapi.StoragePool
	HasFree, HasTotal bool `json:"-"`
}

// UnmarshalJSON decodes upstream's type, then which capacities are present.
func (p *StoragePool) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &p.StoragePool); err != nil {
		return err
	}
	var aux struct {
		Free  *int64 `json:"free_capacity"`
		Total *int64 `json:"total_capacity"`
	}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	p.HasFree, p.HasTotal = aux.Free != nil, aux.Total != nil
	return nil
}

// StoragePools lists every storage pool of every satellite with its free
// and total capacity (GET /v1/view/storage-pools). Without ?cached=true the
// controller asks the satellites for the current free space of their thin
// pools first (FreeCapacityFetcher.fetchThinFreeSpaceInfo): the answer is
// as of the request, not of the last resource change.
func (c *Client) StoragePools(ctx context.Context) ([]StoragePool, error) {
	var out []StoragePool
	if err := c.get(ctx, "/v1/view/storage-pools", &out); err != nil {
		return nil, err
	}
	return out, nil
}

// ParseStoragePools decodes a /v1/view/storage-pools body.
func ParseStoragePools(body []byte) ([]StoragePool, error) {
	var out []StoragePool
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("decode linstor /v1/view/storage-pools: %w", err)
	}
	return out, nil
}

// PoolClass is what a storage pool's provider kind can take.
type PoolClass int

const (
	// PoolThick: space is allocated in full when a volume is created
	// (LVM, ZFS, FILE, SPDK, REMOTE_SPDK, EBS_TARGET, STORAGE_SPACES).
	PoolThick PoolClass = iota
	// PoolThin: space is allocated as data is written (the provider kinds
	// with usesThinProvisioning in DeviceProviderKind.java of
	// linstor-server v1.33.3: LVM_THIN, ZFS_THIN, FILE_THIN,
	// STORAGE_SPACES_THIN).
	PoolThin
	// PoolNoData: the pool holds no data (DISKLESS: DRBD clients and
	// tie-breakers; EBS_INIT: an initiator of a remote volume).
	PoolNoData
	// PoolKindUnknown: a provider kind LINSTOR 1.33 does not send.
	PoolKindUnknown
)

// PoolClassOf classifies a provider kind.
func PoolClassOf(kind string) PoolClass {
	switch lapi.ProviderKind(kind) {
	case lapi.LVM, lapi.ZFS, lapi.FILE, lapi.SPDK, "REMOTE_SPDK", lapi.EBS_TARGET, "STORAGE_SPACES":
		return PoolThick
	case lapi.LVM_THIN, lapi.ZFS_THIN, lapi.FILE_THIN, "STORAGE_SPACES_THIN":
		return PoolThin
	case lapi.DISKLESS, lapi.EBS_INIT:
		return PoolNoData
	}
	return PoolKindUnknown
}

// PoolRoom is one satellite's storage pool as the drain reads it.
type PoolRoom struct {
	Node, Pool string
	// Kind is the provider kind (LVM_THIN, ...); Class what it takes.
	Kind  string
	Class PoolClass
	// FreeKiB and TotalKiB are free_capacity and total_capacity (KiB);
	// -1 when the controller did not send them (satellite not online).
	// For a thin pool FreeKiB is the pool's unwritten space (LVM:
	// lv_size * (1 - data_percent/100), LvmUtils.getThinFreeSize): the
	// thin volumes already in the pool still grow into it as they are
	// written.
	FreeKiB, TotalKiB int64
	// Error is the message of the pool's first error report ("" none).
	Error string
}

// Rooms lists pools as the drain reads them, sorted by node, then pool.
func Rooms(pools []StoragePool) []PoolRoom {
	out := make([]PoolRoom, 0, len(pools))
	for _, p := range pools {
		if p.NodeName == "" || p.StoragePoolName == "" {
			continue
		}
		r := PoolRoom{Node: p.NodeName, Pool: p.StoragePoolName, Kind: string(p.ProviderKind), Class: PoolClassOf(string(p.ProviderKind)),
			FreeKiB: -1, TotalKiB: -1}
		if p.HasFree {
			r.FreeKiB = p.FreeCapacity
		}
		if p.HasTotal {
			r.TotalKiB = p.TotalCapacity
		}
		for _, rc := range p.Reports {
			if uint64(rc.RetCode)&maskError == maskError {
				r.Error = rc.Message
				break
			}
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Node != out[j].Node {
			return out[i].Node < out[j].Node
		}
		return out[i].Pool < out[j].Pool
	})
	return out
}

// maskError is ApiConsts.MASK_ERROR (golinstor's linstor.MaskError): the
// bits of an ApiCallRc's ret_code that mark an error.
const maskError = 0xC000000000000000

// VolumeSizeKiB is how much a volume of a replica takes in its storage
// pool (KiB), as /v1/view/resources tells it; 0 when it does not. In
// LINSTOR 1.33 the volume's own allocated_size_kib and usable_size_kib are
// not filled in that view (Json.apiToVolume sets allocated only when the
// caller passes it, CtrlRscApiCallHandler.listResources passes null, and
// never sets usable): the sizes are on its layer_data_list, one entry per
// layer (VolumeLayer). The backing storage is the STORAGE layers' (the data
// device, and DRBD's external metadata when it has any): their sizes,
// summed, each the larger of usable and allocated (a thin volume's full
// size, not what is written of it). Without a STORAGE entry, the largest
// size any layer or the volume reports.
func VolumeSizeKiB(v lapi.Volume) int64 {
	var storage, other int64
	for _, l := range v.LayerDataList {
		var alloc, usable int64
		switch d := l.Data.(type) {
		case *lapi.StorageVolume:
			alloc, usable = d.AllocatedSizeKib, d.UsableSizeKib
		case *lapi.DrbdVolume:
			alloc, usable = d.AllocatedSizeKib, d.UsableSizeKib
		case *lapi.LuksVolume:
			alloc, usable = d.AllocatedSizeKib, d.UsableSizeKib
		case *lapi.NvmeVolume:
			alloc, usable = d.AllocatedSizeKib, d.UsableSizeKib
		case *lapi.WritecacheVolume:
			alloc, usable = d.AllocatedSizeKib, d.UsableSizeKib
		case *lapi.CacheVolume:
			alloc, usable = d.AllocatedSizeKib, d.UsableSizeKib
		}
		size := max(alloc, usable, 0)
		if l.Type == devicelayerkind.Storage {
			storage += size
		} else {
			other = max(other, size)
		}
	}
	if storage > 0 {
		return storage
	}
	return max(other, v.UsableSizeKib, 0)
}

// replicaSizeKiB sums VolumeSizeKiB over r's volumes; 0 when some volume's
// size is not known.
func replicaSizeKiB(r ResourceWithVolumes) int64 {
	var sum int64
	for _, v := range r.Volumes {
		s := VolumeSizeKiB(v)
		if s <= 0 {
			return 0
		}
		sum += s
	}
	return sum
}

// Placement is what the drain reads of the controller: every replica,
// every satellite's connection status and storage pools.
type Placement struct {
	Replicas []Replica
	// Satellites is every node of /v1/nodes by name, its connection
	// status; nil when not read.
	Satellites map[string]string
	Pools      []PoolRoom
	// PoolsWhy says why Pools is not known ("" when it was read with
	// Replicas).
	PoolsWhy string
}

// Satellites maps every node of nodes to its connection status.
func Satellites(nodes []Node) map[string]string {
	out := make(map[string]string, len(nodes))
	for _, n := range nodes {
		out[n.Name] = n.ConnectionStatus
	}
	return out
}
