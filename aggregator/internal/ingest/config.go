package ingest

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/tlsutil"
)

// Defaults of the tunables; a zero value in Config means the default.
const (
	DefaultTokenAudience       = "health.cozystack.io"
	DefaultAgentServiceAccount = "cozy-health/cozy-health-agent"
	DefaultDesiredInterval     = 5 * time.Second
	// DefaultMaxPayloadBytes bounds one serialized NodeReport: the report
	// budget the agents fit their reports into (report.MaxReportBytes). A
	// report of 30 observations is about 4 KiB; an agent folds what does
	// not fit (wire.Fit).
	DefaultMaxPayloadBytes = report.MaxReportBytes
	// DefaultSkewWindow is how far a report's sent-at may be from the
	// aggregator's clock, in either direction.
	DefaultSkewWindow = time.Minute
	// DefaultRatePerNode and DefaultRateBurst bound the reports one node may
	// send to one replica: with the default 5 s interval an agent sends 0.2
	// reports/s.
	DefaultRatePerNode = 2.0
	DefaultRateBurst   = 10
	// DefaultTokenReviewCacheTTL is how long a TokenReview result (positive
	// or negative) is reused for the same token.
	DefaultTokenReviewCacheTTL = 10 * time.Second
	// DefaultHelloTimeout is how long a new stream may take to send its
	// Hello.
	DefaultHelloTimeout = 10 * time.Second
	// DefaultMaxConnectionAge closes connections (agents reconnect at once,
	// re-reading their rotated token) so no stream outlives its token by
	// long.
	DefaultMaxConnectionAge = 30 * time.Minute
	// DefaultKeepaliveTime and DefaultKeepaliveTimeout: the server pings a
	// silent client after Time and drops it Timeout later.
	DefaultKeepaliveTime    = 10 * time.Second
	DefaultKeepaliveTimeout = 5 * time.Second
	// KeepaliveMinTime is the most frequent client ping the server permits;
	// the uplink pings every 10 s (grpc-go's floor for clients).
	KeepaliveMinTime = 3 * time.Second
	// envelopeSlack is what a message may carry beyond the payload: the
	// signature, the key id, or a Hello's token and key.
	envelopeSlack = 16 << 10
)

// Config configures ingest; aggregator flags map onto it. A zero value of
// any tunable (everything but the identity fields) means its default.
type Config struct {
	// TokenAudience is the audience agent tokens must carry (--token-audience).
	TokenAudience string
	// AgentServiceAccount is namespace/name of the agents' ServiceAccount
	// (--agent-service-account).
	AgentServiceAccount string
	// DesiredInterval is sent to agents in every ack.
	DesiredInterval time.Duration
	// InsecureDevKeysDir, when set, accepts streams whose key is listed there
	// (as <node>.pub) without a token (--insecure-dev-keys-dir). Never the
	// default.
	InsecureDevKeysDir string

	// TLSCertFile and TLSKeyFile are the serving pair (--tls-cert,
	// --tls-key), used by ServerOptions; re-read when they change.
	TLSCertFile, TLSKeyFile string
	// GetCertificate, when set, serves instead of the files (the
	// certificate of a watched Secret, swapped without a restart).
	GetCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)

	// MaxPayloadBytes bounds one serialized report.
	MaxPayloadBytes int
	// SkewWindow bounds |sent-at - now|.
	SkewWindow time.Duration
	// RatePerNode (reports per second) and RateBurst bound each node's
	// reports on this replica.
	RatePerNode float64
	RateBurst   int
	// TokenReviewCacheTTL is how long a TokenReview result is reused.
	TokenReviewCacheTTL time.Duration
	// HelloTimeout bounds the wait for a stream's Hello.
	HelloTimeout time.Duration
	// MaxConnectionAge, KeepaliveTime and KeepaliveTimeout go into
	// ServerOptions.
	MaxConnectionAge, KeepaliveTime, KeepaliveTimeout time.Duration

	// Surface bounds what unauthenticated clients and one node's token
	// can hold on this replica (see surface.go).
	Surface SurfaceLimits

	// CheckPeerAddress refuses a hello whose connection does not come from
	// one of its node's addresses (Deps.NodeAddresses; see checkPeer).
	CheckPeerAddress bool
}

// DefaultConfig returns a Config with every default filled in and no TLS
// files.
func DefaultConfig() Config {
	return Config{TokenAudience: DefaultTokenAudience, AgentServiceAccount: DefaultAgentServiceAccount}.withDefaults()
}

func (c Config) withDefaults() Config {
	orDefault(&c.DesiredInterval, DefaultDesiredInterval)
	orDefault(&c.SkewWindow, DefaultSkewWindow)
	orDefault(&c.TokenReviewCacheTTL, DefaultTokenReviewCacheTTL)
	orDefault(&c.HelloTimeout, DefaultHelloTimeout)
	orDefault(&c.MaxConnectionAge, DefaultMaxConnectionAge)
	orDefault(&c.KeepaliveTime, DefaultKeepaliveTime)
	orDefault(&c.KeepaliveTimeout, DefaultKeepaliveTimeout)
	orDefault(&c.MaxPayloadBytes, DefaultMaxPayloadBytes)
	orDefault(&c.RatePerNode, DefaultRatePerNode)
	orDefault(&c.RateBurst, DefaultRateBurst)
	c.Surface = c.Surface.withDefaults()
	return c
}

// Validate checks c with its defaults applied.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.TokenAudience == "" {
		errs = append(errs, errors.New("token audience is required"))
	}
	if _, _, err := splitServiceAccount(c.AgentServiceAccount); err != nil {
		errs = append(errs, err)
	}
	for name, d := range map[string]time.Duration{
		"desired interval": c.DesiredInterval, "skew window": c.SkewWindow, "token review cache ttl": c.TokenReviewCacheTTL,
		"hello timeout": c.HelloTimeout, "max connection age": c.MaxConnectionAge, "keepalive time": c.KeepaliveTime,
		"keepalive timeout": c.KeepaliveTimeout,
	} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative, got %s", name, d))
		}
	}
	if c.MaxPayloadBytes < 0 || c.RatePerNode < 0 || c.RateBurst < 0 {
		errs = append(errs, errors.New("max payload bytes, rate per node and rate burst must not be negative"))
	}
	if err := c.Surface.validate(); err != nil {
		errs = append(errs, err)
	}
	if c.DesiredInterval > 0 && c.RatePerNode*c.DesiredInterval.Seconds() < 1.5 {
		errs = append(errs, fmt.Errorf("rate per node %.3g/s would reject agents reporting every %s", c.RatePerNode, c.DesiredInterval))
	}
	return errors.Join(errs...)
}

// splitServiceAccount parses namespace/name.
func splitServiceAccount(s string) (ns, name string, err error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("agent service account %q: want namespace/name", s)
	}
	return ns, name, nil
}

// Per-connection buffer sizes of the ingest listener; see ServerOptions.
const (
	// No read buffer: the framer reads from the TLS connection, which
	// already holds each decrypted record; a bufio layer on top would cost
	// 4 KiB more per agent connection.
	connReadBuffer  = 0
	connWriteBuffer = 4 << 10
	// The windows are credit, not memory: the handler reads each report as
	// it arrives. Large ones make the WINDOW_UPDATE frames the aggregator
	// sends rare (every ~180 reports of a stream, not every ~11), so an
	// acknowledgement is nearly the only thing it writes.
	streamWindow = 256 << 10
	connWindow   = 1 << 20
)

// ServerOptions returns the grpc.Server options ingest needs: TLS from
// cfg's GetCertificate or its cert and key files (re-read on rotation), keepalive parameters and
// enforcement, and a receive limit just above the payload limit. The
// aggregator builds its one grpc.Server with them.
func ServerOptions(cfg Config) ([]grpc.ServerOption, error) {
	cfg = cfg.withDefaults()
	var tc *tls.Config
	if cfg.GetCertificate != nil {
		tc = &tls.Config{MinVersion: tls.VersionTLS13, GetCertificate: tlsutil.RefuseExpired(cfg.GetCertificate, time.Now)}
	} else {
		var err error
		if tc, err = tlsutil.ServerConfig(cfg.TLSCertFile, cfg.TLSKeyFile); err != nil {
			return nil, fmt.Errorf("ingest tls: %w", err)
		}
	}
	return []grpc.ServerOption{
		grpc.Creds(credentials.NewTLS(tc)),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time: cfg.KeepaliveTime, Timeout: cfg.KeepaliveTimeout,
			MaxConnectionAge: cfg.MaxConnectionAge, MaxConnectionAgeGrace: 10 * time.Second,
		}),
		grpc.MaxRecvMsgSize(cfg.MaxPayloadBytes + envelopeSlack),
		// An agent uses one stream per connection and a drain client one
		// unary call at a time: a few streams per connection are plenty,
		// and an HTTP/2 client opening more is refused by the transport.
		grpc.MaxConcurrentStreams(cfg.Surface.MaxConcurrentStreams),
		// One long-lived connection per agent, a few KiB every interval: at
		// 5,000 agents grpc-go's 32 KiB per-connection read and write
		// buffers would cost hundreds of MiB. No read buffer and a write
		// buffer returned to a pool after each flush keep a connection's
		// buffers small; fixed windows turn BDP estimation (its pings) off.
		grpc.ReadBufferSize(connReadBuffer),
		grpc.WriteBufferSize(connWriteBuffer),
		grpc.SharedWriteBuffer(true),
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
		grpc.ForceServerCodecV2(newCodec()),
		// A connection carries one stream, so one request header block: a
		// dynamic HPACK table (about 1 KiB per connection once filled)
		// would compress nothing. Size 0 tells agents not to fill it.
		grpc.HeaderTableSize(0),
	}, nil
}

// ServerOptions are ServerOptions(cfg) of s's configuration and s's Tap,
// which admits the calls on the ingest port that are not agent streams.
func (s *Server) ServerOptions() ([]grpc.ServerOption, error) {
	opts, err := ServerOptions(s.cfg)
	if err != nil {
		return nil, err
	}
	return append(opts, grpc.InTapHandle(s.Tap)), nil
}

// orDefault sets *v to d when it holds its type's zero value: a field the
// caller left unset takes the default.
func orDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}
