// Package adapters lists every cluster adapter in one table. Adding an
// adapter is one line here plus its package under adapters/ (the
// aggregator's RBAC for its sources is generated from this table: rbac.go,
// make generate; CONTRIBUTING.md lists every file); the kit
// they are built from (aggregator/internal/adapterkit) holds the Adapter
// interface and the Manager that owns informers, deadlines, applicability
// and publishing.
package adapters

import (
	"github.com/cozystack/cozy-health/aggregator/internal/adapterkit"
	"github.com/cozystack/cozy-health/aggregator/internal/adapters/cnpg"
	"github.com/cozystack/cozy-health/aggregator/internal/adapters/cozybackup"
	"github.com/cozystack/cozy-health/aggregator/internal/adapters/helmrelease"
	"github.com/cozystack/cozy-health/aggregator/internal/adapters/kamaji"
	"github.com/cozystack/cozy-health/aggregator/internal/adapters/velero"
	"github.com/cozystack/cozy-health/aggregator/internal/adapters/workloadmonitor"
)

// All returns every adapter, in the order their findings are merged.
func All() []adapterkit.Adapter {
	return []adapterkit.Adapter{
		helmrelease.New(),     // platform / apps: Flux HelmReleases and their root causes
		workloadmonitor.New(), // platform / apps: Cozystack WorkloadMonitors
		cnpg.New(),            // backups: CNPG Clusters, Backups, ScheduledBackups, barman-cloud ObjectStores
		cozybackup.New(),      // backups: backups.cozystack.io Plans and BackupJobs
		velero.New(),          // backups: velero Schedules and Backups
		kamaji.New(),          // control-plane: TenantControlPlanes, DataStores, their etcd
	}
}
