package talosservices

import (
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/stretchr/testify/assert"

	"github.com/cozystack/cozy-health/pkg/report"
)

func svc(id, state string, healthy, unknown bool) *machine.ServiceInfo {
	return &machine.ServiceInfo{Id: id, State: state, Health: &machine.ServiceHealth{Healthy: healthy, Unknown: unknown}}
}

func TestJudge(t *testing.T) {
	for name, tc := range map[string]struct {
		svcs   []*machine.ServiceInfo
		status report.Status
		reason string
	}{
		"worker healthy":         {[]*machine.ServiceInfo{svc("kubelet", "Running", true, false), svc("cri", "Running", true, false)}, report.StatusHealthy, "ServicesHealthy"},
		"kubelet unhealthy":      {[]*machine.ServiceInfo{svc("kubelet", "Running", false, false), svc("cri", "Running", true, false)}, report.StatusDegraded, "ServiceUnhealthy"},
		"cri missing":            {[]*machine.ServiceInfo{svc("kubelet", "Running", true, false)}, report.StatusDown, "ServiceMissing"},
		"cri failed":             {[]*machine.ServiceInfo{svc("kubelet", "Running", true, false), svc("cri", "Failed", false, false)}, report.StatusDown, "ServiceNotRunning"},
		"kubelet health unknown": {[]*machine.ServiceInfo{svc("kubelet", "Running", false, true), svc("cri", "Running", true, false)}, report.StatusUnknown, "ServiceHealthUnknown"},
		// etcd is the etcd-member check's, under the etcd component.
		"etcd failed is not a node fault": {[]*machine.ServiceInfo{svc("etcd", "Failed", false, false), svc("kubelet", "Running", true, false), svc("cri", "Running", true, false)}, report.StatusHealthy, "ServicesHealthy"},
		"other services ignored":          {[]*machine.ServiceInfo{svc("udevd", "Failed", false, false), svc("kubelet", "Running", true, false), svc("cri", "Running", true, false)}, report.StatusHealthy, "ServicesHealthy"},
	} {
		t.Run(name, func(t *testing.T) {
			o := Judge(tc.svcs)
			assert.Equal(t, tc.status, o.Status, o.Message)
			assert.Equal(t, tc.reason, o.Reason)
		})
	}
}
