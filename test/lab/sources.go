package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/cozystack/cozy-health/test/sources/cilium"
	"github.com/cozystack/cozy-health/test/sources/kubeovn"
	"github.com/cozystack/cozy-health/test/sources/linstor"
	"github.com/cozystack/cozy-health/test/sources/talos"
)

// talosRoles are the roles of the agents' Talos client certificate, as the
// Talos ServiceAccount of talos/ grants them.
var talosRoles = []string{"os:reader"}

// nodeSources are one simulated node's source servers.
type nodeSources struct {
	name    string
	talos   *talos.Server
	cilium  *cilium.Server
	pinger  *kubeovn.Server
	linstor *linstor.Server // shared by every node
	fsync   *fsyncProxy
}

// labResources are the LINSTOR resources of the lab: name -> replicas as
// node index (0-based) -> diskless. Every resource has two diskful replicas
// and, on three nodes or more, a diskless tie-breaker, as LINSTOR places
// them by default.
func labReplicas(nodes []string) []linstor.Replica {
	var out []linstor.Replica
	for i := range nodes {
		res := fmt.Sprintf("pvc-lab-%d", i+1)
		a, b := nodes[i], nodes[(i+1)%len(nodes)]
		out = append(out, linstor.Replica{Resource: res, Node: a, DiskState: "UpToDate"})
		if b != a {
			out = append(out, linstor.Replica{Resource: res, Node: b, DiskState: "UpToDate"})
		}
		if len(nodes) >= 3 {
			out = append(out, linstor.Replica{Resource: res, Node: nodes[(i+2)%len(nodes)], DiskState: "Diskless", Diskless: true})
		}
	}
	return out
}

// startSources starts every node's source servers at the addresses recorded
// in the lab state and writes each node's talosconfig.
func startSources(ctx context.Context, s *State) (d *daemon, err error) {
	d = &daemon{nodes: map[string]*nodeSources{}}
	defer func() {
		if err != nil {
			d.stop()
		}
	}()
	if len(s.Nodes) == 0 {
		return nil, errors.New("lab state has no nodes")
	}
	names := make([]string, len(s.Nodes))
	for i, n := range s.Nodes {
		names[i] = n.Name
	}
	lu, err := url.Parse(s.Nodes[0].LinstorURL)
	if err != nil {
		return nil, fmt.Errorf("linstor URL: %w", err)
	}
	ls, err := linstor.Start(lu.Host, nil)
	if err != nil {
		return nil, fmt.Errorf("start LINSTOR controller: %w", err)
	}
	d.close = append(d.close, func() { _ = ls.Close() })
	for _, n := range names {
		ls.SetNode(n, "ONLINE")
	}
	for _, r := range labReplicas(names) {
		ls.SetReplica(r)
	}

	pki, err := talos.NewPKI([]string{"127.0.0.1"}, talosRoles, 30*24*time.Hour)
	if err != nil {
		return nil, err
	}
	for i := range s.Nodes {
		n := &s.Nodes[i]
		ns := &nodeSources{name: n.Name, linstor: ls}
		d.nodes[n.Name] = ns

		ns.talos, err = talos.New(talos.Config{Hostname: n.Name, EtcdEndpoint: n.EtcdClient, TLS: pki.ServerTLS()})
		if err != nil {
			return nil, err
		}
		if _, err := ns.talos.Listen(n.Talos); err != nil {
			return nil, err
		}
		d.close = append(d.close, ns.talos.Stop)
		if err := pki.WriteTalosconfig(n.Talosconfig, []string{n.Talos}); err != nil {
			return nil, err
		}

		if ns.cilium, err = cilium.Start(n.CiliumSocket); err != nil {
			return nil, fmt.Errorf("start Cilium API for %s: %w", n.Name, err)
		}
		d.close = append(d.close, func() { _ = ns.cilium.Close() })

		targets := map[string]string{}
		for j, o := range names {
			if o != n.Name {
				targets[o] = fmt.Sprintf("127.0.0.%d", j+10)
			}
		}
		pu, err := url.Parse(n.PingerURL)
		if err != nil {
			return nil, fmt.Errorf("pinger URL: %w", err)
		}
		ns.pinger, err = kubeovn.Start(pu.Host, kubeovn.Config{
			Node: n.Name, NodeIP: fmt.Sprintf("127.0.0.%d", i+10), Targets: targets, PingInterval: 2 * time.Second,
		})
		if err != nil {
			return nil, fmt.Errorf("start kube-ovn pinger for %s: %w", n.Name, err)
		}
		d.close = append(d.close, func() { _ = ns.pinger.Close() })

		mu, err := url.Parse(n.EtcdMetrics)
		if err != nil {
			return nil, fmt.Errorf("etcd metrics URL: %w", err)
		}
		ns.fsync = newFsyncProxy(n.EtcdRealMetrics)
		ml, err := net.Listen("tcp", mu.Host)
		if err != nil {
			return nil, fmt.Errorf("listen etcd metrics proxy for %s: %w", n.Name, err)
		}
		srv := &http.Server{Handler: ns.fsync, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ml) }()
		d.close = append(d.close, func() { _ = srv.Close() })
	}
	_ = ctx
	return d, nil
}

// fault changes the state of one of the node's source servers.
func (ns *nodeSources) fault(f, arg string) (string, error) {
	switch f {
	case "fsync-slow":
		ns.fsync.setSlow(true)
		return fmt.Sprintf("etcd on %s now reports slow WAL fsyncs and backend commits (~1.5s each)", ns.name), nil
	case "fsync-ok":
		ns.fsync.setSlow(false)
		return fmt.Sprintf("etcd on %s reports its real fsync latency again", ns.name), nil
	case "cilium-fail":
		ns.cilium.Fail("failed to connect to containerd")
		return fmt.Sprintf("Cilium on %s reports Failure", ns.name), nil
	case "cilium-ok":
		ns.cilium.Recover()
		return fmt.Sprintf("Cilium on %s reports Ok", ns.name), nil
	case "ovs-down":
		ns.pinger.SetOVS(false)
		return fmt.Sprintf("OVS on %s is down (kube-ovn pinger metrics)", ns.name), nil
	case "ovs-up":
		ns.pinger.SetOVS(true)
		return fmt.Sprintf("OVS on %s is up", ns.name), nil
	case "linstor-offline":
		ns.linstor.SetNode(ns.name, "OFFLINE")
		return fmt.Sprintf("the LINSTOR controller sees the satellite %s OFFLINE", ns.name), nil
	case "linstor-online":
		ns.linstor.SetNode(ns.name, "ONLINE")
		return fmt.Sprintf("the LINSTOR controller sees the satellite %s ONLINE", ns.name), nil
	case "drbd-outdated", "drbd-uptodate":
		state := "Outdated"
		if f == "drbd-uptodate" {
			state = "UpToDate"
		}
		if !strings.HasPrefix(arg, "pvc-") {
			return "", fmt.Errorf("%s needs a resource name such as pvc-lab-1", f)
		}
		ns.linstor.SetDiskState(arg, ns.name, state)
		return fmt.Sprintf("resource %s on %s is %s", arg, ns.name, state), nil
	case "talos-hang":
		ns.talos.SetHang(true)
		return fmt.Sprintf("the Talos API on %s hangs every call", ns.name), nil
	case "talos-ok":
		ns.talos.SetHang(false)
		return fmt.Sprintf("the Talos API on %s answers again", ns.name), nil
	}
	return "", fmt.Errorf("unknown fault %q", f)
}
