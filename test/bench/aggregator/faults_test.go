package aggregator

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	healthv1alpha1 "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
	"github.com/cozystack/cozy-health/pkg/client/clientset/versioned"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/tlsutil"
	"github.com/cozystack/cozy-health/pkg/wire"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
	"github.com/cozystack/cozy-health/test/bench/benchproc"
)

// The aggregator under faults (issue 40 item 3), BenchmarkAggregatorFaults:
// BENCH_FAULT_NODES simulated agents (default 10,000) stream signed reports
// every 5 s to every one of BENCH_FAULT_REPLICAS real aggregator replicas
// (default 3), each agent on its own TLS connection to each replica, as the
// agent's uplink does (one signature a report, a stream and a reconnect
// backoff per replica). The replicas elect a leader on the Lease, as the
// chart deploys them (its lease duration, renew deadline and retry period
// are the binary's defaults). After the warm-up, in this order:
//
//  1. 10 % of the nodes flap: each turns Degraded (its fsync probe) for
//     COZY_HEALTH_BENCH_FAULT_FLAP_REPORTS reports (default 4: 20 s, longer
//     than the damper's 10 s hold, or no worsening would ever be published)
//     and Healthy for as many, each at its own place in the cycle, until the
//     end. Measured: from the send of each degraded spell's first report to
//     the watch event of the disk object showing the node Degraded.
//  2. After COZY_HEALTH_BENCH_FAULT_WINDOW (default 60 s) of flapping,
//     COZY_HEALTH_BENCH_FAULT_SILENT nodes (default 5 %: 500 of 10,000) go
//     silent at once: their streams stay open and carry nothing. Measured:
//     from each one's first missed report (its last report + 5 s) to the
//     disk object showing it Unknown.
//  3. Once they all read Unknown, the replica holding the Lease is killed
//     (SIGKILL, by pid) and at the same instant every flapper turns to its
//     final state (every other one Degraded, the rest Healthy): changes no
//     one but the next leader can write. Measured: the Lease taken over, the
//     next leader's first write.
//  4. COZY_HEALTH_BENCH_FAULT_SETTLE (default 60 s) after the kill, every
//     node's entry in every node component's object is compared with what it
//     must read (silent: Unknown; a flapper's disk entry: its final state;
//     everything else: what it read before the faults). A mismatch then is a
//     lost write.
//
// Over the whole fault window it measures the apiserver's writes of Health
// objects (its own apiserver_request_total: every replica's writes, the
// killed one's included), the replicas', apiserver's, etcd's and the
// simulator's CPU, the machine's, and how late the simulator sends its
// reports (a simulator starved of CPU sends late, and the figures then say
// more about the machine than the aggregator). Last, the largest Health
// object as stored.

// faultSettings are a fault run's sizes and times.
type faultSettings struct {
	nodes, replicas, flappers, silent, flapReports int
	window, settle                                 time.Duration
}

func faultSettingsFromEnv() faultSettings {
	n := benchproc.EnvInt("BENCH_FAULT_NODES", 10000)
	return faultSettings{
		nodes:       n,
		replicas:    benchproc.EnvInt("BENCH_FAULT_REPLICAS", 3),
		flappers:    n / 10,
		silent:      min(benchproc.EnvInt("COZY_HEALTH_BENCH_FAULT_SILENT", max(1, n/20)), n/4),
		flapReports: benchproc.EnvInt("COZY_HEALTH_BENCH_FAULT_FLAP_REPORTS", 4),
		window:      envDuration("COZY_HEALTH_BENCH_FAULT_WINDOW", 60*time.Second),
		settle:      envDuration("COZY_HEALTH_BENCH_FAULT_SETTLE", 60*time.Second),
	}
}

// leaseName is the aggregator's default --lease-name (the chart's too).
const leaseName = "cozy-health-aggregator"

// BenchmarkAggregatorFaults runs the fault scenario above once, as
// BenchmarkAggregatorFaults/nodes=N (test/bench/collect reads its figures).
func BenchmarkAggregatorFaults(b *testing.B) {
	s := faultSettingsFromEnv()
	require.GreaterOrEqual(b, s.nodes, 40, "BENCH_FAULT_NODES: at least 40 nodes")
	require.GreaterOrEqual(b, s.replicas, 2, "BENCH_FAULT_REPLICAS: at least 2 replicas (one is killed)")
	b.Run(fmt.Sprintf("nodes=%d", s.nodes), func(b *testing.B) {
		for range b.N {
			runFaults(b, s)
		}
	})
}

// signedReport is an agent's newest signed report.
type signedReport struct {
	sr  *pb.SignedReport
	seq uint64
}

// spell is one degraded spell of a flapping node: the send of its first
// report, of the first Healthy report after it (zero: none yet), and the
// watch event that showed the node Degraded (zero: not yet).
type spell struct{ sent, ended, shown time.Time }

// Final states of a flapper (faultAgent.final).
const (
	flapping = iota
	finalHealthy
	finalDegraded
)

// faultAgent is a simulated agent that streams to every replica: one
// publisher signs each report once; one sender per replica sends the newest
// report it has not sent yet, reconnecting with its own backoff (as
// agent/internal/uplink does).
type faultAgent struct {
	*agent
	newest atomic.Pointer[signedReport]
	wake   []chan struct{}
	// flapper: the node flaps, after lead Healthy reports (its place in
	// the cycle: every spell whole, the flappers' spells spread).
	flapper bool
	lead    int
	final   atomic.Int32
	silent  bool

	mu     sync.Mutex
	spells []spell // guarded by mu
}

// faultSim is the simulated agents and what they count.
type faultSim struct {
	agents   []*faultAgent
	flapping atomic.Bool
	// flapReports is the length of a degraded (and a healthy) spell.
	flapReports                      int
	rejected, reconnects, sendErrors atomic.Int64
	// opened counts the streams whose hello was acknowledged; errs keeps
	// the first few distinct stream errors (errMu).
	opened atomic.Int64
	errMu  sync.Mutex
	errs   map[string]int
	// late counts the reports by how late the publisher was against its
	// schedule (lateBounds, the last bucket unbounded); skipped counts the
	// reports not sent at all because it was more than an interval late.
	late    [8]atomic.Int64 // len(lateBounds)+1
	skipped atomic.Int64
	maxLate atomic.Int64
}

var lateBounds = [7]time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2500 * time.Millisecond}

// addrPattern is a loopback address and port in an error message: the
// same error on two connections counts as one.
var addrPattern = regexp.MustCompile(`\d+\.\d+\.\d+\.\d+:\d+`)

// noteError counts err among the stream errors (the first 8 distinct
// messages).
func (s *faultSim) noteError(err error) {
	if err == nil {
		return
	}
	s.errMu.Lock()
	defer s.errMu.Unlock()
	if s.errs == nil {
		s.errs = map[string]int{}
	}
	msg := addrPattern.ReplaceAllString(err.Error(), "ADDR")
	if _, ok := s.errs[msg]; ok || len(s.errs) < 8 {
		s.errs[msg]++
	}
}

// errorSample is the stream errors so far, most frequent first.
func (s *faultSim) errorSample() string {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	if len(s.errs) == 0 {
		return "none"
	}
	var out []string
	for m, n := range s.errs {
		out = append(out, fmt.Sprintf("%dx %q", n, m))
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// lateCounts is a copy of the late histogram.
func (s *faultSim) lateCounts() []int64 {
	out := make([]int64, len(s.late))
	for i := range s.late {
		out[i] = s.late[i].Load()
	}
	return out
}

// lateQuantile is the upper bound of the bucket holding quantile q of the
// reports counted between before and after (+Inf past the last bound).
func lateQuantile(before, after []int64, q float64) float64 {
	var total int64
	for i := range after {
		total += after[i] - before[i]
	}
	if total == 0 {
		return 0
	}
	want := int64(math.Ceil(q * float64(total)))
	var seen int64
	for i := range after {
		seen += after[i] - before[i]
		if seen >= want {
			if i < len(lateBounds) {
				return lateBounds[i].Seconds()
			}
			return math.Inf(1)
		}
	}
	return math.Inf(1)
}

// degradedNow says whether the k-th report of a since flapping began
// (from 0) carries a Degraded fsync probe.
func (s *faultSim) degradedNow(a *faultAgent, k int) bool {
	switch a.final.Load() {
	case finalHealthy:
		return false
	case finalDegraded:
		return true
	}
	return a.flapper && s.flapping.Load() && k >= a.lead && ((k-a.lead)/s.flapReports)%2 == 0
}

// publish signs a report every interval, from phase on, until ctx ends or
// the agent falls silent, and wakes every sender.
func (s *faultSim) publish(ctx context.Context, a *faultAgent, phase time.Duration) {
	start := time.Now().Add(phase)
	prevDegraded := false
	flapK := 0
	for k := 0; ; k++ {
		next := start.Add(time.Duration(k) * interval)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
		if a.stop.Load() {
			return
		}
		now := time.Now()
		late := now.Sub(next)
		if late > interval {
			// More than an interval late: as a ticker would, drop the
			// reports missed and go on from now.
			missed := int(late / interval)
			s.skipped.Add(int64(missed))
			k += missed
			late -= time.Duration(missed) * interval
		}
		i := 0
		for i < len(lateBounds) && late > lateBounds[i] {
			i++
		}
		s.late[i].Add(1)
		for {
			m := s.maxLate.Load()
			if int64(late) <= m || s.maxLate.CompareAndSwap(m, int64(late)) {
				break
			}
		}
		degraded := s.degradedNow(a, flapK)
		if s.flapping.Load() {
			flapK++
		}
		sr, err := a.signer.SignReport(a.report(now, degraded))
		if err != nil {
			s.sendErrors.Add(1)
			continue
		}
		a.newest.Store(&signedReport{sr: sr, seq: a.seq})
		a.lastSent.Store(now.UnixNano())
		if degraded != prevDegraded {
			a.mu.Lock()
			if degraded {
				a.spells = append(a.spells, spell{sent: now})
			} else if n := len(a.spells); n > 0 {
				a.spells[n-1].ended = now
			}
			a.mu.Unlock()
		}
		prevDegraded = degraded
		for _, w := range a.wake {
			select {
			case w <- struct{}{}:
			default:
			}
		}
	}
}

// send streams a's newest reports to one replica until ctx ends,
// reconnecting after 0.5 s doubling to 10 s, 20 % jitter (the uplink's
// defaults), back to 0.5 s after a stream that carried a report.
func (s *faultSim) send(ctx context.Context, a *faultAgent, conn *grpc.ClientConn, wake chan struct{}) {
	var sentSeq uint64
	delay := 500 * time.Millisecond
	for ctx.Err() == nil {
		carried, err := s.stream(ctx, a, conn, wake, &sentSeq)
		if ctx.Err() != nil {
			return
		}
		s.noteError(err)
		s.reconnects.Add(1)
		if carried {
			delay = 500 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(float64(delay) * (0.8 + 0.4*rand.Float64()))):
		}
		delay = min(2*delay, 10*time.Second)
	}
}

func (s *faultSim) stream(ctx context.Context, a *faultAgent, conn *grpc.ClientConn, wake chan struct{}, sentSeq *uint64) (carried bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := pb.NewIngestServiceClient(conn).Ingest(sctx)
	if err != nil {
		return false, err
	}
	if err := stream.Send(&pb.IngestRequest{Msg: &pb.IngestRequest_Hello{Hello: &pb.Hello{
		PublicKey: a.signer.PublicKey(), KeyId: a.signer.KeyID(), AgentInstanceId: a.instance, NodeName: a.node, AgentVersion: "bench",
	}}}); err != nil {
		return false, err
	}
	ack, err := stream.Recv()
	if err != nil {
		return false, err
	}
	if r := ack.GetAck().GetRejectReason(); r != "" {
		s.rejected.Add(1)
		return false, fmt.Errorf("hello rejected: %s", r)
	}
	s.opened.Add(1)
	for {
		if n := a.newest.Load(); n != nil && n.seq > *sentSeq {
			if err := stream.Send(&pb.IngestRequest{Msg: &pb.IngestRequest_Report{Report: n.sr}}); err != nil {
				s.sendErrors.Add(1)
				return carried, err
			}
			*sentSeq = n.seq
			ack, err := stream.Recv()
			if err != nil {
				return carried, err
			}
			carried = true
			if ack.GetAck().GetRejectReason() != "" {
				s.rejected.Add(1)
			}
			continue
		}
		select {
		case <-ctx.Done():
			return carried, nil
		case <-wake:
		}
	}
}

// nodeStates is every node component's entries: component -> node ->
// status.
type nodeStates map[string]map[string]healthv1alpha1.Status

func readStates(ctx context.Context, hc versioned.Interface) (nodeStates, map[string]int, error) {
	out, sizes := nodeStates{}, map[string]int{}
	for _, comp := range report.NodeComponents {
		raw, err := hc.HealthV1alpha1().RESTClient().Get().Namespace(namespace).Resource("healths").Name(comp).DoRaw(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("get Health %s: %w", comp, err)
		}
		sizes[comp] = len(raw)
		h, err := hc.HealthV1alpha1().Healths(namespace).Get(ctx, comp, metav1.GetOptions{ResourceVersion: "0"})
		if err != nil {
			return nil, nil, fmt.Errorf("get Health %s: %w", comp, err)
		}
		out[comp] = map[string]healthv1alpha1.Status{}
		for n, ns := range h.Status.Nodes {
			out[comp][n] = ns.Status
		}
	}
	return out, sizes, nil
}

// writeCounts are the apiserver's writes (every verb but GET, LIST and
// WATCH) of Health objects and of Leases, from its apiserver_request_total.
func writeCounts(ctx context.Context, cs kubernetes.Interface) (healths, leases float64, err error) {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("apiserver metrics: %w", err)
	}
	mfs, err := benchproc.ParseMetrics(strings.NewReader(string(raw)))
	if err != nil {
		return 0, 0, fmt.Errorf("apiserver metrics: %w", err)
	}
	mf := mfs["apiserver_request_total"]
	if mf == nil {
		return 0, 0, fmt.Errorf("apiserver metrics: no apiserver_request_total")
	}
	for _, m := range mf.GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		switch l["verb"] {
		case "GET", "LIST", "WATCH", "CONNECT":
			continue
		}
		switch {
		case l["group"] == healthv1alpha1.SchemeGroupVersion.Group && l["resource"] == "healths":
			healths += m.GetCounter().GetValue()
		case l["group"] == "coordination.k8s.io" && l["resource"] == "leases":
			leases += m.GetCounter().GetValue()
		}
	}
	return healths, leases, nil
}

func leaseHolder(ctx context.Context, cs kubernetes.Interface) string {
	l, err := cs.CoordinationV1().Leases(namespace).Get(ctx, leaseName, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// quantile is quantile q of d in seconds (d is sorted in place); +Inf
// entries stand for what never happened.
func quantile(d []float64, q float64) float64 {
	if len(d) == 0 {
		return math.NaN()
	}
	slices.Sort(d)
	return d[int(q*float64(len(d)-1))]
}

// procCPU is a process's CPU seconds at the start of the fault window and
// at its end (or just before it was killed).
type procCPU struct {
	name       string
	pid        int
	start, end float64
}

func runFaults(b *testing.B, s faultSettings) {
	load, err := benchproc.LoadAvg()
	require.NoError(b, err)
	fmt.Printf("    load average before this run: %s\n", load)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	c := newCluster(ctx, b, s.nodes)
	// The bench's own reads (watches, the final reads of six objects) must
	// not queue behind client-go's default 5 requests/s.
	cfg := rest.CopyConfig(c.cp.Config)
	cfg.QPS, cfg.Burst = 50, 100
	hc, err := versioned.NewForConfig(cfg)
	require.NoError(b, err)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(b, err)

	procs := make([]*aggregatorProc, s.replicas)
	for i := range procs {
		procs[i] = startAggregator(b, c, fmt.Sprintf("replica-%d", i))
		defer procs[i].stop()
	}
	killed := -1
	defer func() {
		if b.Failed() {
			for i, p := range procs {
				if i != killed {
					benchproc.LogTail(b, p.logPath)
				}
			}
		}
	}()

	// The agents: the fifth that are not control-plane nodes and not silent
	// flap; the silent ones are taken from the rest, spread over the
	// cluster.
	sim := &faultSim{flapReports: s.flapReports}
	sim.agents = make([]*faultAgent, s.nodes)
	for i, a := range c.agents {
		sim.agents[i] = &faultAgent{agent: a, wake: make([]chan struct{}, s.replicas)}
		for r := range s.replicas {
			sim.agents[i].wake[r] = make(chan struct{}, 1)
		}
	}
	// Nodes 3.. in a fixed shuffle: the first flappers flap, the next
	// silent go silent.
	order := rand.New(rand.NewPCG(40, 3)).Perm(s.nodes - 3)
	var flappers, silent []*faultAgent
	for j, p := range order {
		a := sim.agents[3+p]
		switch {
		case j < s.flappers:
			a.flapper, a.lead = true, rand.IntN(2*s.flapReports)
			flappers = append(flappers, a)
		case j < s.flappers+s.silent:
			a.silent = true
			silent = append(silent, a)
		}
	}

	creds, err := tlsutil.ClientConfig(c.tls.CAFile, "127.0.0.1")
	require.NoError(b, err)
	actx, astop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var conns []*grpc.ClientConn
	defer func() {
		astop()
		wg.Wait()
		for _, cc := range conns {
			_ = cc.Close()
		}
	}()
	// The agents start 64 at a time, each batch once its streams are open
	// (or after 20 s): 10,000 agents dialing three replicas at the same
	// instant (30,000 TLS handshakes and hellos) starve a 2-core machine
	// for minutes, their dials and hellos time out and retry, and the
	// warm-up measures that, not the aggregator. A cluster's agents start
	// over minutes.
	conns = make([]*grpc.ClientConn, s.nodes*s.replicas)
	for i := range conns {
		conns[i], err = grpc.NewClient(procs[i%s.replicas].listen, append(wire.DialOptions(), grpc.WithTransportCredentials(credentials.NewTLS(creds)))...)
		require.NoError(b, err)
	}
	rampStart := time.Now()
	for i, a := range sim.agents {
		for r := range procs {
			cc := conns[i*s.replicas+r]
			wg.Add(1)
			go func() { defer wg.Done(); sim.send(actx, a, cc, a.wake[r]) }()
		}
		wg.Add(1)
		phase := time.Duration(rand.Int64N(int64(interval)))
		go func() { defer wg.Done(); sim.publish(actx, a, phase) }()
		if (i+1)%64 == 0 || i == len(sim.agents)-1 {
			want := int64((i + 1) * s.replicas)
			for t0 := time.Now(); sim.opened.Load() < want && time.Since(t0) < 20*time.Second; {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	fmt.Printf("    %d agents started, %d of %d streams open after %s; stream errors: %s\n", s.nodes, sim.opened.Load(), len(conns),
		time.Since(rampStart).Round(100*time.Millisecond), sim.errorSample())

	// Warm-up: a leader writes every node, all Healthy.
	start := time.Now()
	if !assert.Eventually(b, func() bool {
		h, err := hc.HealthV1alpha1().Healths(namespace).Get(ctx, report.ComponentNode, metav1.GetOptions{})
		return err == nil && len(h.Status.Nodes) == s.nodes && h.Status.Overall == healthv1alpha1.StatusHealthy
	}, 10*time.Minute, time.Second) {
		b.Fatalf("the node object never listed every node Healthy; %d streams open; stream errors: %s", sim.opened.Load(), sim.errorSample())
	}
	fmt.Printf("    warm-up: %d nodes on %d replicas in the Health objects after %s (leader %s)\n", s.nodes, s.replicas, time.Since(start).Round(time.Second), leaseHolder(ctx, cs))
	time.Sleep(10 * time.Second)
	baseline, _, err := readStates(ctx, hc)
	require.NoError(b, err)

	// The disk object's watch: every change of a node's status, as a
	// reader of the object sees it.
	silentSet := map[string]*faultAgent{}
	for _, a := range silent {
		silentSet[a.node] = a
	}
	byNode := map[string]*faultAgent{}
	for _, a := range sim.agents {
		byNode[a.node] = a
	}
	var (
		wmu         sync.Mutex
		seen        = map[string]healthv1alpha1.Status{}
		unknownAt   = map[string]time.Time{}
		falseUnkown = map[string]bool{}
		events      []time.Time
		frozen      bool
		mismatched  = -1
		settledAt   time.Time
	)
	expectDisk := func(a *faultAgent) healthv1alpha1.Status {
		switch {
		case a.silent:
			return healthv1alpha1.StatusUnknown
		case a.final.Load() == finalDegraded:
			return healthv1alpha1.StatusDegraded
		case a.final.Load() == finalHealthy:
			return healthv1alpha1.StatusHealthy
		}
		return baseline[report.ComponentDisk][a.node]
	}
	onEvent := func(h *healthv1alpha1.Health, at time.Time) {
		wmu.Lock()
		defer wmu.Unlock()
		events = append(events, at)
		for name, ns := range h.Status.Nodes {
			if seen[name] == ns.Status {
				continue
			}
			seen[name] = ns.Status
			a := byNode[name]
			if a == nil {
				continue
			}
			switch ns.Status {
			case healthv1alpha1.StatusUnknown:
				if a.silent {
					if _, ok := unknownAt[name]; !ok {
						unknownAt[name] = at
					}
				} else {
					falseUnkown[name] = true
				}
			case healthv1alpha1.StatusDegraded:
				if a.flapper {
					a.mu.Lock()
					for i := len(a.spells) - 1; i >= 0; i-- {
						if a.spells[i].sent.Before(at) {
							if a.spells[i].shown.IsZero() {
								a.spells[i].shown = at
							}
							break
						}
					}
					a.mu.Unlock()
				}
			}
		}
		if frozen {
			n := 0
			for _, a := range sim.agents {
				if seen[a.node] != expectDisk(a) {
					n++
				}
			}
			if n == 0 && mismatched != 0 {
				settledAt = at
			}
			mismatched = n
		}
	}
	wctx, wcancel := context.WithCancel(ctx)
	var wwg sync.WaitGroup
	wwg.Add(1)
	go func() {
		defer wwg.Done()
		for wctx.Err() == nil {
			w, err := hc.HealthV1alpha1().Healths(namespace).Watch(wctx, metav1.ListOptions{FieldSelector: "metadata.name=" + report.ComponentDisk})
			if err != nil {
				time.Sleep(time.Second)
				continue
			}
			for ev := range w.ResultChan() {
				if h, ok := ev.Object.(*healthv1alpha1.Health); ok {
					onEvent(h, time.Now())
				}
			}
			w.Stop()
		}
	}()
	defer func() { wcancel(); wwg.Wait() }()

	// Peak RSS of the replicas and of the simulator, every 2 s.
	var peakRSS, simPeakRSS atomic.Int64
	sctx, sstop := context.WithCancel(ctx)
	defer sstop()
	go func() {
		for sctx.Err() == nil {
			for i, p := range procs {
				if i == killed {
					continue
				}
				if _, rss, err := benchproc.Stat(p.pid); err == nil && rss > peakRSS.Load() {
					peakRSS.Store(rss)
				}
			}
			if _, rss, err := benchproc.Stat(os.Getpid()); err == nil && rss > simPeakRSS.Load() {
				simPeakRSS.Store(rss)
			}
			select {
			case <-sctx.Done():
			case <-time.After(2 * time.Second):
			}
		}
	}()

	// The window starts.
	etcdPid, apiPid := c.cp.Pids()
	cpus := []*procCPU{{name: "apiserver", pid: apiPid}, {name: "etcd", pid: etcdPid}, {name: "simulator", pid: os.Getpid()}}
	replicaCPU := make([]*procCPU, len(procs))
	for i, p := range procs {
		replicaCPU[i] = &procCPU{name: p.identity, pid: p.pid}
	}
	for _, pc := range append(cpus, replicaCPU...) {
		pc.start, _, err = benchproc.Stat(pc.pid)
		require.NoError(b, err)
	}
	accepted := make([][2]float64, len(procs))
	for i, p := range procs {
		m, err := benchproc.Gather(p.metricsAddr)
		require.NoError(b, err)
		accepted[i][0] = benchproc.Value(m, "cozy_health_reports_accepted_total", nil)
	}
	busy0, total0, err := benchproc.MachineCPU()
	require.NoError(b, err)
	hw0, lw0, err := writeCounts(ctx, cs)
	require.NoError(b, err)
	late0 := sim.lateCounts()
	rej0, rec0, sendErr0 := sim.rejected.Load(), sim.reconnects.Load(), sim.sendErrors.Load()
	faultStart := time.Now()

	// 1. Flapping.
	sim.flapping.Store(true)
	fmt.Printf("    %d nodes flap (%d reports Degraded, %d Healthy)\n", len(flappers), s.flapReports, s.flapReports)
	time.Sleep(s.window)

	// 2. Silence, at once.
	silentStart := time.Now()
	for _, a := range silent {
		a.stop.Store(true)
	}
	fmt.Printf("    %d nodes silent at %s\n", len(silent), silentStart.Format("15:04:05.000"))
	ok := false
	for time.Since(silentStart) < 2*time.Minute {
		wmu.Lock()
		n := len(unknownAt)
		wmu.Unlock()
		if n == len(silent) {
			ok = true
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	var toUnknown []float64
	wmu.Lock()
	for _, a := range silent {
		firstMissed := time.Unix(0, a.lastSent.Load()).Add(interval)
		if at, shown := unknownAt[a.node]; shown {
			toUnknown = append(toUnknown, at.Sub(firstMissed).Seconds())
		} else {
			toUnknown = append(toUnknown, math.Inf(1))
		}
	}
	wmu.Unlock()
	if !ok {
		b.Errorf("%d of %d silent nodes read Unknown within 2 minutes", len(unknownAt), len(silent))
	}
	time.Sleep(5 * time.Second)

	// 3. The Lease holder killed; the flappers' final states.
	leader := leaseHolder(ctx, cs)
	for i, p := range procs {
		if p.identity == leader {
			killed = i
		}
	}
	require.GreaterOrEqual(b, killed, 0, "the Lease holder %q is none of the replicas", leader)
	victim := procs[killed]
	if m, err := benchproc.Gather(victim.metricsAddr); err == nil {
		accepted[killed][1] = benchproc.Value(m, "cozy_health_reports_accepted_total", nil)
	}
	replicaCPU[killed].end, _, err = benchproc.Stat(victim.pid)
	require.NoError(b, err)
	recKill := sim.reconnects.Load()
	require.NoError(b, syscall.Kill(victim.pid, syscall.SIGKILL))
	killAt := time.Now()
	wmu.Lock()
	for i, a := range flappers {
		if i%2 == 0 {
			a.final.Store(finalDegraded)
		} else {
			a.final.Store(finalHealthy)
		}
	}
	frozen = true
	wmu.Unlock()
	fmt.Printf("    killed the leader %s (pid %d) with SIGKILL at %s; every flapper turned to its final state\n", leader, victim.pid, killAt.Format("15:04:05.000"))
	var takeover time.Time
	newLeader := ""
	for time.Since(killAt) < 2*time.Minute {
		if h := leaseHolder(ctx, cs); h != "" && h != leader {
			takeover, newLeader = time.Now(), h
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.NotEmpty(b, newLeader, "no replica took the Lease within 2 minutes of the kill")
	var firstWrite time.Time
	for time.Since(killAt) < 2*time.Minute && firstWrite.IsZero() {
		wmu.Lock()
		for _, at := range events {
			if at.After(takeover) {
				firstWrite = at
				break
			}
		}
		wmu.Unlock()
		time.Sleep(100 * time.Millisecond)
	}

	// 4. Settle, then compare.
	time.Sleep(time.Until(killAt.Add(s.settle)))
	end := time.Now()
	elapsed := end.Sub(faultStart).Seconds()
	hw1, lw1, err := writeCounts(ctx, cs)
	require.NoError(b, err)
	busy1, total1, err := benchproc.MachineCPU()
	require.NoError(b, err)
	late1 := sim.lateCounts()
	var applyMean float64
	for i, p := range procs {
		if i == killed {
			continue
		}
		m, err := benchproc.Gather(p.metricsAddr)
		require.NoError(b, err)
		accepted[i][1] = benchproc.Value(m, "cozy_health_reports_accepted_total", nil)
		if p.identity == newLeader {
			// The next leader's mean status apply, since it took over.
			applyMean = benchproc.Value(m, "cozy_health_write_duration_seconds", nil)
		}
	}
	for i, pc := range append(cpus, replicaCPU...) {
		if i-len(cpus) == killed {
			continue
		}
		pc.end, _, err = benchproc.Stat(pc.pid)
		require.NoError(b, err)
	}
	final, sizes, err := readStates(ctx, hc)
	require.NoError(b, err)
	lost := 0
	var lostSample []string
	for _, comp := range report.NodeComponents {
		for node, before := range baseline[comp] {
			a := byNode[node]
			want := before
			switch {
			case a.silent:
				want = healthv1alpha1.StatusUnknown
			case comp == report.ComponentDisk && a.flapper:
				want = expectDisk(a)
			}
			if got := final[comp][node]; got != want {
				lost++
				if len(lostSample) < 5 {
					lostSample = append(lostSample, fmt.Sprintf("%s %s: %s, want %s", comp, node, got, want))
				}
			}
		}
	}

	// The spells' figures: those whole before the kill (flapping, then
	// with the silent nodes), and those the kill fell in or that began at
	// it and lasted (the next leader writes them). A spell the freeze cut
	// short (its flapper's final state Healthy) is the bench's doing: in
	// neither.
	var worsen, worsenFailover []float64
	missed := 0
	spellLen := time.Duration(s.flapReports) * interval
	for _, a := range flappers {
		a.mu.Lock()
		for _, sp := range a.spells {
			d := math.Inf(1)
			if !sp.shown.IsZero() {
				d = sp.shown.Sub(sp.sent).Seconds()
			}
			switch {
			case !sp.sent.Add(spellLen).After(killAt):
				worsen = append(worsen, d)
				if sp.shown.IsZero() {
					missed++
				}
			case a.final.Load() == finalDegraded:
				worsenFailover = append(worsenFailover, d)
			}
		}
		a.mu.Unlock()
	}
	largest, largestName := 0, ""
	var sizeList []string
	for _, comp := range report.NodeComponents {
		sizeList = append(sizeList, fmt.Sprintf("%s %d", comp, sizes[comp]))
		if sizes[comp] > largest {
			largest, largestName = sizes[comp], comp
		}
	}
	var replicasCPU float64
	for i, pc := range replicaCPU {
		until := elapsed
		if i == killed {
			until = killAt.Sub(faultStart).Seconds()
		}
		replicasCPU += (pc.end - pc.start) / until
	}
	var reportsPerSec []string
	for i := range procs {
		until := elapsed
		if i == killed {
			until = killAt.Sub(faultStart).Seconds()
		}
		reportsPerSec = append(reportsPerSec, fmt.Sprintf("%s %.0f", procs[i].identity, (accepted[i][1]-accepted[i][0])/until))
	}
	cpuOf := func(pc *procCPU) float64 { return (pc.end - pc.start) / elapsed * 100 }
	wmu.Lock()
	falseUnknown, settled, stillMismatched := len(falseUnkown), settledAt, mismatched
	wmu.Unlock()
	writesPerSec := (hw1 - hw0) / elapsed

	b.ReportMetric(quantile(toUnknown, 0.5), "silent_to_unknown_p50_s")
	b.ReportMetric(quantile(toUnknown, 1), "silent_to_unknown_max_s")
	b.ReportMetric(quantile(worsen, 0.5), "worsening_to_health_p50_s")
	b.ReportMetric(quantile(worsen, 0.9), "worsening_to_health_p90_s")
	b.ReportMetric(float64(missed), "worsenings_missed")
	b.ReportMetric(quantile(worsenFailover, 0.5), "failover_worsening_p50_s")
	b.ReportMetric(float64(lost), "lost_writes")
	b.ReportMetric(writesPerSec, "writes/s")
	b.ReportMetric((lw1-lw0)/elapsed, "lease_writes/s")
	b.ReportMetric(float64(largest)/1024, "largest_object_KiB")
	b.ReportMetric(takeover.Sub(killAt).Seconds(), "lease_takeover_s")
	if !firstWrite.IsZero() {
		b.ReportMetric(firstWrite.Sub(killAt).Seconds(), "failover_first_write_s")
	}
	b.ReportMetric(float64(falseUnknown), "false_unknown_nodes")
	b.ReportMetric(replicasCPU*100, "replicas_cpu_%core")
	b.ReportMetric(cpuOf(cpus[0]), "apiserver_cpu_%core")
	b.ReportMetric(cpuOf(cpus[1]), "etcd_cpu_%core")
	b.ReportMetric(cpuOf(cpus[2]), "simulator_cpu_%core")
	b.ReportMetric((busy1-busy0)/(total1-total0)*100, "machine_busy_%")
	b.ReportMetric(lateQuantile(late0, late1, 0.99), "sim_late_p99_s")
	b.ReportMetric(float64(peakRSS.Load())/(1<<20), "replica_peak_rss_MiB")
	b.ReportMetric(float64(s.replicas), "replicas")
	b.ReportMetric(applyMean, "leader_apply_mean_s")
	b.ReportMetric(load.Load1, "load1_before")

	say := func(format string, args ...any) { fmt.Printf("    "+format+"\n", args...) }
	say("aggregator under faults: %d nodes, %d replicas (each agent on its own TLS connection to each: %d connections), %s from the first fault to the comparison:",
		s.nodes, s.replicas, s.nodes*s.replicas, time.Duration(elapsed*float64(time.Second)).Round(time.Second))
	say("  silent -> Unknown       p50 %.1f s, max %.1f s over %d nodes silent at once, from each one's first missed report (target <= 15 s)",
		quantile(toUnknown, 0.5), quantile(toUnknown, 1), len(silent))
	say("  worsening -> Health     p50 %.1f s, p90 %.1f s over %d degraded spells of %d flapping nodes, whole before the kill (damper hold 10 s included); %d never shown (counted as infinite); the kill in them or before them: p50 %.1f s over %d",
		quantile(worsen, 0.5), quantile(worsen, 0.9), len(worsen), len(flappers), missed, quantile(worsenFailover, 0.5), len(worsenFailover))
	say("  leader killed           %s (SIGKILL); Lease taken by %s after %.1f s; its first write of the disk object %.1f s after the kill",
		leader, newLeader, takeover.Sub(killAt).Seconds(), firstWrite.Sub(killAt).Seconds())
	say("  lost writes             %d entries of %d nodes x %d objects differ from what they must read %s after the kill%s; the disk object matched everywhere %s after the kill (%d still differing at its last event)",
		lost, s.nodes, len(report.NodeComponents), s.settle, strings.Join(append([]string{""}, lostSample...), "; "), sinceOrNever(settled, killAt), stillMismatched)
	say("  apiserver writes        %.2f Health writes/s (target <= 2 /s), %.2f Lease writes/s (the apiserver's apiserver_request_total); the next leader's mean status apply %.2f s",
		writesPerSec, (lw1-lw0)/elapsed, applyMean)
	say("  Health objects          bytes as JSON: %s; largest %s %.0f KiB (etcd's request limit 1536 KiB)", strings.Join(sizeList, ", "), largestName, float64(largest)/1024)
	say("  false Unknown           %d nodes that never went silent read Unknown at some point (the simulator late, or a replica's view)", falseUnknown)
	say("  reports accepted /s     %s (killed: until the kill)", strings.Join(reportsPerSec, ", "))
	say("  CPU (%% of a core)      replicas together %.1f (%s), apiserver %.1f, etcd %.1f, simulator %.1f; the machine %.0f %% busy (%d cores)",
		replicasCPU*100, cpuList(replicaCPU, elapsed, killAt.Sub(faultStart).Seconds(), killed), cpuOf(cpus[0]), cpuOf(cpus[1]), cpuOf(cpus[2]), (busy1-busy0)/(total1-total0)*100, runtime.NumCPU())
	say("  simulator               reports late against their schedule: p50 <= %s s, p99 <= %s s, max %.2f s; %d not sent (over an interval late); stream reconnects %d before the kill, %d after (to the killed replica, backing off); %d rejected acks, %d send errors; peak RSS %.0f MiB",
		fmtBound(lateQuantile(late0, late1, 0.5)), fmtBound(lateQuantile(late0, late1, 0.99)), time.Duration(sim.maxLate.Load()).Seconds(), sim.skipped.Load(),
		recKill-rec0, sim.reconnects.Load()-recKill, sim.rejected.Load()-rej0, sim.sendErrors.Load()-sendErr0, float64(simPeakRSS.Load())/(1<<20))
	say("  replicas' peak RSS      %.0f MiB (the largest)", float64(peakRSS.Load())/(1<<20))
	say("  stream errors           %s", sim.errorSample())
	if lost > 0 {
		b.Errorf("%d lost writes %s after the kill: %s", lost, s.settle, strings.Join(lostSample, "; "))
	}
}

func sinceOrNever(t, from time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return fmt.Sprintf("%.1f s", t.Sub(from).Seconds())
}

func fmtBound(v float64) string {
	if math.IsInf(v, 1) {
		return fmt.Sprintf("> %.1f", lateBounds[len(lateBounds)-1].Seconds())
	}
	return fmt.Sprintf("%.2f", v)
}

func cpuList(pcs []*procCPU, elapsed, untilKill float64, killed int) string {
	var out []string
	for i, pc := range pcs {
		d := elapsed
		suffix := ""
		if i == killed {
			d, suffix = untilKill, ", killed"
		}
		out = append(out, fmt.Sprintf("%s %.1f%s", pc.name, (pc.end-pc.start)/d*100, suffix))
	}
	return strings.Join(out, ", ")
}
