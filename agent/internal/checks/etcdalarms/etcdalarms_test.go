package etcdalarms

import (
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/stretchr/testify/assert"

	"github.com/cozystack/cozy-health/pkg/report"
)

func TestJudge(t *testing.T) {
	o := Judge(nil)
	assert.Equal(t, report.StatusHealthy, o.Status)
	o = Judge([]*machine.EtcdMemberAlarm{{MemberId: 1, Alarm: machine.EtcdMemberAlarm_NONE}})
	assert.Equal(t, report.StatusHealthy, o.Status)
	o = Judge([]*machine.EtcdMemberAlarm{{MemberId: 0xab, Alarm: machine.EtcdMemberAlarm_CORRUPT}, {MemberId: 2, Alarm: machine.EtcdMemberAlarm_NOSPACE}})
	assert.Equal(t, report.StatusDown, o.Status)
	assert.Equal(t, "AlarmCORRUPT", o.Reason)
	assert.Contains(t, o.Message, "CORRUPT on member ab")
	assert.Contains(t, o.Message, "NOSPACE on member 2")
}
