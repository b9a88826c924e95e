// Package realnode starts a control plane (package harness) with one real
// node: containerd and runc from the host's packages; kubelet, kube-proxy
// (nftables), kube-controller-manager and kube-scheduler v1.37.2 and CoreDNS
// from the NodeBin tool (`make nodebin`). PodSecurity admission enforces
// "baseline" by default as on Talos. The node changes the host (a bridge,
// sysctls, cgroups, fixed paths, nftables tables); it records the host
// before it starts and puts it back when it stops, also from another
// process (`cozy-health-lab down`). It needs root.
//
// The files follow a start: realnode.go (StartCluster, Stop), host.go (what
// the node may change on the host, and the one-node-per-host lock),
// network.go (the bridge and the pod network), start.go (the node's
// processes, one step each), containerd.go (containerd and its images),
// config.go (the processes' configuration files), state.go (node.json and
// the stop).
package realnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cozystack/cozy-health/test/harness"
)

// The node's network. Pods get addresses on a Linux bridge the node creates
// (it never exists before and is deleted at the end); the host owns the
// bridge's first address, where kube-apiserver and the cluster DNS listen for
// pods. Pods get no default route, only the pod and service ranges, and IP
// forwarding stays as it was (off): no pod packet can leave the machine.
const (
	Bridge        = "cozy-health0"
	PodCIDR       = "10.244.0.0/24"
	Address       = "10.244.0.1"
	ServiceCIDR   = "10.96.0.0/24"
	ClusterDomain = "cluster.local"
	// PauseImage is the CRI sandbox image, built from test/nodebin/pause and
	// imported at start.
	PauseImage = "localhost/cozy-health/pause:harness"
)

// Options configure StartCluster.
type Options struct {
	// Dir holds everything: the control plane's data, certificates, logs and
	// admin kubeconfig (Dir/kubeconfig), and the node (Dir/node). Required.
	Dir string
	// Detach lets every process outlive the caller (the lab's `up`); the
	// cluster is then stopped with StopClusterDir.
	Detach bool
	// NodeName is the kubelet's node name; default "node-1".
	NodeName string
	// Logf reports progress; default silent.
	Logf func(format string, args ...any)
}

// Cluster is a control plane with one real node.
type Cluster struct {
	*harness.ControlPlane
	Node *Node
}

// Node is the running node.
type Node struct {
	State *State
	cp    *harness.ControlPlane
}

// Name is the node's name.
func (n *Node) Name() string { return n.State.Name }

// cniBinDir holds the CNI plugins of Debian's containernetworking-plugins.
const cniBinDir = "/usr/lib/cni"

// Prerequisites reports what this host lacks to run a node: root, the
// Debian packages containerd, runc and containernetworking-plugins, nft and
// ip. `make testdeps` installs the packages.
func Prerequisites() error {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "nft", "ip"} {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniBinDir, p)); err != nil {
			missing = append(missing, filepath.Join(cniBinDir, p))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("a real node needs %s (apt-get install containerd runc containernetworking-plugins nftables iproute2, as root)", strings.Join(missing, ", "))
	}
	return nil
}

// Start starts a cluster with a real node for a test and stops it,
// restoring the host, at the test's end.
func Start(t testing.TB) *Cluster {
	t.Helper()
	harness.SkipShort(t)
	if err := Prerequisites(); err != nil {
		t.Fatalf("start node: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c, err := StartCluster(ctx, Options{Dir: t.TempDir(), Logf: t.Logf})
	if err != nil {
		t.Fatalf("start cluster with a node: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
	})
	return c
}

// StartCluster starts a control plane and one real node in o.Dir and returns
// when the node is Ready, kube-proxy has synced, the cluster DNS answers and
// the controllers run. Only one such node runs on a host at a time (the
// kubelet's paths and cgroups are host-wide): a second waits for the first.
// On failure everything started is stopped and the host restored.
func StartCluster(ctx context.Context, o Options) (c *Cluster, err error) {
	o, err = o.complete()
	if err != nil {
		return nil, err
	}
	nodeBin, err := harness.NodeBin.Dir()
	if err != nil {
		return nil, err
	}
	st, err := claimHost(ctx, o)
	if err != nil {
		return nil, err
	}
	n := &Node{State: st}
	c = &Cluster{Node: n}
	defer func() {
		if err != nil {
			if c.ControlPlane != nil {
				_ = c.ControlPlane.Stop()
			}
			err = errors.Join(err, st.teardown())
		}
	}()
	start := time.Now()
	if err := st.createBridge(); err != nil {
		return c, err
	}
	cp, err := harness.StartControlPlane(ctx, harness.Options{Dir: st.Dir, Detach: o.Detach, Address: Address, TalosPodSecurity: true, Kubelet: true})
	if err != nil {
		return c, err
	}
	c.ControlPlane, n.cp = cp, cp
	if err := st.recordControlPlane(cp); err != nil {
		return c, err
	}
	o.Logf("control plane ready on %s in %s", cp.APIServerURL, time.Since(start).Round(time.Millisecond))
	if err := n.start(ctx, nodeBin, o.Logf); err != nil {
		return c, err
	}
	o.Logf("node %s ready in %s (containerd, kubelet, kube-proxy, coredns, kube-controller-manager, kube-scheduler)", o.NodeName, time.Since(start).Round(time.Millisecond))
	return c, nil
}

// complete fills o's defaults, checks the host's prerequisites and makes
// Dir absolute (node.json names it for another process).
func (o Options) complete() (Options, error) {
	if o.Dir == "" {
		return o, errors.New("start cluster: Options.Dir is required")
	}
	if o.NodeName == "" {
		o.NodeName = "node-1"
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if err := Prerequisites(); err != nil {
		return o, err
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return o, err
	}
	o.Dir = dir
	return o, nil
}

// claimHost takes the host for the node in o.Dir (waiting for another node
// to stop), records the host as it is and saves the node's first state.
// On failure the host is given up.
func claimHost(ctx context.Context, o Options) (*State, error) {
	nodeDir := filepath.Join(o.Dir, "node")
	if err := os.MkdirAll(nodeDir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", nodeDir, err)
	}
	if err := acquireHost(ctx, o.Dir, o.Logf); err != nil {
		return nil, err
	}
	st, err := newState(o, nodeDir)
	if err != nil {
		releaseHost(o.Dir)
		return nil, err
	}
	return st, nil
}

// Stop stops the node and the control plane and puts the host back as it
// was: sysctls, fixed paths, cgroups, mounts, network namespaces, nftables
// tables and the bridge. Safe to call more than once.
func (c *Cluster) Stop() error {
	var errs []error
	if err := c.Node.State.stopProcs(); err != nil {
		errs = append(errs, err)
	}
	if c.ControlPlane != nil {
		if err := c.ControlPlane.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.Node.State.teardown(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// StopClusterDir stops a (detached) cluster from its directory, as Stop.
func StopClusterDir(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	st, err := LoadState(dir)
	if err != nil {
		return err
	}
	return st.teardown()
}
