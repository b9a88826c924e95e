// Package ingest receives node reports on the aggregator: it authenticates
// each stream (TokenReview of a pod-bound token), verifies every report's
// ed25519 signature, rejects replays, skew, oversize, garbage and floods, and
// hands accepted reports to a Sink.
//
// A stream opens with a Hello carrying a projected ServiceAccount token and
// the agent's ed25519 public key. The token must pass a TokenReview for the
// configured audience, belong to the configured agent ServiceAccount and be
// bound to a Pod on the node the Hello claims; the key is then bound to that
// node for the life of the stream. Every following SignedReport is checked,
// in this order (cheap checks first, so a flood costs little):
//
//	oversized -> rate_limited -> missing_signature -> unknown_key ->
//	bad_signature -> malformed -> node_mismatch -> skew -> replay
//
// and acknowledged with the aggregator's desired interval. A rejected report
// changes nothing but the counters (and the node's rate bucket); the stream
// stays open. A rejected Hello closes the stream.
//
// Every replica receives every report on its own stream, so the replay state
// (last accepted sequence per agent instance) is per replica by design.
package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"

	"github.com/cozystack/cozy-health/aggregator/internal/ingest/verify"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/signing"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// Sink receives every accepted report. It is called from stream goroutines
// and must not block for long. Reports of one agent instance arrive in
// sequence order.
type Sink interface {
	Accept(r *report.NodeReport, receivedAt time.Time)
}

// Deps are ingest's collaborators.
type Deps struct {
	// TokenReviews checks agent tokens; required unless only dev keys are
	// accepted.
	TokenReviews authenticationv1client.TokenReviewInterface
	// Sink receives accepted reports; required.
	Sink Sink
	// Registerer registers ingest's metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// Log defaults to a no-op logger.
	Log *zap.Logger
	// Now defaults to time.Now.
	Now func() time.Time
	// NodeAddresses returns the addresses a node's agent may connect from
	// (its Node's InternalIPs and CNI addresses); nil or an empty answer:
	// not known, not checked. Used with Config.CheckPeerAddress.
	NodeAddresses func(node string) []string
}

// Server is the IngestService implementation.
type Server struct {
	pb.UnimplementedIngestServiceServer

	cfg     Config
	sink    Sink
	now     func() time.Time
	log     *zap.Logger
	m       *metrics
	auth    *tokenAuthenticator // nil without TokenReviews
	devKeys map[string]signing.DevKey
	// nodeAddrs is Deps.NodeAddresses (nil: no peer address check).
	nodeAddrs func(node string) []string
	verifier  *verify.Verifier
	logs      *logLimiter
	// conns, pending and nodes bound the surface (surface.go); baseCtx is
	// the context of re-reviews, which outlive no stream but run outside
	// any.
	conns   *connTable
	pending pendingTable
	nodes   nodeStreams
	baseCtx context.Context
	// latest is every node's last good Hello and report, for peer
	// replicas (latest.go).
	latest latestTable
	// desired is the interval sent in every ack.
	desired time.Duration
	// jobs carries reports from streams to the verifiers; stop ends them.
	jobs      chan *verifyJob
	stop      chan struct{}
	stopOnce  sync.Once
	verifiers sync.WaitGroup
}

// verifyJob is one stream's report in the hands of a verifier goroutine. Each stream
// has one, reused: a stream has one report in flight at a time. At the
// stream's Hello it carries the public key to expand instead (pub set, sr
// nil).
type verifyJob struct {
	sess *session
	sr   *pb.SignedReport
	resp chan *pb.IngestResponse

	pub    []byte
	key    *signing.VerifyKey
	keyErr error
}

// New validates cfg and builds a Server.
func New(cfg Config, deps Deps) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("ingest config: %w", err)
	}
	cfg = cfg.withDefaults()
	if deps.Sink == nil {
		return nil, errors.New("ingest: a sink is required")
	}
	if deps.TokenReviews == nil && cfg.InsecureDevKeysDir == "" {
		return nil, errors.New("ingest: a TokenReview client is required")
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Log == nil {
		deps.Log = zap.NewNop()
	}
	m, err := newMetrics(deps.Registerer)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, sink: deps.Sink, now: deps.Now, log: deps.Log.With(zap.String("component", "ingest")), m: m,
		verifier: verify.New(verify.Limits{
			MaxPayloadBytes: cfg.MaxPayloadBytes, SkewWindow: cfg.SkewWindow, RatePerNode: cfg.RatePerNode, RateBurst: cfg.RateBurst,
		}),
		logs:  newLogLimiter(10 * time.Second),
		conns: newConnTable(), baseCtx: context.Background(),
	}
	if cfg.CheckPeerAddress {
		s.nodeAddrs = deps.NodeAddresses
	}
	s.desired = cfg.DesiredInterval
	s.startVerifiers(max(2, runtime.GOMAXPROCS(0)))
	if deps.TokenReviews != nil {
		s.auth, err = newTokenAuthenticator(deps.TokenReviews, cfg.TokenAudience, cfg.AgentServiceAccount, cfg.TokenReviewCacheTTL, cfg.Surface, deps.Now, m)
		if err != nil {
			return nil, err
		}
	}
	if cfg.InsecureDevKeysDir != "" {
		s.devKeys, err = signing.LoadDevKeysDir(cfg.InsecureDevKeysDir)
		if err != nil {
			return nil, fmt.Errorf("ingest: %w", err)
		}
		s.log.Warn("INSECURE: accepting agent streams without a token for the listed development keys",
			zap.String("dir", cfg.InsecureDevKeysDir), zap.Int("keys", len(s.devKeys)))
	}
	return s, nil
}

// startVerifiers starts n goroutines (the verifiers) that verify every report
// (handleReport) for all streams. A stream's own goroutine only receives,
// hands over and acknowledges, so its stack never holds an ed25519
// verification or a payload decode and stays small: with one goroutine per
// agent stream, that is most of the aggregator's stack memory at 5,000
// nodes. Stop ends them.
func (s *Server) startVerifiers(n int) {
	s.jobs = make(chan *verifyJob)
	s.stop = make(chan struct{})
	for range n {
		s.verifiers.Add(1)
		go func() {
			defer s.verifiers.Done()
			for {
				select {
				case <-s.stop:
					return
				case j := <-s.jobs:
					if j.pub != nil {
						j.key, j.keyErr = signing.NewVerifyKey(j.pub)
						j.resp <- nil
						continue
					}
					j.resp <- s.handleReport(j.sess, j.sr)
				}
			}
		}()
	}
}

// Stop ends the verifiers; a report that arrives afterwards is verified on
// its stream's goroutine. Stop is idempotent.
func (s *Server) Stop() {
	s.stopOnce.Do(func() { close(s.stop) })
	s.verifiers.Wait()
}

// verifyReport runs handleReport on a verifier and waits for its answer.
func (s *Server) verifyReport(j *verifyJob, sr *pb.SignedReport) *pb.IngestResponse {
	j.sr = sr
	// The report is garbage once checked: the job must not keep it alive
	// while the stream waits for the next one.
	defer func() { j.sr = nil }()
	select {
	case s.jobs <- j:
		return <-j.resp
	case <-s.stop:
		return s.handleReport(j.sess, sr)
	}
}

// verifyKey expands a Hello's public key on a verifier, for the reason
// reports are verified there: the curve arithmetic would grow the stream's
// own stack (by 8 KiB per agent stream, measured at 5,000 streams) for the
// stream's whole life.
func (s *Server) verifyKey(j *verifyJob, pub []byte) (*signing.VerifyKey, error) {
	j.pub = pub
	defer func() { j.pub, j.key, j.keyErr = nil, nil, nil }()
	select {
	case s.jobs <- j:
		<-j.resp
		return j.key, j.keyErr
	case <-s.stop:
		return signing.NewVerifyKey(pub)
	}
}

// Register registers the IngestService on g.
func (s *Server) Register(g *grpc.Server) { pb.RegisterIngestServiceServer(g, s) }

// session is one authenticated stream: the key bound to the node.
type session struct {
	verify.Session
	peer string
}

// rejection is a counted, logged refusal; code is set for stream-stage ones.
type rejection struct {
	reason string
	detail string
	code   codes.Code
}

func (s *Server) ack(seq uint64, reason string) *pb.IngestResponse {
	return &pb.IngestResponse{Ack: &pb.Ack{
		Sequence: seq, Accepted: reason == "", RejectReason: reason,
		DesiredInterval: durationpb.New(s.desired),
	}}
}

// reject counts a rejection and logs it, at most once per period per
// (reason, node).
func (s *Server) reject(reason, node, peerAddr, detail string, seq uint64) {
	s.m.rejected.WithLabelValues(reason).Inc()
	ok, suppressed := s.logs.allow(reason+"\x00"+node, s.now())
	if !ok {
		return
	}
	s.log.Warn("report rejected", zap.String("node", node), zap.String("reason", reason), zap.String("detail", detail),
		zap.Uint64("sequence", seq), zap.String("peer", peerAddr), zap.Int("suppressedSinceLast", suppressed))
}

// Ingest serves one agent stream.
func (s *Server) Ingest(stream pb.IngestService_IngestServer) error {
	ctx := stream.Context()
	peerAddr := ""
	if p, ok := peer.FromContext(ctx); ok {
		peerAddr = p.Addr.String()
	}
	var hello *pb.Hello
	var sess *session
	var ls *liveStream
	ip := peerHost(peerAddr)
	job := &verifyJob{resp: make(chan *pb.IngestResponse, 1)}
	rej := &rejection{reason: ReasonTooManyStreams, detail: "too many streams of this peer have not said hello", code: codes.ResourceExhausted}
	if s.pending.enter(ip, s.cfg.Surface) {
		s.m.pending.Inc()
		hello, rej = s.recvHello(stream)
		if rej == nil {
			sess, ls, rej = s.authenticate(ctx, job, hello, peerAddr)
		}
		if rej == nil {
			rej = s.admitStream(ls)
		}
		s.pending.leave(ip)
		s.m.pending.Dec()
	}
	if rej != nil {
		s.reject(rej.reason, hello.GetNodeName(), peerAddr, rej.detail, 0)
		if rej.reason != ReasonNoHello && hello != nil {
			_ = stream.Send(s.ack(0, rej.reason))
		}
		return status.Error(rej.code, rej.reason+": "+rej.detail)
	}
	defer s.releaseStream(ls)
	s.latest.hello(sess.Node, sess.Instance, sess.KeyID, sess.Key.PublicKey(), ls.token)
	s.m.streams.Inc()
	defer s.m.streams.Dec()
	// The stream's fields are added per message, not with log.With: a
	// derived zap logger holds an encoded buffer for as long as the stream
	// lives, 2 KiB each for 5,000 streams that log twice in their life.
	logInfo := func(msg string, fields ...zap.Field) {
		s.log.Info(msg, append([]zap.Field{zap.String("node", sess.Node), zap.String("keyID", sess.KeyID), zap.String("peer", peerAddr)}, fields...)...)
	}
	logInfo("agent stream authenticated", zap.String("agentInstance", sess.Instance), zap.String("agentVersion", hello.GetAgentVersion()))
	if err := stream.Send(s.ack(0, "")); err != nil {
		return err
	}
	job.sess = sess
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			logInfo("agent stream closed")
			return nil
		}
		if err != nil {
			if status.Code(err) == codes.ResourceExhausted {
				// Over the gRPC receive limit: the stream is gone.
				s.m.received.Inc()
				s.reject(ReasonOversized, sess.Node, peerAddr, err.Error(), 0)
			}
			logInfo("agent stream ended", zap.Error(err))
			return err
		}
		var resp *pb.IngestResponse
		switch msg := req.GetMsg().(type) {
		case *pb.IngestRequest_Report:
			resp = s.verifyReport(job, msg.Report)
		default:
			s.m.received.Inc()
			s.reject(ReasonMalformed, sess.Node, peerAddr, fmt.Sprintf("want a report after the hello, got %T", msg), 0)
			resp = s.ack(0, ReasonMalformed)
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// recvHello waits up to HelloTimeout for the first message, which must be a
// Hello.
func (s *Server) recvHello(stream pb.IngestService_IngestServer) (*pb.Hello, *rejection) {
	type result struct {
		req *pb.IngestRequest
		err error
	}
	ch := make(chan result, 1)
	// Recv returns once the handler returns and the stream is cancelled.
	go func() {
		req, err := stream.Recv()
		ch <- result{req, err}
	}()
	t := time.NewTimer(s.cfg.HelloTimeout)
	defer t.Stop()
	select {
	case <-t.C:
		return nil, &rejection{reason: ReasonNoHello, detail: "no hello within " + s.cfg.HelloTimeout.String(), code: codes.DeadlineExceeded}
	case r := <-ch:
		if r.err != nil {
			if status.Code(r.err) == codes.ResourceExhausted {
				return nil, &rejection{reason: ReasonOversized, detail: r.err.Error(), code: codes.ResourceExhausted}
			}
			return nil, &rejection{reason: ReasonNoHello, detail: "stream ended before a hello: " + r.err.Error(), code: codes.InvalidArgument}
		}
		h := r.req.GetHello()
		if h == nil {
			return nil, &rejection{reason: ReasonNoHello, detail: "first message is not a hello", code: codes.InvalidArgument}
		}
		return h, nil
	}
}

// authenticate binds the Hello's key to the node its token proves.
// The token's stream is then its node's only one (admitStream).
func (s *Server) authenticate(ctx context.Context, job *verifyJob, h *pb.Hello, peerAddr string) (*session, *liveStream, *rejection) {
	malformed := func(detail string) *rejection {
		return &rejection{reason: ReasonMalformed, detail: detail, code: codes.InvalidArgument}
	}
	for _, v := range [...]string{h.GetNodeName(), h.GetAgentInstanceId(), h.GetKeyId(), h.GetAgentVersion(), h.GetToken()} {
		if !utf8.ValidString(v) {
			return nil, nil, malformed("hello has a string that is not UTF-8")
		}
	}
	for _, f := range [...]struct {
		what string
		v    string
		max  int
	}{
		{"node name", h.GetNodeName(), report.MaxNodeName}, {"agent instance id", h.GetAgentInstanceId(), report.MaxInstanceID},
		{"agent version", h.GetAgentVersion(), report.MaxAgentVersion},
	} {
		if len(f.v) > f.max {
			return nil, nil, malformed(fmt.Sprintf("hello %s of %d bytes is over the %d byte limit", f.what, len(f.v), f.max))
		}
	}
	// Expanded once here: each report of the stream verifies with it.
	key, err := s.verifyKey(job, h.GetPublicKey())
	if err != nil {
		return nil, nil, malformed("hello: " + err.Error())
	}
	keyID := signing.KeyID(key.PublicKey())
	switch {
	case h.GetKeyId() != keyID:
		return nil, nil, malformed(fmt.Sprintf("hello key id %q is not the id %s of its key", h.GetKeyId(), keyID))
	case h.GetNodeName() == "":
		return nil, nil, malformed("hello has no node name")
	case h.GetAgentInstanceId() == "":
		return nil, nil, malformed("hello has no agent instance id")
	}
	var node string
	var expires time.Time
	switch {
	case h.GetToken() != "" && s.auth != nil:
		id, err := s.auth.authenticate(ctx, h.GetToken(), peerHost(peerAddr))
		if errors.Is(err, errThrottled) {
			return nil, nil, &rejection{reason: ReasonReviewThrottled, detail: err.Error(), code: codes.Unavailable}
		}
		if err != nil {
			return nil, nil, &rejection{reason: ReasonAuthUnavailable, detail: err.Error(), code: codes.Unavailable}
		}
		switch id.reason {
		case "":
		case ReasonWrongServiceAccount:
			return nil, nil, &rejection{reason: id.reason, detail: id.detail, code: codes.PermissionDenied}
		default:
			return nil, nil, &rejection{reason: id.reason, detail: id.detail, code: codes.Unauthenticated}
		}
		node, expires = id.node, id.expires
	case h.GetToken() == "" && s.devKeys != nil:
		dk, ok := s.devKeys[keyID]
		if !ok {
			return nil, nil, &rejection{reason: ReasonUnknownKey, detail: "no token and key " + keyID + " is not a listed development key", code: codes.Unauthenticated}
		}
		node = dk.Node
	case h.GetToken() != "":
		return nil, nil, &rejection{reason: ReasonUnauthenticated, detail: "tokens cannot be checked: this replica has no TokenReview client", code: codes.Unauthenticated}
	default:
		return nil, nil, &rejection{reason: ReasonUnauthenticated, detail: "hello carries no token", code: codes.Unauthenticated}
	}
	if node != h.GetNodeName() {
		return nil, nil, &rejection{reason: ReasonNodeMismatch, detail: fmt.Sprintf("hello claims node %s, token is bound to %s", h.GetNodeName(), node), code: codes.PermissionDenied}
	}
	// Before admitStream: a refused hello must not push the node's
	// stream off.
	if rej := s.checkPeer(node, peerAddr); rej != nil {
		return nil, nil, rej
	}
	ls := &liveStream{node: node, peer: peerAddr, expires: expires}
	if s.auth != nil {
		ls.token = h.GetToken()
	}
	return &session{Session: verify.Session{Node: node, Key: key, KeyID: keyID, Instance: h.GetAgentInstanceId()}, peer: peerAddr}, ls, nil
}

// handleReport runs every check on one signed report and, if all pass, hands
// it to the sink. It is the whole per-report path of a stream.
func (s *Server) handleReport(sess *session, sr *pb.SignedReport) *pb.IngestResponse {
	s.m.received.Inc()
	now := s.now()
	seq, reason, detail := s.verifier.Verify(&sess.Session, sr, now, s.sink.Accept)
	if reason != "" {
		s.reject(reason, sess.Node, sess.peer, detail, seq)
		return s.ack(seq, reason)
	}
	s.m.accepted.Inc()
	s.latest.report(sess.Node, sess.Instance, sess.KeyID, sr, seq, now)
	return s.ack(seq, "")
}
