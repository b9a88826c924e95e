// Package aggregator benchmarks the aggregator binary at scale: 5,000
// simulated agents stream signed reports every 5 s through the real ingest
// path (gRPC over TLS, ed25519 verification, replay and skew checks) to a
// real cozy-health-aggregator process, which writes Health objects to a
// real kube-apiserver from the test harness.
//
// Run it with `make bench-aggregator`. At each node count of BENCH_NODES
// (a comma-separated list, e.g. 1000,5000,10000; default 5000) it prints the
// aggregator's CPU (% of one core), its peak RSS, the steady-state rate of
// apiserver writes, how long a node's status change takes from its report to
// the Health object, and how long a node that goes silent takes to read
// Unknown in the Health object. With COZY_HEALTH_BENCH_PROFILE_DIR it also
// writes a CPU and heap profile per size and prints their top entries.
package aggregator

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	healthv1alpha1 "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
	"github.com/cozystack/cozy-health/pkg/client/clientset/versioned"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/report/reporttest"
	"github.com/cozystack/cozy-health/pkg/signing"
	"github.com/cozystack/cozy-health/pkg/tlsutil"
	"github.com/cozystack/cozy-health/pkg/wire"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
	"github.com/cozystack/cozy-health/test/bench/benchproc"
	"github.com/cozystack/cozy-health/test/harness"
)

const (
	namespace = "cozy-system"
	interval  = 5 * time.Second
)

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// agent is one simulated node agent.
type agent struct {
	node     string
	signer   *signing.Signer
	instance string
	seq      uint64
	controlP bool
	// resources are the DRBD resources the node holds a replica of: each
	// of the cluster's resources has its 3 replicas on 3 neighbouring
	// nodes, all of them reporting (a healthy cluster, as the drain rules
	// and the budget see it).
	resources []string
	stop      atomic.Bool
	// degrade makes the agent's next reports carry a Degraded fsync
	// probe; degradedSent is the unix-nano time the first one was sent,
	// recoveredSent that of the first Healthy one after it.
	degrade       atomic.Bool
	degradedSent  atomic.Int64
	recoveredSent atomic.Int64
	// lastSent is the unix-nano time of the last report sent.
	lastSent atomic.Int64
}

func (a *agent) report(now time.Time, degraded bool) *report.NodeReport {
	a.seq++
	h := report.StatusHealthy
	fsync, fsyncReason := report.StatusHealthy, "LatencyOK"
	if degraded {
		fsync, fsyncReason = report.StatusDegraded, "LatencyHigh"
	}
	nodeRef := &report.ResourceRef{Kind: report.KindNode, Name: a.node}
	obs := []report.Observation{
		{Component: report.ComponentNode, Check: report.CheckTalosServices, Status: h, Reason: "ServicesRunning", Message: "etcd, kubelet, cri running", ResourceRef: nodeRef},
		{Component: report.ComponentDisk, Check: report.CheckFsyncProbe, Status: fsync, Reason: fsyncReason, Message: "fsync p99 2.1ms", ResourceRef: nodeRef, Attributes: map[string]float64{report.AttrFsyncP99Seconds: 0.0021}},
		{Component: report.ComponentDisk, Check: report.CheckDiskstats, Status: h, Reason: "LatencyOK", Message: "await 1.2ms", ResourceRef: &report.ResourceRef{Kind: report.KindBlockDevice, Name: "nvme0n1"}},
		{Component: report.ComponentDisk, Check: report.CheckDiskstats, Status: h, Reason: "LatencyOK", Message: "await 0.9ms", ResourceRef: &report.ResourceRef{Kind: report.KindBlockDevice, Name: "nvme1n1"}},
		{Component: report.ComponentCilium, Check: report.CheckCiliumAgent, Status: h, Reason: "AgentHealthy", Message: "cilium agent ok", ResourceRef: nodeRef},
		{Component: report.ComponentKubeOVN, Check: report.CheckKubeOVNPinger, Status: h, Reason: "PingOK", Message: "0 unreachable", ResourceRef: nodeRef},
		{Component: report.ComponentLinstor, Check: report.CheckLinstorSatellite, Status: h, Reason: "Online", Message: "satellite ONLINE", ResourceRef: nodeRef},
	}
	for _, res := range a.resources {
		obs = append(obs, report.Observation{Component: report.ComponentLinstor, Check: report.CheckDRBDResource, Status: h, Reason: "UpToDate", Message: "UpToDate",
			ResourceRef: &report.ResourceRef{Kind: report.KindResource, Name: res},
			Attributes:  map[string]float64{report.AttrUpToDate: 1, report.AttrReplicas: 3, report.AttrUpToDateReplicas: 3}})
	}
	if a.controlP {
		obs = append(obs,
			report.Observation{Component: report.ComponentEtcd, Check: report.CheckEtcdMember, Status: h, Reason: "MemberHealthy", Message: "member healthy", ResourceRef: nodeRef, Attributes: map[string]float64{report.AttrIsLearner: 0}},
			report.Observation{Component: report.ComponentEtcd, Check: report.CheckEtcdMembership, Status: h, Reason: "MembersListed", Message: "3 voting", ResourceRef: nodeRef, Attributes: map[string]float64{report.AttrVotingMembers: 3}},
			report.Observation{Component: report.ComponentEtcd, Check: report.CheckFsyncLatency, Status: h, Reason: "LatencyOK", Message: "wal p99 3ms", ResourceRef: nodeRef},
			// kube-ovn runs (every node's pinger says so): its ovn-central
			// members are on the control-plane nodes, as Cozystack places
			// them (without them every node's drain verdict is unknown).
			reporttest.OVNCentralMember("OVN_Northbound", h, 3),
			reporttest.OVNCentralMember("OVN_Southbound", h, 3))
	}
	return &report.NodeReport{NodeName: a.node, AgentInstanceID: a.instance, Sequence: a.seq, SentAt: now, Interval: interval, AgentVersion: "bench", Observations: obs}
}

// run streams reports until ctx ends or the agent is stopped. Like the
// real uplink, it reconnects (same instance, next sequence) when its stream
// breaks; reconnects counts how often.
func (a *agent) run(ctx context.Context, conn *grpc.ClientConn, phase time.Duration, rejected, reconnects *atomic.Int64) error {
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(phase):
	}
	var lastErr error
	for attempt := 0; ctx.Err() == nil; attempt++ {
		if attempt > 0 {
			reconnects.Add(1)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second + time.Duration(rand.Int64N(int64(time.Second)))):
			}
		}
		lastErr = a.stream(ctx, conn, rejected)
		if lastErr == nil {
			return nil
		}
	}
	return nil
}

func (a *agent) stream(ctx context.Context, conn *grpc.ClientConn, rejected *atomic.Int64) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := pb.NewIngestServiceClient(conn).Ingest(sctx)
	if err != nil {
		return fmt.Errorf("open stream: %w", err)
	}
	if err := stream.Send(&pb.IngestRequest{Msg: &pb.IngestRequest_Hello{Hello: &pb.Hello{
		PublicKey: a.signer.PublicKey(), KeyId: a.signer.KeyID(), AgentInstanceId: a.instance, NodeName: a.node, AgentVersion: "bench",
	}}}); err != nil {
		return fmt.Errorf("send hello: %w", err)
	}
	ack, err := stream.Recv()
	if err != nil {
		return fmt.Errorf("hello ack: %w", err)
	}
	if r := ack.GetAck().GetRejectReason(); r != "" {
		return fmt.Errorf("hello rejected: %s", r)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for !a.stop.Load() {
		now := time.Now()
		degraded := a.degrade.Load()
		sr, err := a.signer.SignReport(a.report(now, degraded))
		if err != nil {
			return err
		}
		if err := stream.Send(&pb.IngestRequest{Msg: &pb.IngestRequest_Report{Report: sr}}); err != nil {
			return fmt.Errorf("send report: %w", err)
		}
		a.lastSent.Store(now.UnixNano())
		if degraded {
			a.degradedSent.CompareAndSwap(0, now.UnixNano())
		} else if a.degradedSent.Load() != 0 {
			a.recoveredSent.CompareAndSwap(0, now.UnixNano())
		}
		ack, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("report ack: %w", err)
		}
		if ack.GetAck().GetRejectReason() != "" {
			rejected.Add(1)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
	// Silent, not disconnected: a stream that stays open but carries
	// nothing, like a hung agent.
	<-ctx.Done()
	return nil
}

// BenchmarkAggregator runs one sub-benchmark per node count
// (BenchmarkAggregator/nodes=5000), so the figures of every size come out as
// benchmark lines a collector can read (test/bench/collect).
func BenchmarkAggregator(b *testing.B) {
	sizes, err := nodeCounts()
	require.NoError(b, err)
	window := envDuration("COZY_HEALTH_BENCH_WINDOW", 60*time.Second)
	for _, nodes := range sizes {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			for range b.N {
				runBench(b, nodes, window)
			}
		})
	}
}

// nodeCounts is BENCH_NODES (e.g. "1000,5000,10000"), else
// COZY_HEALTH_BENCH_NODES, else 5,000.
func nodeCounts() ([]int, error) {
	v := os.Getenv("BENCH_NODES")
	if v == "" {
		return []int{benchproc.EnvInt("COZY_HEALTH_BENCH_NODES", 5000)}, nil
	}
	var sizes []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 10 {
			return nil, fmt.Errorf("BENCH_NODES=%q: %q is not a node count of at least 10", v, f)
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}

// cluster is what a run of an aggregator bench stands on: the harness's
// kube-apiserver and etcd with the CRDs and the namespace, the simulated
// agents with their keys, their Node objects, and the aggregator's serving
// certificate.
type cluster struct {
	cp        *harness.ControlPlane
	hc        versioned.Interface
	dir, keys string
	agents    []*agent
	nodesTook time.Duration
	tls       tlsutil.Files
}

// newCluster starts the control plane and lays out nodes simulated agents
// (the first three control-plane nodes) and their Node objects.
func newCluster(ctx context.Context, b *testing.B, nodes int) *cluster {
	cp := harness.Start(b)
	require.NoError(b, cp.InstallCRDs(ctx))
	require.NoError(b, cp.EnsureNamespace(ctx, namespace))
	hc, err := versioned.NewForConfig(cp.Config)
	require.NoError(b, err)

	dir := b.TempDir()
	keys := filepath.Join(dir, "keys")
	require.NoError(b, os.MkdirAll(keys, 0o700))
	agents := make([]*agent, nodes)
	for i := range agents {
		name := fmt.Sprintf("node-%05d", i)
		priv, err := signing.WriteDevKeyPair(keys, name)
		require.NoError(b, err)
		s, err := signing.LoadKeyFile(priv)
		require.NoError(b, err)
		agents[i] = &agent{node: name, signer: s, instance: fmt.Sprintf("bench-%d-%d", i, time.Now().UnixNano()), controlP: i < 3}
		for k := range 3 {
			agents[i].resources = append(agents[i].resources, fmt.Sprintf("pvc-%05d", (i-k+nodes)%nodes))
		}
	}
	// The Node objects, as a cluster has them: every node Ready (the
	// aggregator's warm-up waits for Ready nodes), the three etcd members'
	// nodes labelled control-plane (the quorum reader believes member
	// claims only from those, as production does; without the Nodes it
	// rejects them as role_unknown).
	nodesStart := time.Now()
	require.NoError(b, createNodes(ctx, cp.Clientset(), agents))
	nodesTook := time.Since(nodesStart)
	tlsFiles, err := tlsutil.WriteServing(filepath.Join(dir, "tls"), "127.0.0.1")
	require.NoError(b, err)
	return &cluster{cp: cp, hc: hc, dir: dir, keys: keys, agents: agents, nodesTook: nodesTook, tls: tlsFiles}
}

// aggregatorProc is one cozy-health-aggregator process of a bench.
type aggregatorProc struct {
	identity                               string
	cmd                                    *exec.Cmd
	pid                                    int
	listen, metricsAddr, httpAddr, logPath string
	// env is the runtime settings it was given
	// (COZY_HEALTH_BENCH_AGGREGATOR_ENV).
	env  []string
	logf *os.File
}

// startAggregator starts the aggregator binary against c's apiserver with
// leader-election identity identity, on free loopback ports, and waits for
// its /healthz.
func startAggregator(b *testing.B, c *cluster, identity string) *aggregatorProc {
	p := &aggregatorProc{identity: identity, listen: benchproc.FreeAddr(b), metricsAddr: benchproc.FreeAddr(b), httpAddr: benchproc.FreeAddr(b),
		logPath: filepath.Join(c.dir, identity+".log")}
	var err error
	p.logf, err = os.Create(p.logPath)
	require.NoError(b, err)
	p.cmd = exec.Command(benchproc.AggregatorBinary(b),
		"--kubeconfig", c.cp.Kubeconfig, "--namespace", namespace, "--identity", identity,
		"--listen", p.listen, "--metrics-addr", p.metricsAddr, "--http-addr", p.httpAddr,
		"--tls-cert", c.tls.CertFile, "--tls-key", c.tls.KeyFile, "--insecure-dev-keys-dir", c.keys,
		"--log-level", "warn", "--pprof")
	p.cmd.Stdout, p.cmd.Stderr = p.logf, p.logf
	// The aggregator's runtime settings as the deployment sets them
	// (the chart's aggregator.goMemLimit), e.g. "GOMEMLIMIT=170MiB".
	p.env = strings.Fields(os.Getenv("COZY_HEALTH_BENCH_AGGREGATOR_ENV"))
	p.cmd.Env = append(os.Environ(), p.env...)
	if err := p.cmd.Start(); err != nil {
		p.logf.Close()
		require.NoError(b, err)
	}
	p.pid = p.cmd.Process.Pid
	ok := assert.Eventually(b, func() bool {
		resp, err := http.Get("http://" + p.httpAddr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, time.Minute, 100*time.Millisecond, "aggregator did not start; log: %s", p.logPath)
	if !ok {
		p.stop()
		b.FailNow()
	}
	return p
}

// stop interrupts the aggregator, kills it if it has not ended within
// 20 s, and closes its log. A process already ended (killed by a bench)
// is only reaped.
func (p *aggregatorProc) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
	p.logf.Close()
}

func runBench(b *testing.B, nodes int, window time.Duration) {
	load, err := benchproc.LoadAvg()
	require.NoError(b, err)
	fmt.Printf("    load average before this run: %s\n", load)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c := newCluster(ctx, b, nodes)
	hc, agents, nodesTook := c.hc, c.agents, c.nodesTook

	agg := startAggregator(b, c, "bench-aggregator")
	defer agg.stop()
	pid, listen, metricsAddr, logPath, aggEnv := agg.pid, agg.listen, agg.metricsAddr, agg.logPath, agg.env

	// The aggregator's own floor, before any agent: live heap and stacks
	// after a collection.
	base, err := benchproc.LiveMemory(metricsAddr)
	require.NoError(b, err)

	// The simulated agents: by default every agent on its own TLS
	// connection, as in a cluster (COZY_HEALTH_BENCH_CONNS=25 multiplexes
	// them on a few, which hides the per-connection cost), phases spread
	// over the interval as real agents' are.
	creds, err := tlsutil.ClientConfig(c.tls.CAFile, "127.0.0.1")
	require.NoError(b, err)
	conns := min(benchproc.EnvInt("COZY_HEALTH_BENCH_CONNS", nodes), nodes)
	clients := make([]*grpc.ClientConn, conns)
	for i := range clients {
		clients[i], err = grpc.NewClient(listen, append(wire.DialOptions(), grpc.WithTransportCredentials(credentials.NewTLS(creds)))...)
		require.NoError(b, err)
		defer clients[i].Close()
	}
	actx, astop := context.WithCancel(ctx)
	defer astop()
	var rejected, reconnects atomic.Int64
	var agentErrs sync.Map
	var wg sync.WaitGroup
	for i, a := range agents {
		wg.Add(1)
		phase := time.Duration(rand.Int64N(int64(interval)))
		go func() {
			defer wg.Done()
			if err := a.run(actx, clients[i%conns], phase, &rejected, &reconnects); err != nil && actx.Err() == nil {
				agentErrs.Store(a.node, err)
			}
		}()
	}
	defer func() { astop(); wg.Wait() }()

	// Warm-up: every node accepted and the node object carrying all of
	// them.
	start := time.Now()
	require.Eventually(b, func() bool {
		h, err := hc.HealthV1alpha1().Healths(namespace).Get(ctx, report.ComponentNode, metav1.GetOptions{})
		return err == nil && len(h.Status.Nodes) == nodes && h.Status.Overall == healthv1alpha1.StatusHealthy
	}, 5*time.Minute, time.Second, "the node object never listed every node; log: %s", logPath)
	fmt.Printf("    warm-up: %d nodes in the Health objects after %s\n", nodes, time.Since(start).Round(time.Second))
	agentErrs.Range(func(k, v any) bool { b.Errorf("agent %s: %v", k, v); return true })

	// Steady state.
	time.Sleep(10 * time.Second)
	cpu0, _, err := benchproc.Stat(pid)
	require.NoError(b, err)
	// One scrape at each end of the window, as a Prometheus scraping it
	// would (a scrape of 35,000 node series is part of the cost).
	m0, err := benchproc.Gather(metricsAddr)
	require.NoError(b, err)
	writes0 := benchproc.Value(m0, "cozy_health_writes_total", map[string]string{"result": "success"})
	acc0 := benchproc.Value(m0, "cozy_health_reports_accepted_total", nil)
	alloc0 := benchproc.Value(m0, "go_memstats_alloc_bytes_total", nil)
	// With COZY_HEALTH_BENCH_PROFILE_DIR, a CPU profile of the window's
	// first 30 s, a heap profile at its end and one of the state alone (once
	// every connection is closed) are written there.
	pdir := os.Getenv("COZY_HEALTH_BENCH_PROFILE_DIR")
	if pdir != "" {
		pdir = filepath.Join(pdir, fmt.Sprintf("nodes-%d", nodes))
		require.NoError(b, os.MkdirAll(pdir, 0o755))
	}
	profileSeconds := int(min(30*time.Second, window).Seconds())
	fetch := func(name, path string) {
		resp, err := http.Get("http://" + metricsAddr + path)
		if err != nil {
			b.Errorf("profile %s: %v", name, err)
			return
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err == nil {
			err = os.WriteFile(filepath.Join(pdir, name), data, 0o644)
		}
		if err != nil {
			b.Errorf("profile %s: %v", name, err)
		}
	}
	cpuProfiled := make(chan struct{})
	if pdir != "" {
		go func() {
			defer close(cpuProfiled)
			fetch("cpu.pprof", fmt.Sprintf("/debug/pprof/profile?seconds=%d", profileSeconds))
		}()
	}
	t0 := time.Now()
	var peakRSS int64
	// CPU per 2 s slice of the window, to show spikes next to the mean.
	var cpuSlices []string
	prevCPU, prevAt := cpu0, t0
	for time.Since(t0) < window {
		time.Sleep(2 * time.Second)
		c, rss, err := benchproc.Stat(pid)
		require.NoError(b, err)
		peakRSS = max(peakRSS, rss)
		now := time.Now()
		cpuSlices = append(cpuSlices, fmt.Sprintf("%.0f", (c-prevCPU)/now.Sub(prevAt).Seconds()*100))
		prevCPU, prevAt = c, now
	}
	if pdir != "" {
		<-cpuProfiled
		fetch("heap.pprof", "/debug/pprof/heap")
	}
	elapsed := time.Since(t0).Seconds()
	cpu1, rss, err := benchproc.Stat(pid)
	require.NoError(b, err)
	peakRSS = max(peakRSS, rss)
	m1, err := benchproc.Gather(metricsAddr)
	require.NoError(b, err)
	writes1 := benchproc.Value(m1, "cozy_health_writes_total", map[string]string{"result": "success"})
	writeErrs := benchproc.Value(m1, "cozy_health_writes_total", map[string]string{"result": "error"})
	acc1 := benchproc.Value(m1, "cozy_health_reports_accepted_total", nil)
	rej := benchproc.Value(m1, "cozy_health_reports_rejected_total", nil)
	claimsRejected := benchproc.Value(m1, "cozy_health_claims_rejected_total", nil)
	require.Zero(b, claimsRejected, "the control-plane nodes' etcd member claims are believed (cozy_health_claims_rejected_total); log: %s", logPath)
	// The disruption budget of the simulated cluster (every node's reboot
	// verdict, evaluated every few seconds): healthy, so every node safe.
	budget := map[string]float64{}
	for _, v := range []string{"safe", "blocked", "unknown"} {
		budget[v] = benchproc.Value(m1, "cozy_health_drain_verdict", map[string]string{"verdict": v})
	}
	require.Positive(b, budget["safe"], "cozy_health_drain_verdict: the budget was evaluated; log: %s", logPath)
	rollupMean := benchproc.Value(m1, "cozy_health_rollup_duration_seconds", nil)
	writeMean := benchproc.Value(m1, "cozy_health_write_duration_seconds", nil)
	heapInuse := benchproc.Value(m1, "go_memstats_heap_inuse_bytes", nil)
	stackInuse := benchproc.Value(m1, "go_memstats_stack_inuse_bytes", nil)
	goroutines := benchproc.Value(m1, "go_goroutines", nil)
	// Where RSS goes beyond the heap in use and the stacks: heap the
	// runtime holds free but has not returned to the OS, and the heap goal.
	heapIdle := benchproc.Value(m1, "go_memstats_heap_idle_bytes", nil)
	heapReleased := benchproc.Value(m1, "go_memstats_heap_released_bytes", nil)
	nextGC := benchproc.Value(m1, "go_memstats_next_gc_bytes", nil)
	alloc1 := benchproc.Value(m1, "go_memstats_alloc_bytes_total", nil)
	retimed := benchproc.Value(m1, "cozy_health_rollups_total", map[string]string{"kind": "retimed"})
	full := benchproc.Value(m1, "cozy_health_rollups_total", map[string]string{"kind": "full"})
	cpuPct := (cpu1 - cpu0) / elapsed * 100
	writesPerSec := (writes1 - writes0) / elapsed
	reportsPerSec := (acc1 - acc0) / elapsed

	// Report -> Health: a few workers' next report carries a Degraded
	// fsync probe, and once the disk object shows it, their next one a
	// Healthy probe again; the time from the send of that report to the
	// watch event of the disk object showing the change (through ingest,
	// the rollup, the writer's queue and token bucket, the apiserver and
	// the watch). A worsening is held by the damper (rollup.Holds) before
	// it is published; a recovery is published at once, so the recovery is
	// the pipeline's own latency.
	victim := agents[nodes/2]
	changed := changedAgents(agents, victim)
	worsen := reportToHealth(ctx, b, hc, changed, healthv1alpha1.StatusDegraded,
		func(a *agent) { a.degrade.Store(true) }, func(a *agent) int64 { return a.degradedSent.Load() })
	toHealth := reportToHealth(ctx, b, hc, changed, healthv1alpha1.StatusHealthy,
		func(a *agent) { a.degrade.Store(false) }, func(a *agent) int64 { return a.recoveredSent.Load() })
	pct := func(d []time.Duration, p float64) float64 {
		slices.Sort(d)
		return d[int(p*float64(len(d)-1))].Seconds()
	}

	// A node goes silent (its stream stays open, nothing more is sent).
	// Stop it right after a report, so the measure starts at its last one.
	for {
		last := time.Unix(0, victim.lastSent.Load())
		if time.Since(last) < 200*time.Millisecond {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	victim.stop.Store(true)
	lastReport := time.Unix(0, victim.lastSent.Load())
	// Watch the disk object (cheaper for the apiserver than polling a
	// 5,000-node object) until the victim reads Unknown.
	var unknownAt time.Time
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	w, err := hc.HealthV1alpha1().Healths(namespace).Watch(wctx, metav1.ListOptions{FieldSelector: "metadata.name=" + report.ComponentDisk})
	require.NoError(b, err)
	for ev := range w.ResultChan() {
		h, ok := ev.Object.(*healthv1alpha1.Health)
		if !ok {
			continue
		}
		if ns, ok := h.Status.Nodes[victim.node]; ok && ns.Status == healthv1alpha1.StatusUnknown && ns.Reason == report.ReasonHeartbeatMissed {
			unknownAt = time.Now()
			break
		}
	}
	w.Stop()
	require.False(b, unknownAt.IsZero(), "the silent node never read Unknown")
	sinceLast := unknownAt.Sub(lastReport).Seconds()
	sinceMissed := unknownAt.Sub(lastReport.Add(interval)).Seconds()

	// Where the live memory goes: measured after a collection with every
	// agent connected, then again once every connection is closed (the
	// nodes stay in the state until the apiserver deletes them). The
	// difference is the connections' cost; what remains above the
	// aggregator's empty floor is the state of 5,000 nodes.
	withConns, err := benchproc.LiveMemory(metricsAddr)
	require.NoError(b, err)
	astop()
	wg.Wait()
	for _, c := range clients {
		_ = c.Close()
	}
	var noConns benchproc.Memory
	require.Eventually(b, func() bool {
		noConns, err = benchproc.LiveMemory(metricsAddr)
		return err == nil && noConns.Goroutines < base.Goroutines+50
	}, time.Minute, time.Second, "the aggregator's connection goroutines never ended")
	if pdir != "" {
		fetch("heap-state.pprof", "/debug/pprof/heap")
	}

	h, err := hc.HealthV1alpha1().Healths(namespace).Get(ctx, report.ComponentNode, metav1.GetOptions{})
	require.NoError(b, err)
	// Every node component's object as stored (JSON, managedFields
	// included): etcd refuses a request over 1.5 MiB, the apiserver a body
	// over 3 MiB.
	var objSizes []string
	largest, largestName := 0, ""
	for _, comp := range report.NodeComponents {
		raw, err := hc.HealthV1alpha1().RESTClient().Get().Namespace(namespace).Resource("healths").Name(comp).DoRaw(ctx)
		require.NoError(b, err)
		objSizes = append(objSizes, fmt.Sprintf("%s %d", comp, len(raw)))
		if len(raw) > largest {
			largest, largestName = len(raw), comp
		}
	}

	b.ReportMetric(cpuPct, "cpu_%core")
	b.ReportMetric(float64(peakRSS)/(1<<20), "peak_rss_MiB")
	b.ReportMetric(writesPerSec, "writes/s")
	b.ReportMetric(sinceMissed, "silent_to_unknown_s")
	b.ReportMetric(sinceLast, "last_report_to_unknown_s")
	b.ReportMetric(reportsPerSec, "reports/s")
	b.ReportMetric(pct(toHealth, 0.5), "report_to_health_p50_s")
	b.ReportMetric(pct(toHealth, 1), "report_to_health_max_s")
	b.ReportMetric(pct(worsen, 0.5), "worsening_to_health_p50_s")
	// The report goes to standard output: the testing package keeps only
	// ten lines of a benchmark's log.
	say := func(format string, args ...any) { fmt.Printf("    "+format+"\n", args...) }
	// Issue 40's goals, at the sizes it sets them.
	cpuTarget, rssTarget := "", ""
	switch nodes {
	case 5000:
		cpuTarget, rssTarget = " (issue 40: <= 10 % at 5,000 nodes)", " (issue 40: <= 300 MiB at 5,000 nodes)"
	case 10000:
		rssTarget = " (issue 40: <= 550 MiB at 10,000 nodes)"
	}
	say("aggregator with %d nodes on %d connections, %s steady-state window, environment %q:", nodes, conns, time.Duration(elapsed*float64(time.Second)).Round(time.Second), aggEnv)
	say("  CPU                     %.1f %% of one core%s; per 2 s: %s", cpuPct, cpuTarget, strings.Join(cpuSlices, " "))
	say("  RSS                     peak %.1f MiB, at end %.1f MiB%s; at end %s", float64(peakRSS)/(1<<20), float64(rss)/(1<<20), rssTarget, benchproc.RSSParts(pid))
	say("  apiserver writes        %.2f /s successful (target <= 2 /s); %v failed writes in total", writesPerSec, writeErrs)
	say("  reports accepted        %.0f /s; %v rejected in total; %d rejected acks seen by agents; %d stream reconnects", reportsPerSec, rej, rejected.Load(), reconnects.Load())
	say("  Node objects            %d, all Ready, 3 control-plane (created in %s); %v etcd/OVN claims rejected (cozy_health_claims_rejected_total)", nodes, nodesTook.Round(100*time.Millisecond), claimsRejected)
	say("  drain budget            %v safe, %v blocked, %v unknown (cozy_health_drain_verdict; 3 resources of 3 replicas per node)", budget["safe"], budget["blocked"], budget["unknown"])
	say("  report -> Health        p50 %.2f s, max %.2f s over %d nodes recovering (send of the report -> the disk object shows it); turning Degraded (held by the damper) p50 %.2f s, max %.2f s",
		pct(toHealth, 0.5), pct(toHealth, 1), len(toHealth), pct(worsen, 0.5), pct(worsen, 1))
	say("  silent -> Unknown       %.1f s after its first missed report (target <= 15 s); %.1f s after its last report (grace 3 x 5 s = 15 s)", sinceMissed, sinceLast)
	say("  Go memory               heap in use %.1f MiB, stacks %.1f MiB, %.0f goroutines", heapInuse/(1<<20), stackInuse/(1<<20), goroutines)
	say("                          heap held free %.1f MiB, heap goal %.1f MiB, allocating %.1f MiB/s",
		(heapIdle-heapReleased)/(1<<20), nextGC/(1<<20), (alloc1-alloc0)/elapsed/(1<<20))
	perConn := withConns.Sub(noConns)
	say("  live after a GC         %s with the agents connected; %s of it the aggregator's empty floor",
		withConns, base)
	say("                          %.1f KiB heap + %.1f KiB stack + %.1f goroutines per connection (%d connections: %.1f MiB)",
		perConn.Heap/float64(conns)/1024, perConn.Stack/float64(conns)/1024, perConn.Goroutines/float64(conns), conns, (perConn.Heap+perConn.Stack)/(1<<20))
	state := noConns.Sub(base)
	say("                          the state of %d nodes without connections: %.1f MiB heap (%.1f KiB per node)",
		nodes, state.Heap/(1<<20), state.Heap/float64(nodes)/1024)
	b.ReportMetric(perConn.Heap/float64(conns)/1024, "heap_KiB/conn")
	b.ReportMetric(perConn.Stack/float64(conns)/1024, "stack_KiB/conn")
	b.ReportMetric(state.Heap/(1<<20), "state_heap_MiB")
	say("  mean rollup             %.1f ms (%.0f full, %.0f retimed since start); mean status apply %.1f ms", rollupMean*1000, full, retimed, writeMean*1000)
	say("  Health objects          %s: %d nodes; bytes as JSON: %s; largest %s %.0f KiB (etcd's request limit 1536 KiB)", h.Name, len(h.Status.Nodes), strings.Join(objSizes, ", "), largestName, float64(largest)/1024)
	b.ReportMetric(float64(largest)/1024, "largest_object_KiB")
	b.ReportMetric(load.Load1, "load1_before")
	if pdir != "" {
		printProfileTops(b, pdir)
	}
	if b.Failed() {
		benchproc.LogTail(b, logPath)
	}
}

// changedAgents are up to 20 workers spread over the cluster, not the
// control-plane nodes and not the one that goes silent.
func changedAgents(agents []*agent, silent *agent) []*agent {
	var out []*agent
	k := min(20, max(1, len(agents)/50))
	for i := range k {
		a := agents[3+i*(len(agents)-3)/k]
		if a != silent && !a.controlP {
			out = append(out, a)
		}
	}
	return out
}

// reportToHealth applies change to the agents and waits until the disk
// object shows every one of them with status want; it returns, per agent,
// the time from the send of its first changed report (sent) to the watch
// event that shows it.
func reportToHealth(ctx context.Context, b *testing.B, hc versioned.Interface, changed []*agent, want healthv1alpha1.Status, change func(*agent), sent func(*agent) int64) []time.Duration {
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	w, err := hc.HealthV1alpha1().Healths(namespace).Watch(wctx, metav1.ListOptions{FieldSelector: "metadata.name=" + report.ComponentDisk})
	require.NoError(b, err)
	defer w.Stop()
	for _, a := range changed {
		change(a)
	}
	seen := map[string]time.Time{}
	for ev := range w.ResultChan() {
		h, ok := ev.Object.(*healthv1alpha1.Health)
		if !ok {
			continue
		}
		now := time.Now()
		for _, a := range changed {
			if _, done := seen[a.node]; done {
				continue
			}
			if ns, ok := h.Status.Nodes[a.node]; ok && ns.Status == want && sent(a) != 0 {
				seen[a.node] = now
			}
		}
		if len(seen) == len(changed) {
			break
		}
	}
	require.Len(b, seen, len(changed), "not every changed node reached %s in the disk object within 2 minutes", want)
	var out []time.Duration
	for _, a := range changed {
		out = append(out, seen[a.node].Sub(time.Unix(0, sent(a))))
	}
	return out
}

// printProfileTops prints the top 15 entries of the CPU profile (by own
// time, and by time including callees) and of the heap profile (in use and
// allocated since start) in dir, and writes each next to its profile as
// <name>-top.txt.
func printProfileTops(b *testing.B, dir string) {
	for _, p := range []struct {
		file, index, out string
		cum              bool
	}{
		{"cpu.pprof", "", "cpu-top.txt", false},
		{"cpu.pprof", "", "cpu-top-cum.txt", true},
		{"heap.pprof", "inuse_space", "heap-inuse-top.txt", false},
		{"heap.pprof", "alloc_space", "heap-alloc-top.txt", false},
	} {
		args := []string{"tool", "pprof", "-top", "-nodecount=15"}
		if p.index != "" {
			args = append(args, "-sample_index="+p.index)
		}
		if p.cum {
			args = append(args, "-cum")
		}
		out, err := exec.Command("go", append(args, filepath.Join(dir, p.file))...).CombinedOutput()
		if err != nil {
			b.Errorf("go tool pprof %s: %v\n%s", p.file, err, out)
			continue
		}
		require.NoError(b, os.WriteFile(filepath.Join(dir, p.out), out, 0o644))
		fmt.Printf("    %s (%s):\n", p.out, filepath.Join(dir, p.file))
		for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
			fmt.Printf("      %s\n", line)
		}
	}
}

// createNodes creates a Node per agent, Ready, labelled control-plane
// where the agent claims an etcd member, 16 at a time.
func createNodes(ctx context.Context, cs kubernetes.Interface, agents []*agent) error {
	sem := make(chan struct{}, 16)
	errs := make(chan error, len(agents))
	var wg sync.WaitGroup
	for _, a := range agents {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.node, Labels: map[string]string{"kubernetes.io/hostname": a.node}}}
			if a.controlP {
				n.Labels["node-role.kubernetes.io/control-plane"] = ""
			}
			created, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
			if err != nil {
				errs <- fmt.Errorf("create Node %s: %w", a.node, err)
				return
			}
			now := metav1.Now()
			created.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
				Reason: "KubeletReady", Message: "simulated node (bench)", LastHeartbeatTime: now, LastTransitionTime: now}}
			if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
				errs <- fmt.Errorf("set Node %s Ready: %w", a.node, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}
