package lab

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/cozystack/cozy-health/test/harness/realnode"
)

// NodeOptions configure UpNode.
type NodeOptions struct {
	// Dir holds everything (required).
	Dir string
	// NodeName is the kubelet's node name (default node-1).
	NodeName string
	// Log reports progress.
	Log func(format string, args ...any)
	// ChartBin, when set, is a directory holding cozy-health-agent and
	// cozy-health-aggregator (make build): their images are imported and the
	// chart is installed with the Helm Go SDK.
	ChartBin string
}

// UpNode starts a control plane and one real kubelet node (containerd, runc,
// kube-proxy, CoreDNS, kube-controller-manager, kube-scheduler) in o.Dir,
// detached, installs the chart on it when o.ChartBin is set, and writes
// Dir/lab.json and Dir/kubeconfig. DownDir stops it and puts the host back as
// it was.
func UpNode(ctx context.Context, o NodeOptions) (*State, error) {
	if o.Dir == "" {
		return nil, fmt.Errorf("lab: --dir is required")
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	c, err := realnode.StartCluster(ctx, realnode.Options{Dir: dir, Detach: true, NodeName: o.NodeName, Logf: o.Log})
	if err != nil {
		return nil, err
	}
	if o.ChartBin != "" {
		if err := installOnNode(ctx, c, o.ChartBin, o.Log); err != nil {
			_ = c.Stop()
			return nil, err
		}
	}
	etcd, api := c.Pids()
	s := &State{
		Dir:          dir,
		Detached:     true,
		Kubeconfig:   c.Kubeconfig,
		Kubectl:      c.Binary("kubectl"),
		APIServerPid: api,
		EtcdPid:      etcd,
		RealNode:     c.Node.Name(),
	}
	if err := s.save(); err != nil {
		_ = realnode.StopClusterDir(dir)
		return nil, err
	}
	return s, nil
}
