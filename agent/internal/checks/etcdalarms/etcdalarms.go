// Package etcdalarms reports etcd's cluster-wide alarms (NOSPACE, CORRUPT)
// from Talos' EtcdAlarmList.
package etcdalarms

import (
	"fmt"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"

	"github.com/cozystack/cozy-health/agent/internal/checks/etcdcheck"
	"github.com/cozystack/cozy-health/agent/internal/sources/machineapi"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Check is the etcd-alarms check: the shared etcd skeleton reading
// EtcdAlarmList.
type Check = etcdcheck.Check

// New returns the check.
func New(c *machineapi.Client) *Check {
	return etcdcheck.NewList(report.CheckEtcdAlarms, c, (*machineapi.Client).EtcdAlarmList, "cluster's alarms", Judge)
}

// Judge turns an alarm list into the etcd-alarms observation. Any active
// alarm puts the whole cluster in maintenance mode, so it is Down.
func Judge(alarms []*machine.EtcdMemberAlarm) report.Observation {
	var active []string
	first := ""
	for _, a := range alarms {
		if a.GetAlarm() == machine.EtcdMemberAlarm_NONE {
			continue
		}
		if first == "" {
			first = a.GetAlarm().String()
		}
		active = append(active, fmt.Sprintf("%s on member %x", a.GetAlarm(), a.GetMemberId()))
	}
	if len(active) == 0 {
		return report.Observation{Status: report.StatusHealthy, Reason: "NoAlarms", Message: "no active etcd alarm"}
	}
	return report.Observation{Status: report.StatusDown, Reason: "Alarm" + first, Message: "active etcd alarms: " + strings.Join(active, ", ")}
}
