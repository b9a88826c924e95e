package ingest

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/cozystack/cozy-health/pkg/metrictest"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/signing"
	"github.com/cozystack/cozy-health/pkg/tlsutil"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// recordingSink is the state side of ingest in tests: it keeps every
// accepted report.
type recordingSink struct {
	mu     sync.Mutex
	byNode map[string][]*report.NodeReport
}

func newRecordingSink() *recordingSink {
	return &recordingSink{byNode: map[string][]*report.NodeReport{}}
}

func (s *recordingSink) Accept(r *report.NodeReport, _ time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byNode[r.NodeName] = append(s.byNode[r.NodeName], r)
}

func (s *recordingSink) count(node string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byNode[node])
}

func (s *recordingSink) seqs(node string) []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []uint64
	for _, r := range s.byNode[node] {
		out = append(out, r.Sequence)
	}
	return out
}

// testServer is a real ingest server on a loopback TLS listener.
type testServer struct {
	addr  string
	files tlsutil.Files
	reg   *prometheus.Registry
	srv   *Server
	sink  *recordingSink
	logs  *observer.ObservedLogs
	grpc  *grpc.Server
}

// startServer starts ingest with cfg (TLS files filled in) and deps (sink,
// registry and logger filled in when empty).
func startServer(t testing.TB, cfg Config, deps Deps) *testServer {
	t.Helper()
	return startServerWith(t, cfg, deps, nil)
}

// startServerWith is startServer that lets register add services to the
// gRPC server before it serves.
func startServerWith(t testing.TB, cfg Config, deps Deps, register func(*grpc.Server)) *testServer {
	t.Helper()
	files, err := tlsutil.WriteServing(t.TempDir(), "127.0.0.1")
	require.NoError(t, err)
	cfg.TLSCertFile, cfg.TLSKeyFile = files.CertFile, files.KeyFile
	if cfg.TokenAudience == "" {
		cfg.TokenAudience = DefaultTokenAudience
	}
	if cfg.AgentServiceAccount == "" {
		cfg.AgentServiceAccount = DefaultAgentServiceAccount
	}
	ts := &testServer{files: files, reg: prometheus.NewRegistry(), sink: newRecordingSink()}
	if deps.Sink == nil {
		deps.Sink = ts.sink
	}
	deps.Registerer = ts.reg
	core, logs := observer.New(zapcore.InfoLevel)
	ts.logs = logs
	deps.Log = zap.New(core)
	ts.srv, err = New(cfg, deps)
	require.NoError(t, err)
	t.Cleanup(ts.srv.Stop)
	opts, err := ts.srv.ServerOptions()
	require.NoError(t, err)
	ts.grpc = grpc.NewServer(opts...)
	ts.srv.Register(ts.grpc)
	if register != nil {
		register(ts.grpc)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ts.addr = ln.Addr().String()
	go func() { _ = ts.grpc.Serve(ts.srv.Listener(ln)) }()
	t.Cleanup(ts.grpc.Stop)
	return ts
}

func rejected(t testing.TB, ts *testServer, reason string) float64 {
	return metrictest.Value(t, ts.reg, "cozy_health_reports_rejected_total", "reason", reason)
}

// testAgent speaks the ingest protocol directly, so tests can send anything.
type testAgent struct {
	t        testing.TB
	signer   *signing.Signer
	node     string
	instance string
	seq      uint64
	stream   pb.IngestService_IngestClient
	cancel   context.CancelFunc
}

// dial opens a TLS stream to ts; it does not send anything.
func dial(t testing.TB, ts *testServer, opts ...grpc.CallOption) (pb.IngestService_IngestClient, context.CancelFunc) {
	t.Helper()
	tc, err := tlsutil.ClientConfig(ts.files.CAFile, "127.0.0.1")
	require.NoError(t, err)
	conn, err := grpc.NewClient("passthrough:///"+ts.addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	st, err := pb.NewIngestServiceClient(conn).Ingest(ctx, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { cancel(); _ = conn.Close() })
	return st, cancel
}

// connect opens a stream, says hello and returns the agent and the hello's
// ack, or the stream's error.
func connect(t testing.TB, ts *testServer, signer *signing.Signer, node, token string) (*testAgent, *pb.Ack, error) {
	t.Helper()
	st, cancel := dial(t, ts)
	a := &testAgent{t: t, signer: signer, node: node, instance: fmt.Sprintf("inst-%s-%d", node, time.Now().UnixNano()), stream: st, cancel: cancel}
	err := st.Send(&pb.IngestRequest{Msg: &pb.IngestRequest_Hello{Hello: &pb.Hello{
		Token: token, PublicKey: signer.PublicKey(), KeyId: signer.KeyID(), AgentInstanceId: a.instance, NodeName: node, AgentVersion: "test",
	}}})
	require.NoError(t, err)
	resp, err := st.Recv()
	if err != nil {
		return a, nil, err
	}
	if !resp.GetAck().GetAccepted() {
		// The server closes the stream after a rejected hello.
		_, err = st.Recv()
		return a, resp.GetAck(), err
	}
	return a, resp.GetAck(), nil
}

// next builds the next report of this agent (sent now) and lets mutate
// change it before signing.
func (a *testAgent) next(mutate func(*report.NodeReport)) *pb.SignedReport {
	a.seq++
	r := sampleReport(a.node, a.instance, a.seq, time.Now(), 20)
	if mutate != nil {
		mutate(r)
	}
	sr, err := a.signer.SignReport(r)
	require.NoError(a.t, err)
	return sr
}

// send sends one signed report and waits for its ack.
func (a *testAgent) send(sr *pb.SignedReport) *pb.Ack {
	a.t.Helper()
	require.NoError(a.t, a.stream.Send(&pb.IngestRequest{Msg: &pb.IngestRequest_Report{Report: sr}}))
	resp, err := a.stream.Recv()
	require.NoError(a.t, err)
	return resp.GetAck()
}

// sampleReport is a report of realistic size: n observations across the
// node-local checks, with attributes and resource refs like the agent's.
func sampleReport(node, instance string, seq uint64, sentAt time.Time, n int) *report.NodeReport {
	r := &report.NodeReport{
		NodeName: node, AgentInstanceID: instance, Sequence: seq, SentAt: sentAt, Interval: 5 * time.Second, AgentVersion: "v0.1.0",
		Observations: make([]report.Observation, 0, n),
	}
	nodeRef := &report.ResourceRef{Kind: report.KindNode, Name: node}
	fixed := []report.Observation{
		{Component: report.ComponentEtcd, Check: report.CheckEtcdMember, Status: report.StatusHealthy, Reason: "MemberHealthy", Message: "member 8e9e05c52164694d is healthy, leader 8e9e05c52164694d", ResourceRef: nodeRef,
			Attributes: map[string]float64{report.AttrMemberID: 1.0292e19, report.AttrIsLearner: 0, report.AttrIsLeader: 1, report.AttrDBSizeBytes: 2.1e7, report.AttrDBQuotaBytes: 2.147483648e9, report.AttrRaftIndex: 123456, report.AttrRaftTerm: 7}},
		{Component: report.ComponentEtcd, Check: report.CheckEtcdMembership, Status: report.StatusHealthy, Reason: "AllVotersHealthy", ResourceRef: nodeRef,
			Attributes: map[string]float64{report.AttrVotingMembers: 3, report.AttrLearnerMembers: 0}},
		{Component: report.ComponentEtcd, Check: report.CheckEtcdAlarms, Status: report.StatusHealthy, Reason: "NoAlarms", ResourceRef: nodeRef},
		{Component: report.ComponentEtcd, Check: report.CheckFsyncLatency, Status: report.StatusHealthy, Reason: "FsyncFast", ResourceRef: nodeRef,
			Attributes: map[string]float64{report.AttrWALFsyncP99Seconds: 0.004, report.AttrBackendCommitP99Seconds: 0.012}},
		{Component: report.ComponentNode, Check: report.CheckTalosServices, Status: report.StatusHealthy, Reason: "ServicesRunning", Message: "etcd, kubelet, cri running and healthy", ResourceRef: nodeRef},
		{Component: report.ComponentDisk, Check: report.CheckFsyncProbe, Status: report.StatusHealthy, Reason: "FsyncFast", ResourceRef: nodeRef,
			Attributes: map[string]float64{report.AttrFsyncP99Seconds: 0.0031}},
		{Component: report.ComponentCilium, Check: report.CheckCiliumAgent, Status: report.StatusHealthy, Reason: "Ok", ResourceRef: nodeRef},
		{Component: report.ComponentKubeOVN, Check: report.CheckKubeOVNPinger, Status: report.StatusDegraded, Reason: "PingLoss", Message: "2 of 40 peers lost packets", ResourceRef: nodeRef},
		{Component: report.ComponentLinstor, Check: report.CheckLinstorSatellite, Status: report.StatusHealthy, Reason: "Online", ResourceRef: nodeRef},
	}
	for i := 0; len(r.Observations) < n; i++ {
		if i < len(fixed) {
			r.Observations = append(r.Observations, fixed[i])
			continue
		}
		if i%3 == 0 {
			r.Observations = append(r.Observations, report.Observation{Component: report.ComponentDisk, Check: report.CheckDiskstats, Status: report.StatusHealthy, Reason: "LatencyNormal",
				ResourceRef: &report.ResourceRef{Kind: report.KindBlockDevice, Name: fmt.Sprintf("nvme%dn1", i)},
				Attributes:  map[string]float64{report.AttrReadLatencySeconds: 0.0004, report.AttrWriteLatencySeconds: 0.0011, report.AttrFlushLatencySeconds: 0.002}})
			continue
		}
		r.Observations = append(r.Observations, report.Observation{Component: report.ComponentLinstor, Check: report.CheckDRBDResource, Status: report.StatusHealthy, Reason: "UpToDate",
			ResourceRef: &report.ResourceRef{Kind: report.KindResource, Name: fmt.Sprintf("pvc-4f1c2a7e-9b1d-4c55-8e0a-%012d", i)},
			Attributes:  map[string]float64{report.AttrUpToDate: 1, report.AttrDiskless: 0, report.AttrReplicas: 3, report.AttrUpToDateReplicas: 3}})
	}
	return r
}
