package peers

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/signing"
	"github.com/cozystack/cozy-health/pkg/wire"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// SyncConfig configures the sync loop.
type SyncConfig struct {
	// Identity is this replica's --identity: the answer of a peer that
	// names it is this replica (its own address in --peers), skipped.
	Identity string
	// Peers are host:port entries (--peers): a name resolving to every
	// replica (the headless Service), or the replicas' own addresses.
	Peers []string
	// Interval is the report interval: the loop's period, and a node not
	// heard directly for 1.5 of it is asked for.
	Interval time.Duration
	// SkewWindow bounds |sent-at - now| of a relayed report, as ingest's.
	SkewWindow time.Duration
	// MaxPayloadBytes bounds one relayed payload, as ingest's.
	MaxPayloadBytes int
	// TokenFile is this replica's own ServiceAccount token (projected, for
	// the agents' audience), read again for every call.
	TokenFile string
	// CAPool returns the CA bundle that verifies peers' serving
	// certificates (the aggregators' own CA).
	CAPool func() (*x509.CertPool, error)
	// Resolve looks up a host's addresses; nil: the system resolver.
	Resolve func(ctx context.Context, host string) ([]string, error)
}

// Store is what the loop reads and writes: the replica's state.
type Store interface {
	Read(f func(nodes map[string]state.Entry))
	AcceptVia(r *report.NodeReport, receivedAt time.Time, via string) bool
}

// Syncer asks peers for the reports of nodes this replica does not hear.
type Syncer struct {
	cfg   SyncConfig
	src   Source
	store Store
	m     *Metrics
	log   *zap.Logger
	logs  *logLimiter
	now   func() time.Time

	// mu guards conns, self and trusted.
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
	// self are addresses that answered with this replica's identity.
	self map[string]bool
	// trusted are agent keys this replica bound to a node by its own
	// review of a forwarded token, until their verdict expires.
	trusted map[string]trustedKey
}

type trustedKey struct {
	pub      []byte
	instance string
	until    time.Time
}

// trustTTL is how long a forwarded token's review vouches for its key.
const trustTTL = 5 * time.Minute

// NewSyncer builds the loop.
func NewSyncer(cfg SyncConfig, src Source, store Store, m *Metrics, log *zap.Logger, now func() time.Time) *Syncer {
	if now == nil {
		now = time.Now
	}
	if cfg.Resolve == nil {
		cfg.Resolve = net.DefaultResolver.LookupHost
	}
	return &Syncer{cfg: cfg, src: src, store: store, m: m, log: log.With(zap.String("component", "peers")), logs: newLogLimiter(10 * time.Second),
		now: now, conns: map[string]*grpc.ClientConn{}, self: map[string]bool{}, trusted: map[string]trustedKey{}}
}

// Run asks the peers once per interval until ctx ends.
func (s *Syncer) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	defer s.closeConns()
	for {
		s.Round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Round is one pass: every node not heard directly for 1.5 intervals is
// asked of every peer; cozy_health_replica_unheard_nodes is set after.
func (s *Syncer) Round(ctx context.Context) {
	held := s.wanted()
	if len(held) > 0 {
		for _, t := range s.targets(ctx) {
			if ctx.Err() != nil {
				return
			}
			s.ask(ctx, t, held)
		}
	}
	s.countUnheard()
}

// wanted are the nodes this replica has not heard directly for 1.5
// intervals (or never), with the report it holds of each.
func (s *Syncer) wanted() map[string]*pb.HeldReport {
	now := s.now()
	stale := s.cfg.Interval * 3 / 2
	out := map[string]*pb.HeldReport{}
	s.store.Read(func(nodes map[string]state.Entry) {
		for name, e := range nodes {
			if e.Report != nil && e.Via == "" && now.Sub(e.ReceivedAt) <= stale {
				continue
			}
			h := &pb.HeldReport{NodeName: name}
			if e.Report != nil {
				h.AgentInstanceId, h.Sequence = e.Report.AgentInstanceID, e.Report.Sequence
			}
			out[name] = h
		}
	})
	return out
}

// countUnheard sets the gauge: nodes held only through a peer.
func (s *Syncer) countUnheard() {
	n := 0
	s.store.Read(func(nodes map[string]state.Entry) {
		for _, e := range nodes {
			if e.Report != nil && e.Via != "" {
				n++
			}
		}
	})
	s.m.Unheard.WithLabelValues(s.cfg.Identity).Set(float64(n))
}

// target is one peer address and the name its certificate must carry.
type target struct{ addr, serverName string }

// targets resolves --peers, without this replica's own addresses.
func (s *Syncer) targets(ctx context.Context) []target {
	var out []target
	for _, p := range s.cfg.Peers {
		host, port, err := net.SplitHostPort(p)
		if err != nil {
			continue // Validate refused it
		}
		addrs := []string{host}
		if net.ParseIP(host) == nil {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			addrs, err = s.cfg.Resolve(rctx, host)
			cancel()
			if err != nil {
				if ok, _ := s.logs.allow("resolve\x00"+host, s.now()); ok {
					s.log.Warn("resolve peers", zap.String("peers", p), zap.Error(err))
				}
				continue
			}
		}
		sort.Strings(addrs)
		for _, a := range addrs {
			addr := net.JoinHostPort(a, port)
			s.mu.Lock()
			self := s.self[addr]
			s.mu.Unlock()
			if !self {
				out = append(out, target{addr: addr, serverName: strings.TrimSuffix(host, ".")})
			}
		}
	}
	return out
}

// ask calls one peer for held, in batches, and stores what verifies.
func (s *Syncer) ask(ctx context.Context, t target, held map[string]*pb.HeldReport) {
	conn, err := s.conn(t)
	if err != nil {
		s.m.Calls.WithLabelValues("error").Inc()
		return
	}
	names := make([]string, 0, len(held))
	for n := range held {
		names = append(names, n)
	}
	sort.Strings(names)
	client := pb.NewPeerServiceClient(conn)
	for start := 0; start < len(names); start += BatchNodes {
		req := &pb.LatestReportsRequest{}
		for _, n := range names[start:min(start+BatchNodes, len(names))] {
			req.Held = append(req.Held, held[n])
		}
		tok, err := os.ReadFile(s.cfg.TokenFile)
		if err != nil {
			s.m.Calls.WithLabelValues("error").Inc()
			if ok, _ := s.logs.allow("token", s.now()); ok {
				s.log.Warn("read own token for peers", zap.String("file", s.cfg.TokenFile), zap.Error(err))
			}
			return
		}
		cctx, cancel := context.WithTimeout(ctx, max(s.cfg.Interval/2, time.Second))
		resp, err := client.LatestReports(cctx, req, grpc.PerRPCCredentials(bearerCreds(strings.TrimSpace(string(tok)))))
		cancel()
		if err != nil {
			s.m.Calls.WithLabelValues("error").Inc()
			if ok, suppressed := s.logs.allow("call\x00"+t.addr, s.now()); ok {
				s.log.Info("ask peer for unheard nodes", zap.String("peer", t.addr), zap.Error(err), zap.Int("suppressedSinceLast", suppressed))
			}
			return
		}
		if resp.GetReplica() == s.cfg.Identity {
			s.m.Calls.WithLabelValues("self").Inc()
			s.mu.Lock()
			s.self[t.addr] = true
			s.mu.Unlock()
			return
		}
		s.m.Calls.WithLabelValues("ok").Inc()
		via := resp.GetReplica()
		if via == "" || len(via) > 253 || !utf8.ValidString(via) {
			via = t.addr
		}
		for _, rr := range resp.GetReports() {
			h := held[rr.GetNodeName()]
			if h == nil {
				continue // not asked for: ignored
			}
			r, reason, detail := s.verify(ctx, rr, t.addr)
			if reason != "" {
				reject(s.m, s.logs, s.log, s.now(), reason, rr.GetNodeName(), via, detail)
				continue
			}
			if r.AgentInstanceID == h.GetAgentInstanceId() && r.Sequence <= h.GetSequence() {
				if r.Sequence < h.GetSequence() {
					reject(s.m, s.logs, s.log, s.now(), ReasonReplay, r.NodeName, via, fmt.Sprintf("sequence %d not above the held %d", r.Sequence, h.GetSequence()))
				}
				continue
			}
			// Received when the node said it: a peer cannot make it fresher.
			at := earliest(r.SentAt, s.now())
			if s.store.AcceptVia(r, at, via) {
				s.m.Accepted.Inc()
				h.AgentInstanceId, h.Sequence = r.AgentInstanceID, r.Sequence
			} else if ok, _ := s.logs.allow("older\x00"+r.NodeName, s.now()); ok {
				s.log.Debug("relayed report not newer than the held one", zap.String("node", r.NodeName), zap.String("peer", via))
			}
		}
	}
}

// earliest of two instants.
func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// verify checks one relayed report as ingest checks a report, with a key
// this replica vouches for itself.
func (s *Syncer) verify(ctx context.Context, rr *pb.RelayedReport, peerAddr string) (*report.NodeReport, string, string) {
	sr := rr.GetReport()
	node := rr.GetNodeName()
	if n := len(sr.GetPayload()); n > s.cfg.MaxPayloadBytes {
		return nil, ReasonOversized, fmt.Sprintf("payload of %d bytes over the %d byte limit", n, s.cfg.MaxPayloadBytes)
	}
	if len(sr.GetSignature()) == 0 {
		return nil, ReasonMissingSignature, "report is not signed"
	}
	pub := rr.GetPublicKey()
	if len(pub) != 32 {
		return nil, ReasonUnknownKey, "relayed public key is not an ed25519 key"
	}
	if sr.GetKeyId() != signing.KeyID(pub) {
		return nil, ReasonUnknownKey, fmt.Sprintf("report key id %q is not the relayed key's %s", sr.GetKeyId(), signing.KeyID(pub))
	}
	if reason, detail := s.vouch(ctx, node, rr.GetAgentInstanceId(), pub, rr.GetToken(), peerAddr); reason != "" {
		return nil, reason, detail
	}
	if err := signing.Verify(pub, sr.GetPayload(), sr.GetSignature()); err != nil {
		return nil, ReasonBadSignature, err.Error()
	}
	var p pb.NodeReport
	if err := p.UnmarshalVT(sr.GetPayload()); err != nil {
		return nil, ReasonMalformed, "decode report: " + err.Error()
	}
	r, err := wire.ReportFromProto(&p)
	if err != nil {
		return nil, ReasonMalformed, err.Error()
	}
	if r.NodeName != node {
		return nil, ReasonNodeMismatch, fmt.Sprintf("report for node %s relayed as %s's", r.NodeName, node)
	}
	if r.AgentInstanceID != rr.GetAgentInstanceId() {
		return nil, ReasonMalformed, fmt.Sprintf("report of agent instance %s relayed as instance %s's", r.AgentInstanceID, rr.GetAgentInstanceId())
	}
	if d := s.now().Sub(r.SentAt); d > s.cfg.SkewWindow || d < -s.cfg.SkewWindow {
		return nil, ReasonSkew, fmt.Sprintf("sent at %s, %s from now, window %s", r.SentAt.Format(time.RFC3339Nano), d, s.cfg.SkewWindow)
	}
	return r, "", ""
}

// vouch tells whether this replica itself binds pub to node: its own
// ingest authenticated that key for that node and instance, or it reviews
// the forwarded token now (the verdict kept for trustTTL).
func (s *Syncer) vouch(ctx context.Context, node, instance string, pub []byte, token, peerAddr string) (string, string) {
	if l, ok := s.src.Latest(node); ok && bytes.Equal(l.PublicKey, pub) && l.Instance == instance {
		return "", ""
	}
	now := s.now()
	s.mu.Lock()
	tk, ok := s.trusted[node]
	s.mu.Unlock()
	if ok && bytes.Equal(tk.pub, pub) && tk.instance == instance && now.Before(tk.until) {
		return "", ""
	}
	if token == "" {
		return ReasonUnknownKey, "key not authenticated by this replica and no token forwarded"
	}
	got, reason, detail, err := s.src.ReviewAgentToken(ctx, token, peerAddr)
	if err != nil {
		return ReasonAuthUnavailable, "review forwarded token: " + err.Error()
	}
	if reason != "" {
		return ReasonUnknownKey, "forwarded token refused (" + reason + "): " + detail
	}
	if got != node {
		return ReasonNodeMismatch, fmt.Sprintf("forwarded token is bound to node %s, relayed as %s's", got, node)
	}
	s.mu.Lock()
	if len(s.trusted) > 1<<16 {
		clear(s.trusted)
	}
	s.trusted[node] = trustedKey{pub: append([]byte(nil), pub...), instance: instance, until: now.Add(trustTTL)}
	s.mu.Unlock()
	return "", ""
}

// conn is the client connection to t, made once.
func (s *Syncer) conn(t target) (*grpc.ClientConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.conns[t.addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient("passthrough:///"+t.addr,
		grpc.WithTransportCredentials(&poolCreds{TransportCredentials: credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13}), serverName: t.serverName, pool: s.cfg.CAPool}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(BatchNodes*(s.cfg.MaxPayloadBytes+32<<10))))
	if err != nil {
		return nil, fmt.Errorf("peer client %s: %w", t.addr, err)
	}
	s.conns[t.addr] = c
	return c, nil
}

func (s *Syncer) closeConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for a, c := range s.conns {
		_ = c.Close()
		delete(s.conns, a)
	}
}

// poolCreds verify a peer with the CA bundle as it is at each handshake
// (the aggregators' CA rotates).
type poolCreds struct {
	credentials.TransportCredentials
	serverName string
	pool       func() (*x509.CertPool, error)
}

// ClientHandshake implements credentials.TransportCredentials.
func (c *poolCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	pool, err := c.pool()
	if err != nil {
		return nil, nil, fmt.Errorf("peer CA bundle: %w", err)
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool, ServerName: c.serverName}
	return credentials.NewTLS(tc).ClientHandshake(ctx, authority, raw)
}

// Clone implements credentials.TransportCredentials.
func (c *poolCreds) Clone() credentials.TransportCredentials {
	return &poolCreds{TransportCredentials: c.TransportCredentials.Clone(), serverName: c.serverName, pool: c.pool}
}

// bearerCreds sends the token as bearer metadata, over TLS only.
type bearerCreds string

func (b bearerCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (b bearerCreds) RequireTransportSecurity() bool { return true }
