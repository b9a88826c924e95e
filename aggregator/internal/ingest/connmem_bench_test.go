package ingest

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	rtmetrics "runtime/metrics"
	"runtime/pprof"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/signing"
	"github.com/cozystack/cozy-health/pkg/tlsutil"
	"github.com/cozystack/cozy-health/pkg/wire"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// BenchmarkConnMemory measures what one agent connection costs the ingest
// server: live heap and goroutine stacks after a collection, with N agents
// connected (each on its own TLS connection, one stream, a 20-observation
// report every 5 s, as agents do) minus the same once every connection
// is closed. The agents run in a child process (this test binary again,
// TestConnMemoryAgents), so none of their memory is counted. The server is
// the aggregator's: ServerOptions, the verifiers, a sink keeping every
// node's latest report (COZY_HEALTH_BENCH_CONN_STREAMS, default 2000;
// COZY_HEALTH_BENCH_PROFILE_DIR: heap profiles with and without the
// connections, to diff with `go tool pprof -base`). What the agents send
// before the measurement: COZY_HEALTH_BENCH_CONN_ROUNDS,
// COZY_HEALTH_BENCH_CONN_WARM_INTERVAL and COZY_HEALTH_BENCH_CONN_OBSERVATIONS
// (see TestConnMemoryAgents); COZY_HEALTH_BENCH_CONN_CPU_WINDOW (e.g. 10s)
// also measures the server's CPU per report over that long.
//
//	go test -run '^$' -bench BenchmarkConnMemory -benchtime 1x ./aggregator/internal/ingest/
func BenchmarkConnMemory(b *testing.B) {
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("COZY_HEALTH_BENCH_CONN_STREAMS")); err == nil && v > 0 {
		n = v
	}
	if os.Getenv("COZY_HEALTH_BENCH_PROFILE_DIR") != "" {
		// Fine-grained heap profiles: one sample per 512 bytes allocated.
		runtime.MemProfileRate = 512
	}
	dir := b.TempDir()
	for i := range n {
		if _, err := signing.WriteDevKeyPair(dir, connNode(i)); err != nil {
			b.Fatal(err)
		}
	}
	ts := startServer(b, Config{InsecureDevKeysDir: dir, RatePerNode: 1e9, RateBurst: 1 << 30},
		Deps{Sink: &latestSink{latest: map[string]*report.NodeReport{}}})
	base := liveMemory()
	writeHeap(b, "heap-base.pprof")
	for b.Loop() {
		child := exec.Command(os.Args[0], "-test.run=^TestConnMemoryAgents$", "-test.v")
		child.Env = append(os.Environ(), "COZY_HEALTH_CONNMEM_ADDR="+ts.addr, "COZY_HEALTH_CONNMEM_CA="+ts.files.CAFile,
			"COZY_HEALTH_CONNMEM_KEYS="+dir, "COZY_HEALTH_CONNMEM_STREAMS="+strconv.Itoa(n))
		stdin, err := child.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		stdout, err := child.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		child.Stderr = os.Stderr
		if err := child.Start(); err != nil {
			b.Fatal(err)
		}
		// The child prints "connected" once every stream has its hello
		// acknowledged and two rounds of reports went through.
		sc := bufio.NewScanner(stdout)
		ready := false
		for sc.Scan() {
			if sc.Text() == "connected" {
				ready = true
				break
			}
		}
		if !ready {
			_ = child.Process.Kill()
			_ = child.Wait()
			b.Fatal("the agents' process ended before every stream was connected")
		}
		if w, err := time.ParseDuration(os.Getenv("COZY_HEALTH_BENCH_CONN_CPU_WINDOW")); err == nil && w > 0 {
			// The server's CPU while the agents report every 5 s: what a
			// report costs it, TLS reads and writes included.
			c0, t0 := cpuTime(), time.Now()
			time.Sleep(w)
			cpu, wall := cpuTime()-c0, time.Since(t0)
			perReport := cpu.Seconds() / (wall.Seconds() * float64(n) / 5)
			fmt.Printf("    server CPU %.1f ms/s while %d agents report every 5 s: %.1f µs per report\n", cpu.Seconds()*1000/wall.Seconds(), n, perReport*1e6)
			b.ReportMetric(perReport*1e6, "server_cpu_µs/report")
		}
		with := liveMemory()
		writeHeap(b, "heap-conns.pprof")
		_ = stdin.Close() // the child closes its connections and exits
		if err := child.Wait(); err != nil {
			b.Fatalf("agents' process: %v", err)
		}
		var without memSample
		deadline := time.Now().Add(time.Minute)
		for {
			without = liveMemory()
			if without.goroutines < base.goroutines+20 || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		writeHeap(b, "heap-noconns.pprof")
		heap := (with.heap - without.heap) / float64(n)
		stack := (with.stacks - without.stacks) / float64(n)
		gor := (with.goroutines - without.goroutines) / float64(n)
		fmt.Printf("    %d connections: %.1f KiB heap + %.1f KiB stack + %.2f goroutines per connection (%.1f MiB in all); state of %d nodes %.1f MiB heap (%.1f KiB per node)\n",
			n, heap/1024, stack/1024, gor, (with.heap+with.stacks-without.heap-without.stacks)/(1<<20), n,
			(without.heap-base.heap)/(1<<20), (without.heap-base.heap)/float64(n)/1024)
		b.ReportMetric(heap/1024, "heap_KiB/conn")
		b.ReportMetric(stack/1024, "stack_KiB/conn")
		b.ReportMetric((heap+stack)/1024, "live_KiB/conn")
		b.ReportMetric(gor, "goroutines/conn")
	}
}

type memSample struct{ heap, stacks, goroutines float64 }

// liveMemory collects twice and reads the live heap, the goroutine stacks
// and the goroutine count.
func liveMemory() memSample {
	runtime.GC()
	runtime.GC()
	s := []rtmetrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/stacks:bytes"},
		{Name: "/sched/goroutines:goroutines"},
	}
	rtmetrics.Read(s)
	return memSample{heap: float64(s[0].Value.Uint64()), stacks: float64(s[1].Value.Uint64()), goroutines: float64(s[2].Value.Uint64())}
}

func writeHeap(b *testing.B, name string) {
	dir := os.Getenv("COZY_HEALTH_BENCH_PROFILE_DIR")
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

func connNode(i int) string { return fmt.Sprintf("node-%05d", i) }

// TestConnMemoryAgents is BenchmarkConnMemory's agents, in a process of
// their own; it does nothing unless that benchmark started it.
func TestConnMemoryAgents(t *testing.T) {
	addr := os.Getenv("COZY_HEALTH_CONNMEM_ADDR")
	if addr == "" {
		return
	}
	n, err := strconv.Atoi(os.Getenv("COZY_HEALTH_CONNMEM_STREAMS"))
	if err != nil {
		t.Fatal(err)
	}
	tc, err := tlsutil.ClientConfig(os.Getenv("COZY_HEALTH_CONNMEM_CA"), "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("COZY_HEALTH_CONNMEM_KEYS")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The agents send COZY_HEALTH_BENCH_CONN_ROUNDS reports (default 2)
	// COZY_HEALTH_BENCH_CONN_WARM_INTERVAL apart (default: the interval)
	// before the connections are measured, then one every interval:
	// many quick reports show a connection's state after it has sent a
	// few hundred KiB (crypto/tls writes small records only for a new
	// connection's first 128 KiB). COZY_HEALTH_BENCH_CONN_OBSERVATIONS
	// (default 20) sets a report's size.
	const interval = 5 * time.Second
	p := agentParams{interval: interval, warm: interval, rounds: 2, observations: benchObservations}
	if d, err := time.ParseDuration(os.Getenv("COZY_HEALTH_BENCH_CONN_WARM_INTERVAL")); err == nil && d > 0 {
		p.warm = d
	}
	if v, err := strconv.Atoi(os.Getenv("COZY_HEALTH_BENCH_CONN_ROUNDS")); err == nil && v > 0 {
		p.rounds = uint64(v)
	}
	if v, err := strconv.Atoi(os.Getenv("COZY_HEALTH_BENCH_CONN_OBSERVATIONS")); err == nil && v > 0 {
		p.observations = v
	}
	var connected, rounds sync.WaitGroup
	errs := make(chan error, n)
	connected.Add(n)
	rounds.Add(n)
	for i := range n {
		node := connNode(i)
		signer, err := signing.LoadKeyFile(filepath.Join(dir, node+signing.DevPrivateKeySuffix))
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient("passthrough:///"+addr, append(wire.DialOptions(), grpc.WithTransportCredentials(credentials.NewTLS(tc)))...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		go func() {
			errs <- connAgent(ctx, conn, signer, node, p, &connected, &rounds)
		}()
	}
	done := make(chan struct{})
	go func() { connected.Wait(); rounds.Wait(); close(done) }()
	select {
	case <-done:
	case err := <-errs:
		t.Fatal(err)
	}
	fmt.Println("connected")
	// Until the benchmark closes stdin.
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
}

// agentParams are what a bench agent sends: p.rounds reports p.warm
// apart, then one every p.interval, of p.observations observations.
type agentParams struct {
	interval, warm time.Duration
	rounds         uint64
	observations   int
}

// connAgent says hello, then sends reports (phase random), acknowledging
// connected after the hello and rounds after p.rounds reports.
func connAgent(ctx context.Context, conn *grpc.ClientConn, signer *signing.Signer, node string, p agentParams, connected, rounds *sync.WaitGroup) error {
	st, err := pb.NewIngestServiceClient(conn).Ingest(ctx)
	if err != nil {
		return err
	}
	instance := "inst-" + node
	if err := st.Send(&pb.IngestRequest{Msg: &pb.IngestRequest_Hello{Hello: &pb.Hello{
		PublicKey: signer.PublicKey(), KeyId: signer.KeyID(), AgentInstanceId: instance, NodeName: node, AgentVersion: "bench",
	}}}); err != nil {
		return err
	}
	if resp, err := st.Recv(); err != nil || !resp.GetAck().GetAccepted() {
		return fmt.Errorf("%s hello: %v %v", node, err, resp)
	}
	connected.Done()
	t := time.NewTimer(time.Duration(rand.Int64N(int64(p.warm))))
	defer t.Stop()
	for seq := uint64(1); ; seq++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		sr, err := signer.SignReport(sampleReport(node, instance, seq, time.Now(), p.observations))
		if err != nil {
			return err
		}
		if err := st.Send(&pb.IngestRequest{Msg: &pb.IngestRequest_Report{Report: sr}}); err != nil {
			return err
		}
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		if !resp.GetAck().GetAccepted() {
			return fmt.Errorf("%s report %d rejected: %s", node, seq, resp.GetAck().GetRejectReason())
		}
		if seq == p.rounds {
			rounds.Done()
		}
		if seq < p.rounds {
			t.Reset(p.warm)
		} else {
			t.Reset(p.interval)
		}
	}
}
