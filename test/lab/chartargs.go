package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/cozystack/cozy-health/deploy/render"
)

// The lab starts its agents and aggregators with what the Helm chart renders
// (one source of truth for flags): the chart is rendered with the lab's
// values, and each container's args, env and mounted files are turned into a
// process on this machine. Mount paths become lab directories holding the
// same file names (a volume the lab has no stand-in for is an error, as is a
// path flag outside every mount), $(VAR) references expand as the kubelet
// expands them, and only the addresses a cluster gives by DNS and ports are
// replaced. A flag the chart gets wrong makes the binary refuse to start, and
// the e2e fails.

// labValues are the chart values of the lab: its quick intervals, and the
// sources it has no stand-in for turned off the chart's way.
func labValues(o Options) map[string]any {
	return map[string]any{
		"agent": map[string]any{
			"interval":      o.Interval.String(),
			"checkDeadline": (o.Interval / 2).String(),
			"sources": map[string]any{
				// This machine's disks are not the lab nodes'.
				"diskstats": map[string]any{"enabled": false},
			},
			// The fsync probe writes to this machine's disk, shared with
			// the builds and tests running beside the lab: its p99 says how
			// loaded that disk is, not how a lab node's is, and read
			// Degraded at the chart's 100 ms in loaded runs. The lab's
			// faults are what is judged; a probe slower than 2 s still
			// reads Degraded.
			"thresholds": map[string]any{"fsyncProbeP99": map[string]any{"degraded": "2s", "down": "10s"}},
		},
		// Agents reach each replica on its loopback port.
		"tls": map[string]any{"extraSANs": []any{"127.0.0.1", "localhost"}},
		"aggregator": map[string]any{
			"reportInterval": o.Interval.String(),
			"refreshPeriod":  o.Interval.String(),
			// freshUntil must outlive a leader failover (lease duration plus
			// a write), or readers see a lapse while a new leader takes over.
			"freshForMultiple": freshMultiple(o.Interval, o.LeaseDuration),
			"leaderElection": map[string]any{
				"leaseName":     LeaseName,
				"leaseDuration": o.LeaseDuration.String(),
				"renewDeadline": (o.LeaseDuration * 2 / 3).String(),
				"retryPeriod":   (o.LeaseDuration / 6).String(),
			},
			"tokenAudience": TokenAudience,
			// The aggregators read the lab's LINSTOR controller (its URL
			// is the lab's, below), once per report interval; it speaks
			// plain HTTP: no client certificate Secret.
			"linstor": map[string]any{"secretName": "", "interval": o.Interval.String()},
			// The lab's scrapes (test/monitoring, e2e) read /metrics without
			// a Kubernetes token, over plain HTTP. The agents' peer check
			// stays on: they connect from loopback (their relays), which
			// it does not check.
			"metricsAuth": "none",
			"metricsTLS":  false,
		},
		// The drain guard is on in the lab (off by default in the chart):
		// kubectl drain against the lab is refused while cozy-health
		// answers blocked (guard.go, docs/guard.md).
		"guard":             map[string]any{"enabled": true},
		"platformNamespace": PlatformNamespace,
	}
}

// chartRelease is the chart rendered for the lab.
type chartRelease struct {
	agent, aggregator *corev1.PodSpec
	// agentRBAC are the agent's ClusterRole and ClusterRoleBinding (get
	// nodes), absent when the chart turns the node-role read off.
	agentRole        *rbacv1.ClusterRole
	agentRoleBinding *rbacv1.ClusterRoleBinding
	// configMaps are the rendered ConfigMaps' data by name.
	configMaps map[string]map[string]string
}

// renderChart renders the chart with the lab's values.
func renderChart(o Options) (*chartRelease, error) {
	r, err := render.Render(render.Options{Namespace: AgentNamespace, Values: labValues(o)})
	if err != nil {
		return nil, fmt.Errorf("lab: render the chart: %w", err)
	}
	out := &chartRelease{configMaps: map[string]map[string]string{}}
	pod := func(kind, name string) (*corev1.PodSpec, error) {
		obj, err := r.Object(kind, name)
		if err != nil {
			return nil, fmt.Errorf("lab: the chart: %w", err)
		}
		var tmpl corev1.PodTemplateSpec
		raw, _ := obj.Object["spec"].(map[string]any)["template"].(map[string]any)
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &tmpl); err != nil {
			return nil, fmt.Errorf("lab: the chart's %s %s: %w", kind, name, err)
		}
		return &tmpl.Spec, nil
	}
	if out.agent, err = pod("DaemonSet", "cozy-health-agent"); err != nil {
		return nil, err
	}
	if out.aggregator, err = pod("Deployment", "cozy-health-aggregator"); err != nil {
		return nil, err
	}
	objs, err := r.Objects()
	if err != nil {
		return nil, err
	}
	for _, obj := range objs {
		if obj.GetName() == "cozy-health-agent" && obj.GetKind() == "ClusterRole" {
			out.agentRole = &rbacv1.ClusterRole{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, out.agentRole); err != nil {
				return nil, fmt.Errorf("lab: the chart's ClusterRole %s: %w", obj.GetName(), err)
			}
		}
		if obj.GetName() == "cozy-health-agent" && obj.GetKind() == "ClusterRoleBinding" {
			out.agentRoleBinding = &rbacv1.ClusterRoleBinding{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, out.agentRoleBinding); err != nil {
				return nil, fmt.Errorf("lab: the chart's ClusterRoleBinding %s: %w", obj.GetName(), err)
			}
		}
		if obj.GetKind() != "ConfigMap" {
			continue
		}
		var cm corev1.ConfigMap
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &cm); err != nil {
			return nil, fmt.Errorf("lab: the chart's ConfigMap %s: %w", obj.GetName(), err)
		}
		out.configMaps[cm.Name] = cm.Data
	}
	return out, nil
}

// standIn says how a lab process gets what a pod would: a directory for
// each volume source, the values of the downward API, and the flags whose
// values only a cluster can give (DNS names, ports that would collide on
// one machine) with the lab's.
type standIn struct {
	// volumes maps a volume source ("configMap:NAME", "secret:NAME",
	// "projected:serviceAccountToken", "hostPath:/path") to a lab directory.
	volumes map[string]string
	// fields maps a downward-API fieldPath to its value.
	fields map[string]string
	// flags replace the chart's values of these flags (each value one
	// occurrence, in order); a flag the chart does not pass is added.
	flags map[string][]string
}

// volumeKey names a volume's source for standIn.volumes.
func volumeKey(v corev1.Volume) string {
	switch {
	case v.ConfigMap != nil:
		return "configMap:" + v.ConfigMap.Name
	case v.Secret != nil:
		return "secret:" + v.Secret.SecretName
	case v.HostPath != nil:
		return "hostPath:" + v.HostPath.Path
	case v.Projected != nil && len(v.Projected.Sources) == 1 && v.Projected.Sources[0].ServiceAccountToken != nil:
		return "projected:serviceAccountToken"
	}
	return "volume:" + v.Name
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// process turns the pod's first container into a command line and an
// environment for binary.
func (s standIn) process(spec *corev1.PodSpec, binary string) (args, env []string, err error) {
	if len(spec.Containers) == 0 {
		return nil, nil, fmt.Errorf("lab: the chart's pod has no container")
	}
	c := spec.Containers[0]
	// Where each mount path lives on this machine.
	sources := map[string]string{}
	for _, v := range spec.Volumes {
		sources[v.Name] = volumeKey(v)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		key := sources[m.Name]
		dir, ok := s.volumes[key]
		if !ok {
			return nil, nil, fmt.Errorf("lab: the chart mounts %s (volume %q) at %s, and the lab has no stand-in for it", key, m.Name, m.MountPath)
		}
		mounts[m.MountPath] = dir
	}
	vars := map[string]string{}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil {
			if e.ValueFrom.FieldRef == nil {
				return nil, nil, fmt.Errorf("lab: env %s: only fieldRef is stood in for", e.Name)
			}
			fv, ok := s.fields[e.ValueFrom.FieldRef.FieldPath]
			if !ok {
				return nil, nil, fmt.Errorf("lab: env %s: no stand-in for field %s", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			v = fv
		}
		vars[e.Name] = v
		env = append(env, e.Name+"="+v)
	}
	args = append(args, binary)
	args = append(args, c.Command...)
	used := map[string]bool{}
	for _, a := range c.Args {
		a = varRef.ReplaceAllStringFunc(a, func(ref string) string {
			if v, ok := vars[ref[2:len(ref)-1]]; ok {
				return v
			}
			return ref // as the kubelet leaves an unknown reference
		})
		name, value, isFlag := strings.Cut(a, "=")
		if repl, ok := s.flags[name]; ok && isFlag {
			if !used[name] {
				for _, r := range repl {
					args = append(args, name+"="+r)
				}
				used[name] = true
			}
			continue
		}
		if isFlag && strings.HasPrefix(value, "/") {
			local, err := onMount(mounts, value)
			if err != nil {
				return nil, nil, fmt.Errorf("lab: the chart's %s: %w", name, err)
			}
			a = name + "=" + local
		}
		args = append(args, a)
	}
	var extra []string
	for name := range s.flags {
		if !used[name] {
			extra = append(extra, name)
		}
	}
	sort.Strings(extra)
	for _, name := range extra {
		for _, r := range s.flags[name] {
			args = append(args, name+"="+r)
		}
	}
	return args, env, nil
}

// onMount maps a path inside the container to the lab directory of the
// mount holding it (the longest mount path wins).
func onMount(mounts map[string]string, p string) (string, error) {
	best := ""
	for mp := range mounts {
		if (p == mp || strings.HasPrefix(p, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > len(best) {
			best = mp
		}
	}
	if best == "" {
		return "", fmt.Errorf("path %s is on no volume the pod mounts", p)
	}
	return filepath.Join(mounts[best], strings.TrimPrefix(p, best)), nil
}

// aggregatorProcess is the command line and environment of replica a.
func (l *Lab) aggregatorProcess(c *chartRelease, a *Aggregator) ([]string, []string, error) {
	confDir := filepath.Join(l.State.Dir, "aggregator-config")
	if err := writeFiles(confDir, c.configMaps["cozy-health-aggregator"]); err != nil {
		return nil, nil, err
	}
	// The headless Service's name resolves to every replica; here each has
	// its own loopback port (the replica skips its own by identity).
	var peers []string
	for _, p := range l.State.Aggregators {
		peers = append(peers, p.GRPC)
	}
	s := standIn{
		volumes: map[string]string{
			"configMap:cozy-health-aggregator": confDir,
			// The aggregator's ServiceAccount token (agents' audience),
			// file "token", for the peer sync.
			"projected:serviceAccountToken": l.aggregatorTokenDir(),
		},
		fields: map[string]string{"metadata.name": a.Name, "metadata.namespace": AgentNamespace},
		flags: map[string][]string{
			"--kubeconfig":   {l.State.Kubeconfig}, // not in a pod: no in-cluster config
			"--listen":       {a.GRPC},
			"--peers":        {strings.Join(peers, ",")},
			"--http-addr":    {a.HTTP},
			"--metrics-addr": {a.Metrics},
			"--guard-addr":   {a.Guard},
			// One LINSTOR controller for the whole lab.
			"--linstor-url": {l.State.Nodes[0].LinstorURL},
		},
	}
	if l.opts.MaintenanceWindow > 0 {
		s.flags["--maintenance-window"] = []string{l.opts.MaintenanceWindow.String()}
	}
	return s.process(c.aggregator, filepath.Join(l.opts.BinDir, "cozy-health-aggregator"))
}

// agentProcess is the command line and environment of n's agent.
func (l *Lab) agentProcess(c *chartRelease, n *Node) ([]string, []string, error) {
	nd := filepath.Dir(n.TokenFile)
	// The talos.dev ServiceAccount's Secret holds the talosconfig as key
	// "config"; the lab writes it as nodes/NODE/talosconfig.
	talosDir := filepath.Join(nd, "talos.dev")
	if err := os.MkdirAll(talosDir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("lab: %w", err)
	}
	if err := os.Symlink(n.Talosconfig, filepath.Join(talosDir, "config")); err != nil && !os.IsExist(err) {
		return nil, nil, fmt.Errorf("lab: %w", err)
	}
	if filepath.Dir(n.CiliumSocket) != nd || filepath.Base(n.CiliumSocket) != "cilium.sock" ||
		filepath.Dir(n.CiliumHealth) != nd || filepath.Base(n.CiliumHealth) != "health.sock" {
		return nil, nil, fmt.Errorf("lab: Cilium sockets %s, %s are not cilium.sock and health.sock in the node's directory", n.CiliumSocket, n.CiliumHealth)
	}
	// The node reaches the replicas through its uplink relay (the
	// partition fault cuts it); a lab state without one dials them direct.
	aggs := n.Uplinks
	if len(aggs) == 0 {
		for _, a := range l.State.Aggregators {
			aggs = append(aggs, a.GRPC)
		}
	}
	s := standIn{
		volumes: map[string]string{
			"projected:serviceAccountToken":          nd, // the pod-bound token, file "token"
			"configMap:cozy-health-ca":               filepath.Dir(l.State.CAFile),
			"secret:cozy-health-agent-talos-secrets": talosDir,
			"hostPath:/var/run/cilium":               nd,       // cilium.sock
			"hostPath:/var/lib/cozy-health":          nd,       // the fsync probe's directory
			"hostPath:/run/openvswitch":              n.OVSRun, // db.sock, ovs-vswitchd's unixctl
			"hostPath:/var/run/ovn":                  n.OVNRun, // ovn-controller's pidfile, NB/SB ctl sockets
			"hostPath:/var/lib/ovn":                  n.OVNDBDir,
			// The agent's ServiceAccount token for the API server (its own
			// Node's role) and the apiserver's CA, files token and ca.crt.
			"volume:kube-api-access": filepath.Join(nd, "kube-api"),
		},
		fields: map[string]string{"spec.nodeName": n.Name, "status.hostIP": "127.0.0.1"},
		flags: map[string][]string{
			// A headless Service's name resolves to every replica; here each
			// replica has its own loopback port.
			"--aggregator": aggs,
			// One loopback port per node on one machine.
			"--metrics-addr": {n.AgentMetrics},
			// Each node's sources listen on their own loopback ports.
			"--etcd-metrics-url": {n.EtcdMetrics},
			// Not in a pod: no $KUBERNETES_SERVICE_HOST.
			"--kube-api-server": {l.State.APIServerURL},
		},
	}
	return s.process(c.agent, filepath.Join(l.opts.BinDir, "cozy-health-agent"))
}

// writeFiles writes a ConfigMap's data as files in dir.
func writeFiles(dir string, data map[string]string) error {
	if len(data) == 0 {
		return fmt.Errorf("lab: the chart rendered no aggregator ConfigMap")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	for k, v := range data {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o600); err != nil {
			return fmt.Errorf("lab: %w", err)
		}
	}
	return nil
}

// caConfigMap is where the aggregators publish the CA of their serving
// certificate (the agents mount it).
const caConfigMap = "cozy-health-ca"

// syncCA waits until the aggregators publish their CA and writes it where
// the agents' ConfigMap volume is (State.CAFile), as the kubelet would.
func (l *Lab) syncCA(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cs := l.cp.Clientset()
	for {
		cm, err := cs.CoreV1().ConfigMaps(AgentNamespace).Get(ctx, caConfigMap, metav1.GetOptions{})
		if err == nil && cm.Data["ca.crt"] != "" {
			if err := os.MkdirAll(filepath.Dir(l.State.CAFile), 0o700); err != nil {
				return fmt.Errorf("lab: %w", err)
			}
			return os.WriteFile(l.State.CAFile, []byte(cm.Data["ca.crt"]), 0o600)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("lab: the aggregators published no CA in ConfigMap %s/%s (logs in %s/logs): %w", AgentNamespace, caConfigMap, l.State.Dir, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
