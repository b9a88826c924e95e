package lab

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/cozystack/cozy-health/test/ovnreal"
	"github.com/cozystack/cozy-health/test/sources/cilium"
	"github.com/cozystack/cozy-health/test/sources/linstor"
	"github.com/cozystack/cozy-health/test/sources/machined"
	"github.com/cozystack/cozy-health/test/sources/ovs"
)

// ovnCentralMembers is how many nodes host ovn-central's NB and SB raft
// members: kube-ovn runs one per master node, three in a Cozystack
// management cluster (the first three lab nodes, like the etcd voters).
const ovnCentralMembers = 3

// talosRoles are the roles of the agents' Talos client certificate, as the
// Talos ServiceAccount of talos/ grants them.
var talosRoles = []string{"os:reader"}

// nodeSources are one simulated node's source servers.
type nodeSources struct {
	name    string
	talos   *machined.Server
	cilium  *cilium.Server
	health  *cilium.Health
	ovs     *ovs.Node
	nb, sb  ovnDB           // shared by every node
	linstor *linstor.Server // shared by every node
	fsync   *fsyncProxy
	// metricsAddr is where the agent reads etcd's metrics (the proxy);
	// metricsSrv serves it, nil while the etcd-metrics-absent fault is on.
	metricsAddr string
	metricsSrv  *http.Server
	// relay is the node's path to the aggregators (nil in a lab state
	// without uplinks).
	relay *uplinkRelay
	// realOVS is the node's real Open vSwitch node (Debian's daemons), nil
	// where the stand-in ovs serves its sockets.
	realOVS *ovnreal.OVSNode
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
// in the lab state and writes each node's talosconfig. A server whose
// address has a listener in bound (keyed by address: up binds every address
// once and hands the listeners over, so no other process can take a port
// between its choice and its use) serves on it; any other address is bound
// here. Every listener in bound is used or closed.
func startSources(s *State, bound map[string]net.Listener) (_ *daemon, err error) {
	d := &daemon{nodes: map[string]*nodeSources{}}
	defer func() {
		for _, l := range bound {
			_ = l.Close()
		}
		if err != nil {
			d.stop()
		}
	}()
	listen := func(addr string) (net.Listener, error) {
		if l, ok := bound[addr]; ok {
			delete(bound, addr)
			return l, nil
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("listen on %s: %w", addr, err)
		}
		return l, nil
	}
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
	ll, err := listen(lu.Host)
	if err != nil {
		return nil, fmt.Errorf("start LINSTOR controller: %w", err)
	}
	ls := linstor.Serve(ll, nil)
	d.close = append(d.close, func() { _ = ls.Close() })
	for _, n := range names {
		ls.SetNode(n, "ONLINE")
	}
	for _, r := range labReplicas(names) {
		ls.SetReplica(r)
	}

	pki, err := machined.NewPKI([]string{"127.0.0.1"}, talosRoles, 30*24*time.Hour)
	if err != nil {
		return nil, err
	}
	ips := map[string]string{}
	for j, o := range names {
		ips[o] = fmt.Sprintf("127.0.0.%d", j+10)
	}
	nb, sb, realOVS, closeOVN, err := startOVNCentral(s, ips)
	if err != nil {
		return nil, err
	}
	d.close = append(d.close, closeOVN)
	for i := range s.Nodes {
		n := &s.Nodes[i]
		ns := &nodeSources{name: n.Name, linstor: ls, nb: nb, sb: sb}
		d.nodes[n.Name] = ns

		ns.talos, err = machined.New(machined.Config{Hostname: n.Name, EtcdEndpoint: n.EtcdClient, TLS: pki.ServerTLS()})
		if err != nil {
			return nil, err
		}
		d.close = append(d.close, ns.talos.Stop)
		tl, err := listen(n.Talos)
		if err != nil {
			return nil, fmt.Errorf("start Talos API for %s: %w", n.Name, err)
		}
		go func() { _ = ns.talos.Serve(tl) }()
		if err := pki.WriteTalosconfig(n.Talosconfig, []string{n.Talos}); err != nil {
			return nil, err
		}

		if ns.cilium, err = cilium.Start(n.CiliumSocket); err != nil {
			return nil, fmt.Errorf("start Cilium API for %s: %w", n.Name, err)
		}
		d.close = append(d.close, func() { _ = ns.cilium.Close() })
		if ns.health, err = cilium.StartHealth(n.CiliumHealth, n.Name, ips); err != nil {
			return nil, fmt.Errorf("start cilium-health for %s: %w", n.Name, err)
		}
		d.close = append(d.close, func() { _ = ns.health.Close() })

		if ns.realOVS = realOVS[n.Name]; ns.realOVS == nil {
			if ns.ovs, err = ovs.StartNode(n.OVSRun, n.OVNRun, n.Name); err != nil {
				return nil, fmt.Errorf("start ovs-ovn sockets for %s: %w", n.Name, err)
			}
			d.close = append(d.close, ns.ovs.Stop)
		}

		if len(n.Uplinks) > 0 {
			var lns []net.Listener
			for _, a := range n.Uplinks {
				ln, err := listen(a)
				if err != nil {
					for _, l := range lns {
						_ = l.Close()
					}
					return nil, fmt.Errorf("start the uplink relay of %s: %w", n.Name, err)
				}
				lns = append(lns, ln)
			}
			ns.relay = startRelay(n.Name, lns, aggregatorTarget(s.Dir))
			d.close = append(d.close, ns.relay.Close)
		}

		mu, err := url.Parse(n.EtcdMetrics)
		if err != nil {
			return nil, fmt.Errorf("etcd metrics URL: %w", err)
		}
		ns.fsync = newFsyncProxy(n.EtcdRealMetrics)
		ns.metricsAddr = mu.Host
		ml, err := listen(mu.Host)
		if err != nil {
			return nil, fmt.Errorf("start etcd metrics proxy for %s: %w", n.Name, err)
		}
		ns.serveMetricsOn(ml)
		d.close = append(d.close, ns.stopMetrics)
	}
	// The nodes' kubelets: their Leases in kube-node-lease (kubelet.go).
	if d.kubelets, err = startKubelets(s); err != nil {
		return nil, err
	}
	d.close = append(d.close, d.kubelets.close)
	return d, nil
}

// serveMetrics serves etcd's metrics (through the fsync proxy) where the
// agent reads them.
func (ns *nodeSources) serveMetrics() error {
	if ns.metricsSrv != nil {
		return nil
	}
	ml, err := net.Listen("tcp", ns.metricsAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", ns.metricsAddr, err)
	}
	ns.serveMetricsOn(ml)
	return nil
}

// serveMetricsOn serves etcd's metrics (through the fsync proxy) on ml.
func (ns *nodeSources) serveMetricsOn(ml net.Listener) {
	srv := &http.Server{Handler: ns.fsync, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ml) }()
	ns.metricsSrv = srv
}

// stopMetrics closes the metrics listener: nothing answers at the URL, as
// on a Talos node without the listen-metrics-urls patch.
func (ns *nodeSources) stopMetrics() {
	if ns.metricsSrv != nil {
		_ = ns.metricsSrv.Close()
		ns.metricsSrv = nil
	}
}

// fault changes the state of one of the node's source servers.
func (ns *nodeSources) fault(f, arg string) (string, error) {
	if ns.realOVS != nil {
		if msg, ok, err := ns.realOVSFault(f); ok {
			return msg, err
		}
	} else if _, ok := Faults[f]; ok && (strings.HasPrefix(f, "ovs-vswitchd-") || strings.HasPrefix(f, "ovn-controller-") || strings.HasPrefix(f, "ovs-ovsdb-")) {
		return "", fmt.Errorf("%s: %s runs no real Open vSwitch daemons (the real OVS node is the first ovn-central node, where Debian's openvswitch-switch and ovn-host are installed)", f, ns.name)
	}
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
		ns.ovs.Stop()
		return fmt.Sprintf("ovs-ovn on %s is gone: ovsdb-server, ovs-vswitchd and ovn-controller stopped, their sockets removed", ns.name), nil
	case "ovs-up":
		if err := ns.ovs.Start(); err != nil {
			return "", err
		}
		return fmt.Sprintf("ovs-ovn on %s runs again", ns.name), nil
	case "ovn-central-stop", "ovn-central-start", "ovn-nb-stop", "ovn-nb-start":
		clusters := []ovnDB{ns.nb, ns.sb}
		if strings.HasPrefix(f, "ovn-nb-") {
			clusters = clusters[:1]
		}
		var what []string
		for _, c := range clusters {
			var err error
			if strings.HasSuffix(f, "-stop") {
				err = c.Stop(ns.name)
			} else {
				err = c.Start(ns.name)
			}
			if err != nil {
				return "", err
			}
			what = append(what, c.name())
		}
		verb := "stopped (control socket gone, database file kept)"
		if _, real := ns.nb.(realOVNDB); real {
			verb = "stopped by SIGTERM (real ovsdb-server; control socket gone, database file kept)"
		}
		if strings.HasSuffix(f, "-start") {
			verb = "running"
		}
		return fmt.Sprintf("ovn-central %s member(s) on %s %s", strings.Join(what, " and "), ns.name, verb), nil
	case "ovn-sb-leave":
		if err := ns.sb.Leave(ns.name); err != nil {
			return "", err
		}
		return fmt.Sprintf("ovn-central %s member on %s left the cluster (cluster/leave): its server runs on without the database, whose file stays", ns.sb.name(), ns.name), nil
	case "ovn-sb-rejoin":
		if err := ns.sb.Rejoin(ns.name); err != nil {
			return "", err
		}
		return fmt.Sprintf("ovn-central %s member on %s joined the cluster again", ns.sb.name(), ns.name), nil
	case "ovn-nb-freeze":
		if err := ns.nb.Freeze(ns.name); err != nil {
			return "", err
		}
		return fmt.Sprintf("ovn-central %s server on %s frozen (SIGSTOP): it accepts and never answers", ns.nb.name(), ns.name), nil
	case "ovn-nb-thaw":
		if err := ns.nb.Thaw(ns.name); err != nil {
			return "", err
		}
		return fmt.Sprintf("ovn-central %s server on %s continues (SIGCONT)", ns.nb.name(), ns.name), nil
	case "cilium-unreachable", "cilium-reachable":
		if arg == "" || arg == ns.name {
			return "", fmt.Errorf("%s needs another node's name", f)
		}
		ns.health.SetUnreachable(arg, f == "cilium-unreachable")
		if f == "cilium-unreachable" {
			return fmt.Sprintf("cilium-health on %s cannot reach %s (ICMP and HTTP to its address and health endpoint fail)", ns.name, arg), nil
		}
		return fmt.Sprintf("cilium-health on %s reaches %s again", ns.name, arg), nil
	case "etcd-metrics-absent":
		ns.stopMetrics()
		return fmt.Sprintf("nothing answers at etcd's metrics URL on %s (as without the listen-metrics-urls patch)", ns.name), nil
	case "etcd-metrics-present":
		if err := ns.serveMetrics(); err != nil {
			return "", err
		}
		return fmt.Sprintf("etcd's metrics are served on %s again", ns.name), nil
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
	case "drbd-detached", "drbd-attached":
		// on-io-error detach: the disk failed, DRBD runs the replica
		// diskless; the controller marks it DrbdOptions/SkipDisk.
		if !strings.HasPrefix(arg, "pvc-") {
			return "", fmt.Errorf("%s needs a resource name such as pvc-lab-1", f)
		}
		if f == "drbd-detached" {
			ns.linstor.SetDiskState(arg, ns.name, "Diskless")
			return fmt.Sprintf("the disk of resource %s on %s detached (Diskless, diskful by its flags: no data copy)", arg, ns.name), nil
		}
		ns.linstor.SetDiskState(arg, ns.name, "UpToDate")
		return fmt.Sprintf("the disk of resource %s on %s attached again (UpToDate)", arg, ns.name), nil
	case "drbd-standalone", "drbd-connected":
		if !strings.HasPrefix(arg, "pvc-") {
			return "", fmt.Errorf("%s needs a resource name such as pvc-lab-1", f)
		}
		ns.linstor.SetStandAlone(arg, ns.name, f == "drbd-standalone")
		if f == "drbd-standalone" {
			return fmt.Sprintf("resource %s on %s is StandAlone toward every peer, and they toward it (a split brain, until resolved by hand)", arg, ns.name), nil
		}
		return fmt.Sprintf("resource %s on %s is connected to its peers again", arg, ns.name), nil
	case "partition-from":
		if ns.relay == nil {
			return "", fmt.Errorf("%s: node %s has no uplink relay (a lab started before uplinks existed)", f, ns.name)
		}
		i, err := replicaIndex(arg, len(ns.relay.lns))
		if err != nil {
			return "", fmt.Errorf("%s: %w", f, err)
		}
		k := ns.relay.CutFrom(i)
		return fmt.Sprintf("%s is partitioned from aggregator-%d alone: every byte between its agent and that replica is dropped (%d open connections went dark; new ones hang); the other replicas still hear it", ns.name, i, k), nil
	case "partition", "partition-heal":
		if ns.relay == nil {
			return "", fmt.Errorf("%s: node %s has no uplink relay (a lab started before uplinks existed)", f, ns.name)
		}
		if f == "partition" {
			k := ns.relay.Cut()
			return fmt.Sprintf("%s is partitioned from the aggregators: every byte between its agent and them is dropped (%d open connections went dark; new ones hang)", ns.name, k), nil
		}
		k := ns.relay.Heal()
		return fmt.Sprintf("the partition of %s healed: %d connections that lived through it closed, new ones pass", ns.name, k), nil
	case "talos-hang":
		ns.talos.SetHang(true)
		return fmt.Sprintf("the Talos API on %s hangs every call", ns.name), nil
	case "talos-ok":
		ns.talos.SetHang(false)
		return fmt.Sprintf("the Talos API on %s answers again", ns.name), nil
	}
	return "", fmt.Errorf("unknown fault %q", f)
}
