package peers

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"

	"github.com/cozystack/cozy-health/aggregator/internal/ingest"
	"github.com/cozystack/cozy-health/aggregator/internal/peerlimit"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// MaxHeld bounds the nodes one LatestReports call may ask for; the sync
// loop asks in batches of BatchNodes.
const (
	MaxHeld    = 1024
	BatchNodes = 64
)

// Source is what a replica holds of the nodes it hears: ingest.Server.
type Source interface {
	Latest(node string) (ingest.Latest, bool)
	ReviewAgentToken(ctx context.Context, token, peer string) (node, reason, detail string, err error)
}

var _ Source = (*ingest.Server)(nil)

// ServerConfig configures the PeerService.
type ServerConfig struct {
	// Identity is this replica's --identity, returned to callers.
	Identity string
	// Audience is the audience callers' tokens must carry (the agents'
	// --token-audience: the aggregator's own projected token has it).
	Audience string
	// ServiceAccount is namespace/name of the aggregator's ServiceAccount
	// (--peer-service-account): the only user answered.
	ServiceAccount string
	// MaxAge: a node's latest report accepted longer ago is not relayed
	// (ingest's skew window: the asker would refuse it).
	MaxAge time.Duration
}

// Server is the PeerService implementation.
type Server struct {
	pb.UnimplementedPeerServiceServer
	cfg  ServerConfig
	src  Source
	auth *callerAuth
	m    *Metrics
	log  *zap.Logger
	logs *logLimiter
	now  func() time.Time
}

// NewServer builds the PeerService over src; reviews checks callers'
// tokens.
func NewServer(cfg ServerConfig, src Source, reviews authenticationv1client.TokenReviewInterface, m *Metrics, log *zap.Logger, now func() time.Time) (*Server, error) {
	ns, name, ok := strings.Cut(cfg.ServiceAccount, "/")
	if !ok || ns == "" || name == "" {
		return nil, fmt.Errorf("peer service account %q: want namespace/name", cfg.ServiceAccount)
	}
	if reviews == nil {
		return nil, fmt.Errorf("peer service: a TokenReview client is required")
	}
	if now == nil {
		now = time.Now
	}
	return &Server{
		cfg: cfg, src: src, m: m, log: log.With(zap.String("component", "peers")), logs: newLogLimiter(10 * time.Second), now: now,
		auth: &callerAuth{reviews: reviews, audience: cfg.Audience, username: "system:serviceaccount:" + ns + ":" + name, now: now,
			limit: rate.NewLimiter(5, 20), peers: peerlimit.New(1, 5), cache: map[[sha256.Size]byte]verdict{}},
	}, nil
}

// Register registers the PeerService on g.
func (s *Server) Register(g *grpc.Server) { pb.RegisterPeerServiceServer(g, s) }

// LatestReports implements PeerService.
func (s *Server) LatestReports(ctx context.Context, req *pb.LatestReportsRequest) (*pb.LatestReportsResponse, error) {
	addr := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		addr = p.Addr.String()
	}
	now := s.now()
	reason, detail := s.auth.check(ctx, bearer(ctx), addr)
	if reason != "" {
		reject(s.m, s.logs, s.log, now, reason, "", addr, detail)
		code := codes.Unauthenticated
		switch reason {
		case ReasonWrongServiceAccount:
			code = codes.PermissionDenied
		case ReasonReviewThrottled, ReasonAuthUnavailable:
			code = codes.Unavailable
		}
		return nil, status.Error(code, reason+": "+detail)
	}
	if n := len(req.GetHeld()); n > MaxHeld {
		reject(s.m, s.logs, s.log, now, ReasonTooLarge, "", addr, fmt.Sprintf("%d nodes asked, at most %d", n, MaxHeld))
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("%s: at most %d nodes per call", ReasonTooLarge, MaxHeld))
	}
	resp := &pb.LatestReportsResponse{Replica: s.cfg.Identity}
	for _, h := range req.GetHeld() {
		l, ok := s.src.Latest(h.GetNodeName())
		if !ok || l.Report == nil || (s.cfg.MaxAge > 0 && now.Sub(l.ReceivedAt) > s.cfg.MaxAge) {
			continue
		}
		if l.Instance == h.GetAgentInstanceId() && l.Sequence <= h.GetSequence() {
			continue
		}
		resp.Reports = append(resp.Reports, &pb.RelayedReport{
			Report: l.Report, PublicKey: l.PublicKey, AgentInstanceId: l.Instance, NodeName: l.Node, Token: l.Token,
		})
	}
	return resp, nil
}

// bearer is the call's bearer token, if any.
func bearer(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if t, ok := strings.CutPrefix(v, "Bearer "); ok {
			return t
		}
	}
	return ""
}

// callerAuth reviews callers' tokens, caching verdicts (good and bad) for
// a minute by the token's SHA-256; reviews of tokens not cached spend a
// replica budget and the caller address's.
type callerAuth struct {
	reviews  authenticationv1client.TokenReviewInterface
	audience string
	username string
	now      func() time.Time
	limit    *rate.Limiter
	peers    *peerlimit.Limiters

	mu    sync.Mutex // guards cache
	cache map[[sha256.Size]byte]verdict
}

type verdict struct {
	reason, detail string
	until          time.Time
}

const verdictTTL = time.Minute

// check returns an empty reason for a token of the aggregator's
// ServiceAccount, else why not.
func (a *callerAuth) check(ctx context.Context, token, addr string) (string, string) {
	if token == "" {
		return ReasonUnauthenticated, "no bearer token"
	}
	if len(token) > 16<<10 {
		return ReasonUnauthenticated, "token over 16 KiB"
	}
	key := sha256.Sum256([]byte(token))
	now := a.now()
	a.mu.Lock()
	v, ok := a.cache[key]
	a.mu.Unlock()
	if ok && now.Before(v.until) {
		return v.reason, v.detail
	}
	ip := addr
	if i := strings.LastIndexByte(addr, ':'); i > 0 {
		ip = addr[:i]
	}
	if !a.peers.Allow(ip, now) || !a.limit.AllowN(now, 1) {
		return ReasonReviewThrottled, "token review budget spent"
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tr, err := a.reviews.Create(rctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{a.audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return ReasonAuthUnavailable, "create token review: " + err.Error()
	}
	st := tr.Status
	switch {
	case !st.Authenticated:
		v = verdict{reason: ReasonUnauthenticated, detail: "token not authenticated: " + st.Error}
	case !slices.Contains(st.Audiences, a.audience):
		v = verdict{reason: ReasonUnauthenticated, detail: fmt.Sprintf("token audiences %v do not include %s", st.Audiences, a.audience)}
	case st.User.Username != a.username:
		v = verdict{reason: ReasonWrongServiceAccount, detail: fmt.Sprintf("token user %s is not %s", st.User.Username, a.username)}
	default:
		v = verdict{}
	}
	v.until = now.Add(verdictTTL)
	a.mu.Lock()
	if len(a.cache) > 1024 {
		clear(a.cache)
	}
	a.cache[key] = v
	a.mu.Unlock()
	return v.reason, v.detail
}
