package ingest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// Defaults of SurfaceLimits. Every number bounds what a client holds on
// one replica before and after it proves a node; an honest agent holds one
// connection and one stream per replica and needs a TokenReview about
// once per connection (every MaxConnectionAge), the cache answering the
// rest.
const (
	// DefaultMaxConcurrentStreams is the HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS
	// of every connection (grpc.MaxConcurrentStreams).
	DefaultMaxConcurrentStreams = 8
	// DefaultMaxConnsPerPeer bounds the connections one IP address holds.
	// Agents run on the host network, one per node: one connection each.
	DefaultMaxConnsPerPeer = 16
	// DefaultMaxPendingPerPeer bounds one IP address's streams that have
	// not said a good hello yet (waiting for it, or for its TokenReview).
	DefaultMaxPendingPerPeer = 4
	// DefaultMaxPending bounds them for the whole replica: a restart of
	// every agent at once waits at most one HelloTimeout for its turn.
	DefaultMaxPending = 1024
	// DefaultTokenReviewsPerSecond and DefaultTokenReviewBurst are the
	// replica's TokenReview budget (tokens not in the cache): 5,000 agents
	// reconnecting at once are reviewed within about 100 s.
	DefaultTokenReviewsPerSecond = 50
	DefaultTokenReviewBurst      = 100
	// DefaultPeerTokenReviewsPerSecond and DefaultPeerTokenReviewBurst are
	// one IP address's share: an agent needs one per connection.
	DefaultPeerTokenReviewsPerSecond = 0.2
	DefaultPeerTokenReviewBurst      = 5
	// DefaultReauthPeriod is how often an open stream's token is reviewed
	// again: a stream whose pod was deleted (its bound token then fails
	// the review) ends within this period, and every stream ends at its
	// token's expiry.
	DefaultReauthPeriod = 5 * time.Minute
	// reauthRetry is the wait before a re-review that could not be made
	// (apiserver unreachable or budget spent) is tried again; the stream
	// stays open meanwhile, unless its token expires.
	reauthRetry = 30 * time.Second
)

// SurfaceLimits bound the ingest surface: what unauthenticated clients and
// the holder of one node's token can hold open on a replica, and how much
// TokenReview work they can cause. A zero value means its default. The
// per-peer bounds are per IP address and spare loopback (see loopback).
//
// Only node addresses should reach ingest at all (agents run on the host
// network): that is the chart's NetworkPolicy (a CiliumNetworkPolicy
// admitting the host and remote-node entities, or the nodes' CIDRs). On top
// of it, with Config.CheckPeerAddress, a hello is refused unless its
// connection comes from one of its own node's addresses (checkPeer): a
// copied token works only from its node. The address a host-network
// agent's connection arrives from is not always a Node's InternalIP
// (kube-ovn sends host-to-pod traffic from ovn0's join-subnet address), so
// the addresses come from the Node's InternalIPs and from annotations the
// CNI writes (the aggregator's --agent-peer-annotations). The per-peer
// bounds below hold whatever the address.
//
// One authenticated stream per node: a newer stream for a node replaces the
// older (whose connection is closed), so an agent that restarts, or whose
// old connection is half-open, is never locked out by its own past; two
// live agents of one node (never the case with a DaemonSet) would replace
// each other and show as cozy_health_ingest_streams_replaced_total.
type SurfaceLimits struct {
	MaxConcurrentStreams uint32
	MaxConnsPerPeer      int
	MaxPendingPerPeer    int
	MaxPending           int

	TokenReviewsPerSecond     float64
	TokenReviewBurst          int
	PeerTokenReviewsPerSecond float64
	PeerTokenReviewBurst      int

	ReauthPeriod time.Duration

	// LimitLoopback applies the per-peer bounds to loopback peers too
	// (tests of those bounds, which may only use loopback).
	LimitLoopback bool
}

func (l SurfaceLimits) withDefaults() SurfaceLimits {
	if l.MaxConcurrentStreams == 0 {
		l.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	orDefault(&l.MaxConnsPerPeer, DefaultMaxConnsPerPeer)
	orDefault(&l.MaxPendingPerPeer, DefaultMaxPendingPerPeer)
	orDefault(&l.MaxPending, DefaultMaxPending)
	orDefault(&l.TokenReviewBurst, DefaultTokenReviewBurst)
	orDefault(&l.PeerTokenReviewBurst, DefaultPeerTokenReviewBurst)
	orDefault(&l.TokenReviewsPerSecond, DefaultTokenReviewsPerSecond)
	orDefault(&l.PeerTokenReviewsPerSecond, DefaultPeerTokenReviewsPerSecond)
	orDefault(&l.ReauthPeriod, DefaultReauthPeriod)
	return l
}

func (l SurfaceLimits) validate() error {
	if l.MaxConnsPerPeer < 0 || l.MaxPendingPerPeer < 0 || l.MaxPending < 0 || l.TokenReviewBurst < 0 || l.PeerTokenReviewBurst < 0 ||
		l.TokenReviewsPerSecond < 0 || l.PeerTokenReviewsPerSecond < 0 || l.ReauthPeriod < 0 {
		return errors.New("surface limits must not be negative")
	}
	return nil
}

// peerHost is the IP address of a host:port peer address.
func peerHost(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// loopback reports whether ip is a loopback address. The per-peer bounds
// do not apply to it: in a cluster no agent reaches the aggregator from
// its own loopback (a host-network agent's address is its node's), only
// processes in the aggregator's own network namespace can, and the local
// lab and benchmarks run every simulated node there. The replica-wide
// bounds (pending streams, TokenReviews) still hold.
func loopback(ip string) bool {
	a := net.ParseIP(ip)
	return a != nil && a.IsLoopback()
}

// exempt reports whether the per-peer bounds spare ip.
func (l SurfaceLimits) exempt(ip string) bool { return !l.LimitLoopback && loopback(ip) }

// checkPeer refuses a hello of node from peerAddr when the node's
// addresses are known and peerAddr is none of them (peer_address_mismatch).
// It passes when the check is off, for loopback peers (exempt: only the
// aggregator's own network namespace connects from loopback), and when the
// node's addresses are not known (its Node not yet in the informer, or
// registering without addresses): refusing then would lock every agent out
// while the aggregator starts; that admission is logged.
func (s *Server) checkPeer(node, peerAddr string) *rejection {
	if s.nodeAddrs == nil {
		return nil
	}
	ip := peerHost(peerAddr)
	if s.cfg.Surface.exempt(ip) {
		return nil
	}
	addrs := s.nodeAddrs(node)
	if len(addrs) == 0 {
		if ok, suppressed := s.logs.allow("peer-unchecked\x00"+node, s.now()); ok {
			s.log.Info("agent peer address not checked: its Node's addresses are not known", zap.String("node", node),
				zap.String("peer", peerAddr), zap.Int("suppressedSinceLast", suppressed))
		}
		return nil
	}
	pa, err := netip.ParseAddr(ip)
	if err == nil {
		pa = pa.Unmap()
		for _, a := range addrs {
			if na, err := netip.ParseAddr(a); err == nil && na.Unmap() == pa {
				return nil
			}
		}
	}
	return &rejection{reason: ReasonPeerAddressMismatch, code: codes.PermissionDenied,
		detail: fmt.Sprintf("connection from %s, not from an address of node %s %v", ip, node, addrs)}
}

// Listener wraps the gRPC listener: it refuses a connection from an IP
// address that already holds MaxConnsPerPeer (counted and logged as
// too_many_streams), and keeps every connection by its remote address so
// that a stream can be ended from outside its handler (replaced by a newer
// one of its node, or revoked): closing its connection is the only way
// grpc-go offers, and an agent's connection carries nothing else.
func (s *Server) Listener(l net.Listener) net.Listener {
	return &listener{Listener: l, s: s}
}

type listener struct {
	net.Listener
	s *Server
}

// Accept returns the next connection within the per-peer bound; refused
// ones are closed here and never reach grpc.
func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if tc := l.s.conns.add(c, l.s.cfg.Surface); tc != nil {
			return tc, nil
		}
		addr := c.RemoteAddr().String()
		_ = c.Close()
		l.s.reject(ReasonTooManyStreams, "", addr, fmt.Sprintf("peer holds %d connections already", l.s.cfg.Surface.MaxConnsPerPeer), 0)
	}
}

// connTable is every open ingest connection by remote address, and the
// count per IP address.
type connTable struct {
	mu     sync.Mutex // guards byAddr, perIP
	byAddr map[string]*trackedConn
	perIP  map[string]int
}

func newConnTable() *connTable {
	return &connTable{byAddr: map[string]*trackedConn{}, perIP: map[string]int{}}
}

func (t *connTable) add(c net.Conn, lim SurfaceLimits) *trackedConn {
	addr := c.RemoteAddr().String()
	ip := peerHost(addr)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.perIP[ip] >= lim.MaxConnsPerPeer && !lim.exempt(ip) {
		return nil
	}
	t.perIP[ip]++
	tc := &trackedConn{Conn: c, t: t, addr: addr, ip: ip}
	t.byAddr[addr] = tc
	return tc
}

// close closes the connection with remote address addr, if it is open.
func (t *connTable) close(addr string) {
	t.mu.Lock()
	c := t.byAddr[addr]
	t.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
}

// trackedConn leaves the table when closed, by grpc or by connTable.close.
type trackedConn struct {
	net.Conn
	t        *connTable
	addr, ip string
	once     sync.Once
}

// Close implements net.Conn.
func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.t.mu.Lock()
		if c.t.byAddr[c.addr] == c {
			delete(c.t.byAddr, c.addr)
		}
		if c.t.perIP[c.ip]--; c.t.perIP[c.ip] <= 0 {
			delete(c.t.perIP, c.ip)
		}
		c.t.mu.Unlock()
	})
	return c.Conn.Close()
}

// pendingTable counts streams that have not said a good hello, per IP
// address and in all.
type pendingTable struct {
	mu    sync.Mutex // guards perIP, total
	perIP map[string]int
	total int
}

// enter admits one pending stream of ip, or refuses it.
func (p *pendingTable) enter(ip string, lim SurfaceLimits) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if (p.perIP[ip] >= lim.MaxPendingPerPeer && !lim.exempt(ip)) || p.total >= lim.MaxPending {
		return false
	}
	if p.perIP == nil {
		p.perIP = map[string]int{}
	}
	p.perIP[ip]++
	p.total++
	return true
}

func (p *pendingTable) leave(ip string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.perIP[ip]--; p.perIP[ip] <= 0 {
		delete(p.perIP, ip)
	}
	p.total--
}

// errCallTimeout is the cause of the deadline Tap gives a call.
var errCallTimeout = errors.New("call on the ingest port not done within the hello timeout")

// Tap is the grpc.InTapHandle of the ingest port. Every call that is not an
// agent stream (the drain check, gRPC health; each unary) is admitted as
// an agent stream is before its hello: it counts as a pending stream of
// its peer address and of the replica (MaxPendingPerPeer, MaxPending) until
// it ends, and it must end within HelloTimeout. grpc-go reads a unary
// request in full before any interceptor or handler runs, so without this a
// request sent by halves held its stream until the connection's max age.
// A refusal is counted and logged as too_many_streams, a call cut at its
// deadline as call_timeout. Agent streams pass: Ingest admits them itself.
func (s *Server) Tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if info.FullMethodName == pb.IngestService_Ingest_FullMethodName {
		return ctx, nil
	}
	addr := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		addr = p.Addr.String()
	}
	ip := peerHost(addr)
	if !s.pending.enter(ip, s.cfg.Surface) {
		s.reject(ReasonTooManyStreams, "", addr, "call "+info.FullMethodName+": too many calls and streams of this peer are pending", 0)
		return nil, status.Error(codes.ResourceExhausted, ReasonTooManyStreams+": too many pending calls")
	}
	s.m.pending.Inc()
	ctx, cancel := context.WithTimeoutCause(ctx, s.cfg.HelloTimeout, errCallTimeout)
	context.AfterFunc(ctx, func() {
		if context.Cause(ctx) == errCallTimeout {
			s.reject(ReasonCallTimeout, "", addr, info.FullMethodName+": not done within "+s.cfg.HelloTimeout.String(), 0)
		}
		cancel()
		s.pending.leave(ip)
		s.m.pending.Dec()
	})
	return ctx, nil
}

// liveStream is a node's authenticated stream.
type liveStream struct {
	node, peer string
	// token is kept for the re-reviews (empty without a TokenReview
	// client): a pod-bound token, useless once its pod is gone.
	token   string
	expires time.Time
	// mu guards timer and closed.
	mu     sync.Mutex
	timer  *time.Timer
	closed bool
}

// nodeStreams holds the one authenticated stream of each node.
type nodeStreams struct {
	mu sync.Mutex // guards m
	m  map[string]*liveStream
}

// admitStream makes ls its node's stream. An older stream of the node on
// another connection is replaced (its connection closed); one on the same
// connection wins, and ls is refused: closing that connection would end
// both.
func (s *Server) admitStream(ls *liveStream) *rejection {
	s.nodes.mu.Lock()
	old := s.nodes.m[ls.node]
	if old != nil && old.peer == ls.peer {
		s.nodes.mu.Unlock()
		return &rejection{reason: ReasonTooManyStreams, detail: "node " + ls.node + " already streams on this connection", code: codes.ResourceExhausted}
	}
	if s.nodes.m == nil {
		s.nodes.m = map[string]*liveStream{}
	}
	s.nodes.m[ls.node] = ls
	s.nodes.mu.Unlock()
	if old != nil {
		old.stop()
		s.m.replaced.Inc()
		if ok, suppressed := s.logs.allow("replaced\x00"+ls.node, s.now()); ok {
			s.log.Info("agent stream replaced by a newer one of its node", zap.String("node", ls.node),
				zap.String("oldPeer", old.peer), zap.String("peer", ls.peer), zap.Int("suppressedSinceLast", suppressed))
		}
		s.conns.close(old.peer)
	}
	if ls.token != "" && s.auth != nil {
		s.scheduleReauth(ls)
	}
	return nil
}

// releaseStream forgets ls when its handler returns.
func (s *Server) releaseStream(ls *liveStream) {
	ls.stop()
	s.nodes.mu.Lock()
	if s.nodes.m[ls.node] == ls {
		delete(s.nodes.m, ls.node)
	}
	s.nodes.mu.Unlock()
}

func (ls *liveStream) stop() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.closed = true
	if ls.timer != nil {
		ls.timer.Stop()
	}
}

// scheduleReauth arms ls's next re-review: after ReauthPeriod, or at the
// token's expiry if that is sooner.
func (s *Server) scheduleReauth(ls *liveStream) {
	s.scheduleReauthIn(ls, s.cfg.Surface.ReauthPeriod)
}

func (s *Server) scheduleReauthIn(ls *liveStream, d time.Duration) {
	if !ls.expires.IsZero() {
		d = min(d, max(0, ls.expires.Sub(s.now())))
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.closed {
		return
	}
	ls.timer = time.AfterFunc(d, func() { s.reauth(ls) })
}

// reauth checks ls's token again and closes the stream when it expired or
// no longer proves the node (its pod was deleted: a pod-bound token then
// fails the review). A review that cannot be made keeps the stream and
// tries again soon.
func (s *Server) reauth(ls *liveStream) {
	revoke := func(detail string) {
		ls.stop()
		s.reject(ReasonRevoked, ls.node, ls.peer, detail, 0)
		s.conns.close(ls.peer)
	}
	if !ls.expires.IsZero() && !s.now().Before(ls.expires) {
		revoke("token expired at " + ls.expires.UTC().Format(time.RFC3339))
		return
	}
	id, err := s.auth.authenticate(s.baseCtx, ls.token, peerHost(ls.peer))
	switch {
	case err != nil:
		s.log.Debug("stream re-authentication postponed", zap.String("node", ls.node), zap.Error(err))
		s.scheduleReauthIn(ls, reauthRetry)
	case id.reason != "":
		revoke(id.reason + ": " + id.detail)
	case id.node != ls.node:
		revoke(fmt.Sprintf("token is now bound to node %s, not %s", id.node, ls.node))
	default:
		s.scheduleReauth(ls)
	}
}
