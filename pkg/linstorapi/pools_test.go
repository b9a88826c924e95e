package linstorapi

import (
	"encoding/json"
	"math"
	"testing"

	lapi "github.com/LINBIT/golinstor/client"
	"github.com/LINBIT/golinstor/devicelayerkind"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// upstreamPool is a storage pool as the controller serializes it:
// JsonGenTypes.StoragePool of linstor-server v1.33.3
// (controller/.../api/rest/v1/serializer/JsonGenTypes.java, filled by
// Json.storPoolApiToStoragePool) is @JsonInclude(NON_EMPTY) with nullable
// Long capacities: a null is left out, a 0 is sent. golinstor v0.63.0's
// StoragePool (int64, omitempty) cannot send a 0, so the capacities shadow
// it here.
type upstreamPool struct {
	lapi.StoragePool
	FreeCapacity  *int64 `json:"free_capacity,omitempty"`
	TotalCapacity *int64 `json:"total_capacity,omitempty"`
}

func kib(v int64) *int64 { return &v }

// TestParseStoragePools decodes a /v1/view/storage-pools body of the shape
// LINSTOR 1.33.3 sends (View.viewStoragePools ->
// CtrlStorPoolListApiCallHandler.assembleList): a DISKLESS pool (the
// satellite reports Long.MAX_VALUE for it, DisklessProvider
// DEFAULT_DISKLESS_SPACE_INFO), a thick LVM pool, a thin pool with no room
// left (free 0, sent), a pool of a satellite that is not connected (no
// capacities, the WARN_NOT_CONNECTED report), a pool in error and a
// provider kind 1.33 does not know.
func TestParseStoragePools(t *testing.T) {
	body, err := json.Marshal([]upstreamPool{
		{StoragePool: lapi.StoragePool{StoragePoolName: "DfltDisklessStorPool", NodeName: "node-1", ProviderKind: lapi.DISKLESS,
			StaticTraits: map[string]string{"SupportsSnapshots": "false"}, FreeSpaceMgrName: "node-1;DfltDisklessStorPool", Uuid: "u1"},
			FreeCapacity: kib(math.MaxInt64), TotalCapacity: kib(math.MaxInt64)},
		{StoragePool: lapi.StoragePool{StoragePoolName: "lvm-thick", NodeName: "node-1", ProviderKind: lapi.LVM,
			Props: map[string]string{"StorDriver/LvmVg": "data"}, StaticTraits: map[string]string{"Provisioning": "Fat"}, Uuid: "u2"},
			FreeCapacity: kib(10 << 20), TotalCapacity: kib(100 << 20)},
		{StoragePool: lapi.StoragePool{StoragePoolName: "lvm-thin", NodeName: "node-2", ProviderKind: lapi.LVM_THIN,
			StaticTraits: map[string]string{"Provisioning": "Thin"}, SupportsSnapshots: true, Uuid: "u3"},
			FreeCapacity: kib(0), TotalCapacity: kib(100 << 20)},
		{StoragePool: lapi.StoragePool{StoragePoolName: "lvm-thin", NodeName: "node-3", ProviderKind: lapi.LVM_THIN, Uuid: "u4",
			Reports: []lapi.ApiCallRc{{RetCode: math.MinInt64 | 1002, Message: "No active connection to satellite 'node-3'"}}}},
		{StoragePool: lapi.StoragePool{StoragePoolName: "zfs", NodeName: "node-4", ProviderKind: lapi.ZFS_THIN, Uuid: "u5",
			Reports: []lapi.ApiCallRc{{RetCode: math.MinInt64 | 0x4000000000000000 | 0x140000 | 4, Message: "Storage pool 'zfs' failed"}}},
			FreeCapacity: kib(5 << 20), TotalCapacity: kib(8 << 20)},
		{StoragePool: lapi.StoragePool{StoragePoolName: "exos", NodeName: "node-4", ProviderKind: "EXOS", Uuid: "u6"}, FreeCapacity: kib(1)},
	})
	require.NoError(t, err)
	pools, err := ParseStoragePools(body)
	require.NoError(t, err)
	require.Len(t, pools, 6)
	assert.Equal(t, "lvm-thin", pools[2].StoragePoolName, "golinstor's own type")
	assert.Equal(t, lapi.LVM_THIN, pools[2].ProviderKind)
	assert.True(t, pools[2].HasFree, "free 0 is sent: a full pool, not an unknown one")
	assert.False(t, pools[3].HasFree)
	assert.False(t, pools[3].HasTotal)

	assert.Equal(t, []PoolRoom{
		{Node: "node-1", Pool: "DfltDisklessStorPool", Kind: "DISKLESS", Class: PoolNoData, FreeKiB: math.MaxInt64, TotalKiB: math.MaxInt64},
		{Node: "node-1", Pool: "lvm-thick", Kind: "LVM", Class: PoolThick, FreeKiB: 10 << 20, TotalKiB: 100 << 20},
		{Node: "node-2", Pool: "lvm-thin", Kind: "LVM_THIN", Class: PoolThin, FreeKiB: 0, TotalKiB: 100 << 20},
		{Node: "node-3", Pool: "lvm-thin", Kind: "LVM_THIN", Class: PoolThin, FreeKiB: -1, TotalKiB: -1},
		{Node: "node-4", Pool: "exos", Kind: "EXOS", Class: PoolKindUnknown, FreeKiB: 1, TotalKiB: -1},
		{Node: "node-4", Pool: "zfs", Kind: "ZFS_THIN", Class: PoolThin, FreeKiB: 5 << 20, TotalKiB: 8 << 20, Error: "Storage pool 'zfs' failed"},
	}, Rooms(pools))

	_, err = ParseStoragePools([]byte(`{"storage_pool_name": "not a list"}`))
	require.ErrorContains(t, err, "decode linstor /v1/view/storage-pools")
	_, err = ParseStoragePools([]byte(`[{"free_capacity": "lots"}]`))
	require.Error(t, err)
}

func TestPoolClassOf(t *testing.T) {
	// Every provider kind of DeviceProviderKind.java (linstor-server
	// v1.33.3), by its usesThinProvisioning flag; DISKLESS and EBS_INIT
	// take no data.
	for kind, want := range map[string]PoolClass{
		"DISKLESS": PoolNoData, "LVM": PoolThick, "LVM_THIN": PoolThin, "ZFS": PoolThick, "ZFS_THIN": PoolThin,
		"FILE": PoolThick, "FILE_THIN": PoolThin, "SPDK": PoolThick, "REMOTE_SPDK": PoolThick, "EBS_INIT": PoolNoData,
		"EBS_TARGET": PoolThick, "STORAGE_SPACES": PoolThick, "STORAGE_SPACES_THIN": PoolThin,
		"": PoolKindUnknown, "EXOS": PoolKindUnknown,
	} {
		assert.Equal(t, want, PoolClassOf(kind), kind)
	}
}

func TestVolumeSizeKiB(t *testing.T) {
	storage := func(usable, alloc int64) lapi.VolumeLayer {
		return lapi.VolumeLayer{Type: devicelayerkind.Storage, Data: &lapi.StorageVolume{UsableSizeKib: usable, AllocatedSizeKib: alloc}}
	}
	drbd := lapi.VolumeLayer{Type: devicelayerkind.Drbd, Data: &lapi.DrbdVolume{UsableSizeKib: 512000, AllocatedSizeKib: 512148}}
	cases := []struct {
		name string
		v    lapi.Volume
		want int64
	}{
		{"thick: the storage layer", lapi.Volume{LayerDataList: []lapi.VolumeLayer{drbd, storage(516096, 516096)}}, 516096},
		{"thin, little written: the full size", lapi.Volume{AllocatedSizeKib: 206, LayerDataList: []lapi.VolumeLayer{drbd, storage(516096, 206)}}, 516096},
		{"external metadata: both storage layers", lapi.Volume{LayerDataList: []lapi.VolumeLayer{drbd, storage(512000, 512000), storage(4096, 4096)}}, 516096},
		{"no storage layer: the largest other", lapi.Volume{LayerDataList: []lapi.VolumeLayer{drbd}}, 512148},
		{"no layers: the volume's usable size", lapi.Volume{UsableSizeKib: 1000, AllocatedSizeKib: 2}, 1000},
		{"nothing: unknown", lapi.Volume{AllocatedSizeKib: 206}, 0},
		{"uninitialized sizes (-1): unknown", lapi.Volume{LayerDataList: []lapi.VolumeLayer{storage(-1, -1)}}, 0},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, VolumeSizeKiB(tc.v), tc.name)
	}
	r := ResourceWithVolumes{Volumes: []lapi.Volume{cases[0].v, cases[2].v}}
	assert.Equal(t, int64(2*516096), replicaSizeKiB(r))
	r.Volumes = append(r.Volumes, cases[5].v)
	assert.Zero(t, replicaSizeKiB(r), "one volume's size unknown: the replica's is")
}
