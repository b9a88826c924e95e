package etcdmembership

import (
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/stretchr/testify/assert"

	"github.com/cozystack/cozy-health/pkg/report"
)

func TestJudgeCountsVotersAndLearners(t *testing.T) {
	o := Judge([]*machine.EtcdMember{{Id: 1, Hostname: "cp-1"}, {Id: 2, Hostname: "cp-2"}, {Id: 3, Hostname: "cp-3", IsLearner: true}})
	assert.Equal(t, report.StatusHealthy, o.Status)
	assert.Equal(t, 2.0, o.Attributes[report.AttrVotingMembers])
	assert.Equal(t, 1.0, o.Attributes[report.AttrLearnerMembers])
	assert.Contains(t, o.Message, "cp-3 (learner)")
	o = Judge(nil)
	assert.Equal(t, report.StatusDown, o.Status)
	assert.Equal(t, "NoVotingMembers", o.Reason)
}
