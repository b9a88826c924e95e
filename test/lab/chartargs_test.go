package lab

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// The lab's processes are the chart's containers: every chart flag reaches
// the binary, paths move from mounts to lab directories, $(VAR) expands from
// the downward API, and only the cluster-given addresses are replaced.
func TestChartProcess(t *testing.T) {
	o := Options{Interval: 2 * time.Second, LeaseDuration: 6 * time.Second}
	c, err := renderChart(o)
	require.NoError(t, err)
	s := standIn{
		volumes: map[string]string{
			"projected:serviceAccountToken":          "/lab/n1",
			"configMap:cozy-health-ca":               "/lab/pki",
			"secret:cozy-health-agent-talos-secrets": "/lab/n1/talos.dev",
			"hostPath:/var/run/cilium":               "/lab/n1",
			"hostPath:/var/lib/cozy-health":          "/lab/n1",
			"hostPath:/run/openvswitch":              "/lab/n1/ovs",
			"hostPath:/var/run/ovn":                  "/lab/n1/ovn",
			"hostPath:/var/lib/ovn":                  "/lab/n1/ovn-db",
			"volume:kube-api-access":                 "/lab/n1/kube-api",
		},
		fields: map[string]string{"spec.nodeName": "node-1", "status.hostIP": "127.0.0.9"},
		flags:  map[string][]string{"--aggregator": {"127.0.0.1:1", "127.0.0.1:2"}, "--etcd-metrics-url": {"http://127.0.0.1:3/metrics"}, "--extra": {"x"}},
	}
	args, env, err := s.process(c.agent, "/bin/agent")
	require.NoError(t, err)
	assert.Equal(t, []string{"/bin/agent", "run", "--aggregator=127.0.0.1:1", "--aggregator=127.0.0.1:2"}, args[:4])
	assert.Contains(t, args, "--interval=2s", "the lab's values go through the chart")
	assert.Contains(t, args, "--check-deadline=1s")
	assert.Contains(t, args, "--talos-node=127.0.0.9", "$(HOST_IP) from status.hostIP")
	assert.Contains(t, args, "--talosconfig=/lab/n1/talos.dev/config")
	assert.Contains(t, args, "--token-file=/lab/n1/token")
	assert.Contains(t, args, "--ca-file=/lab/pki/ca.crt")
	assert.Contains(t, args, "--kube-api-token-file=/lab/n1/kube-api/token", "the agent reads its own Node's role")
	assert.Contains(t, args, "--kube-api-ca-file=/lab/n1/kube-api/ca.crt")
	assert.Contains(t, args, "--cilium-socket=/lab/n1/cilium.sock")
	assert.Contains(t, args, "--cilium-health-socket=/lab/n1/health.sock")
	assert.Contains(t, args, "--ovs-db-socket=/lab/n1/ovs/db.sock")
	assert.Contains(t, args, "--ovn-nb-ctl=/lab/n1/ovn/ovnnb_db.ctl")
	assert.Contains(t, args, "--etcd-metrics-url=http://127.0.0.1:3/metrics", "a flag the chart passes is replaced")
	for _, a := range args {
		assert.NotContains(t, a, "linstor", "the agents do not read the LINSTOR controller")
	}
	assert.Contains(t, args, "--proc-root=", "diskstats off in the lab, the chart's way")
	assert.Equal(t, "--extra=x", args[len(args)-1], "a flag the chart does not pass is added")
	assert.Contains(t, env, "NODE_NAME=node-1")

	// A volume the lab cannot stand in for stops the lab.
	delete(s.volumes, "configMap:cozy-health-ca")
	_, _, err = s.process(c.agent, "/bin/agent")
	assert.ErrorContains(t, err, "configMap:cozy-health-ca")

	// A path flag that no mount holds is a chart bug.
	spec := c.agent.DeepCopy()
	spec.Containers[0].Args = append(spec.Containers[0].Args, "--ca-file=/nowhere/ca.crt")
	s.volumes["configMap:cozy-health-ca"] = "/lab/pki"
	_, _, err = s.process(spec, "/bin/agent")
	assert.ErrorContains(t, err, "/nowhere/ca.crt is on no volume")

	// Env from a source the lab has no value for.
	spec = c.agent.DeepCopy()
	spec.Containers[0].Env = append(spec.Containers[0].Env, corev1.EnvVar{Name: "X", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}}})
	_, _, err = s.process(spec, "/bin/agent")
	assert.ErrorContains(t, err, "metadata.uid")
}

// The demo's wait for every object to read a silent node Unknown is bound
// by the write budget the chart gives the lab's aggregators.
func TestWriteBoundFromChart(t *testing.T) {
	l := &Lab{opts: Options{Interval: 2 * time.Second, LeaseDuration: 6 * time.Second}}
	bound, perSecond, err := l.writeBound(6)
	require.NoError(t, err)
	assert.InDelta(t, 2.0, perSecond, 1e-9, "the chart's aggregator.writesPerSecond")
	assert.Equal(t, 3*time.Second+5*time.Second, bound, "6 writes at 2/s, plus the slack")
}
