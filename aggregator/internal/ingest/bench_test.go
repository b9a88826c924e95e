package ingest

import (
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/cozystack/cozy-health/aggregator/internal/ingest/verify"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/signing"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// The ingest benchmarks (make bench-ingest) measure reports verified and
// accepted per CPU-second (= per second per core) through the real
// per-report path of a stream, next to the bare cost of what cannot be
// avoided (ed25519 verification + protobuf decode of the same reports)
// measured in the same run on the same reports, chunk by chunk. Both are
// timed in process CPU time (getrusage), so other processes competing for
// the cores do not skew the comparison, and garbage collection on other
// threads is charged to whoever caused it. ratio = bare CPU / path CPU; the
// goal is >= 0.7.
//
// Reports carry 20 observations (about 3.5 KB serialized), like an agent on a
// control-plane node with LINSTOR volumes.

const (
	benchNodes        = 1000
	benchChunk        = 512
	benchObservations = 20
)

// latestSink keeps the newest report per node, like the state does.
type latestSink struct {
	mu     sync.Mutex
	latest map[string]*report.NodeReport
}

func (s *latestSink) Accept(r *report.NodeReport, _ time.Time) {
	s.mu.Lock()
	s.latest[r.NodeName] = r
	s.mu.Unlock()
}

// benchFleet is benchNodes agents with their sessions on one server.
type benchFleet struct {
	keys     []*signing.Signer
	sessions []*session
	seq      []uint64
	next     int
}

func newBenchFleet(b *testing.B) (*benchFleet, string) {
	b.Helper()
	dir := b.TempDir()
	f := &benchFleet{seq: make([]uint64, benchNodes)}
	for i := range benchNodes {
		node := fmt.Sprintf("node-%04d", i)
		p, err := signing.WriteDevKeyPair(dir, node)
		if err != nil {
			b.Fatal(err)
		}
		k, err := signing.LoadKeyFile(p)
		if err != nil {
			b.Fatal(err)
		}
		f.keys = append(f.keys, k)
		f.sessions = append(f.sessions, &session{Session: verify.Session{Node: node, Key: k.VerifyKey(), KeyID: k.KeyID(), Instance: "inst-" + node}})
	}
	return f, dir
}

// chunk signs n next reports round-robin over the fleet.
func (f *benchFleet) chunk(b *testing.B, n int) ([]*session, []*pb.SignedReport) {
	sess := make([]*session, n)
	srs := make([]*pb.SignedReport, n)
	now := time.Now()
	for i := range n {
		j := f.next % len(f.keys)
		f.next++
		f.seq[j]++
		sr, err := f.keys[j].SignReport(sampleReport(f.sessions[j].Node, f.sessions[j].Instance, f.seq[j], now, benchObservations))
		if err != nil {
			b.Fatal(err)
		}
		sess[i], srs[i] = f.sessions[j], sr
	}
	return sess, srs
}

// bare is the unavoidable work: verify and decode.
func bare(b *testing.B, sess []*session, srs []*pb.SignedReport) {
	for i, sr := range srs {
		if err := signing.Verify(sess[i].Key.PublicKey(), sr.GetPayload(), sr.GetSignature()); err != nil {
			b.Fatal(err)
		}
		var p pb.NodeReport
		if err := proto.Unmarshal(sr.GetPayload(), &p); err != nil {
			b.Fatal(err)
		}
	}
}

func benchServer(b *testing.B, dir string) *Server {
	srv, err := New(Config{
		TokenAudience: DefaultTokenAudience, AgentServiceAccount: DefaultAgentServiceAccount, InsecureDevKeysDir: dir,
		// The bucket is exercised but never empties: this measures cost, not
		// policy.
		RatePerNode: 1e9, RateBurst: 1 << 30,
	}, Deps{Sink: &latestSink{latest: map[string]*report.NodeReport{}}, Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Stop)
	return srv
}

// BenchmarkIngestPath drives the stream's per-report path (size check,
// rate bucket, key id, ed25519 verify, decode, domain conversion, node,
// instance, skew and replay checks, sink, ack) on one goroutine.
func BenchmarkIngestPath(b *testing.B) {
	f, dir := newBenchFleet(b)
	srv := benchServer(b, dir)
	var bareCPU, pathCPU time.Duration
	n := 0
	b.ReportAllocs()
	b.ResetTimer()
	for n < b.N {
		b.StopTimer()
		sess, srs := f.chunk(b, min(benchChunk, b.N-n))
		measureBare := func() {
			runtime.GC()
			c0 := cpuTime()
			bare(b, sess, srs)
			bareCPU += cpuTime() - c0
		}
		// Alternate which loop goes first, so neither always finds the
		// payloads warmer in cache.
		if (n/benchChunk)%2 == 0 {
			measureBare()
		}
		runtime.GC()
		c0 := cpuTime()
		b.StartTimer()
		for i, sr := range srs {
			if ack := srv.handleReport(sess[i], sr).GetAck(); !ack.GetAccepted() {
				b.Fatalf("report rejected: %s", ack.GetRejectReason())
			}
		}
		b.StopTimer()
		pathCPU += cpuTime() - c0
		if (n/benchChunk)%2 == 1 {
			measureBare()
		}
		n += len(srs)
	}
	b.ReportMetric(float64(n)/pathCPU.Seconds(), "path-reports/cpu-s")
	b.ReportMetric(float64(n)/bareCPU.Seconds(), "bare-verify+decode/cpu-s")
	b.ReportMetric(bareCPU.Seconds()/pathCPU.Seconds(), "ratio")
}

// BenchmarkIngestGRPC sends the same kind of reports through a real
// in-process gRPC stream over loopback TLS, pipelined (the agent does not
// wait for an ack before the next report), 100 streams round-robin. Client
// and server share the process, so the per-core figure divides by the CPU
// time of the whole process (getrusage), client-side TLS and marshalling
// included: an upper bound of the server's cost.
func BenchmarkIngestGRPC(b *testing.B) {
	f, dir := newBenchFleet(b)
	const streams = 100
	ts := startServer(b, Config{InsecureDevKeysDir: dir, RatePerNode: 1e9, RateBurst: 1 << 30},
		Deps{Sink: &latestSink{latest: map[string]*report.NodeReport{}}})
	agents := make([]*testAgent, streams)
	for i := range streams {
		a, ack, err := connect(b, ts, f.keys[i], f.sessions[i].Node, "")
		if err != nil || !ack.GetAccepted() {
			b.Fatalf("hello: %v %v", err, ack)
		}
		agents[i] = a
		f.sessions[i].Instance = a.instance
	}
	// Only the first `streams` nodes have a stream here.
	f.sessions = f.sessions[:streams]
	f.keys = f.keys[:streams]
	f.seq = f.seq[:streams]
	var bareCPU, pathDur, cpuDur time.Duration
	n := 0
	b.ResetTimer()
	for n < b.N {
		b.StopTimer()
		sess, srs := chunkFor(b, f, min(benchChunk, b.N-n), streams)
		runtime.GC()
		c0 := cpuTime()
		bare(b, sess, srs)
		runtime.GC()
		cpu0 := cpuTime()
		bareCPU += cpu0 - c0
		t1 := time.Now()
		b.StartTimer()
		var wg sync.WaitGroup
		for s := range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a := agents[s]
				sent := 0
				for i := s; i < len(srs); i += streams {
					if err := a.stream.Send(&pb.IngestRequest{Msg: &pb.IngestRequest_Report{Report: srs[i]}}); err != nil {
						b.Error(err)
						return
					}
					sent++
				}
				for range sent {
					resp, err := a.stream.Recv()
					if err != nil {
						b.Error(err)
						return
					}
					if !resp.GetAck().GetAccepted() {
						b.Errorf("rejected: %s", resp.GetAck().GetRejectReason())
					}
				}
			}()
		}
		wg.Wait()
		b.StopTimer()
		pathDur += time.Since(t1)
		cpuDur += cpuTime() - cpu0
		n += len(srs)
	}
	b.ReportMetric(float64(n)/pathDur.Seconds(), "grpc-reports/s-wall")
	b.ReportMetric(float64(n)/cpuDur.Seconds(), "grpc-reports/cpu-s")
	b.ReportMetric(float64(n)/bareCPU.Seconds(), "bare-verify+decode/cpu-s")
	b.ReportMetric(bareCPU.Seconds()/cpuDur.Seconds(), "ratio")
}

// chunkFor signs n reports round-robin over the first streams nodes so that
// report i belongs to stream i%streams.
func chunkFor(b *testing.B, f *benchFleet, n, streams int) ([]*session, []*pb.SignedReport) {
	f.next -= f.next % streams
	return f.chunk(b, n)
}

// cpuTime is the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
