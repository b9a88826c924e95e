// Package uplink streams the agent's signed reports to every aggregator
// replica.
//
// Publish stamps each report with this process's random agent instance id
// and the next sequence number (the uplink owns both, so the sequence is
// strictly increasing per instance whatever the caller does), signs its exact
// bytes once with the in-memory ed25519 key, and keeps it as the newest
// report. Every replica has its own goroutine, gRPC connection, stream and
// exponential backoff; each sends the newest report it has not sent yet, so
// nothing queues and a slow or dead replica delays no other. A report is sent
// to a replica at most once: after a reconnect only newer reports go out, so a
// report that did arrive is never replayed by us.
package uplink

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/cozystack/cozy-health/pkg/report"
	"github.com/cozystack/cozy-health/pkg/signing"
	"github.com/cozystack/cozy-health/pkg/tlsutil"
	"github.com/cozystack/cozy-health/pkg/version"
	"github.com/cozystack/cozy-health/pkg/wire"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// Defaults of the tunables; a zero value in Config means the default.
const (
	DefaultResolveInterval  = 30 * time.Second
	DefaultResolveUnsettled = time.Minute
	DefaultBackoffInitial   = 500 * time.Millisecond
	// DefaultBackoffMax: a replica that comes back (restarted, or a
	// partition healed) has every agent again within ~12 s (10 s + 20 %
	// jitter), inside its warm-up (--warm-up-max 45 s), while 5,000 agents
	// retrying a replica that is gone cost at most ~500 refused dials/s.
	DefaultBackoffMax   = 10 * time.Second
	DefaultHelloTimeout = 10 * time.Second
	DefaultAckTimeout   = 10 * time.Second
	// DefaultKeepaliveTime is grpc-go's floor for client pings; with
	// DefaultKeepaliveTimeout a silent replica is dropped within 15 s, or
	// within AckTimeout of the first report it leaves unanswered.
	DefaultKeepaliveTime    = 10 * time.Second
	DefaultKeepaliveTimeout = 5 * time.Second
)

// Config configures the uplink; agent flags map onto it one to one.
type Config struct {
	// Aggregators are host:port addresses and/or DNS names (a headless
	// Service) resolved to all their A/AAAA records (--aggregator).
	Aggregators []string
	// CAFile verifies the aggregators' serving certificates (--ca-file).
	CAFile string
	// TokenFile is the projected ServiceAccount token, re-read on rotation
	// (--token-file): it is read again for every stream opened.
	TokenFile string
	// NodeName is the node this agent speaks for (--node-name).
	NodeName string
	// InsecureDevKeyFile, when set, signs with a static key from this file
	// instead of a fresh in-memory key (--insecure-dev-key-file).
	InsecureDevKeyFile string
	// ResolveInterval is how often DNS names are re-resolved while the
	// replicas stay the same and some stream; while none streams, and for
	// ResolveUnsettled after they changed or a stream broke, sooner (from
	// 1 s, doubling up to 8 s), as a replaced replica's pod shows up in DNS
	// within seconds.
	ResolveInterval time.Duration
	// ResolveUnsettled is how long after the replicas changed the quick
	// re-resolves go on (default 1 min).
	ResolveUnsettled time.Duration
	// Resolver resolves the Aggregators' names; nil is net.DefaultResolver.
	Resolver *net.Resolver

	// AgentVersion is sent in the Hello and stamped on reports that carry
	// none; defaults to version.Version.
	AgentVersion string
	// BackoffInitial and BackoffMax bound each replica's reconnect backoff
	// (doubling, with jitter, reset after a stream got an ack).
	BackoffInitial, BackoffMax time.Duration
	// HelloTimeout bounds connecting plus the Hello's ack.
	HelloTimeout time.Duration
	// AckTimeout: a stream whose oldest unacknowledged report is older than
	// this is torn down and reopened (a replica that is alive to keepalives
	// but stuck).
	AckTimeout time.Duration
	// KeepaliveTime and KeepaliveTimeout: the agent pings a silent replica
	// after Time (grpc-go raises anything below 10 s to 10 s) and drops the
	// connection Timeout later. The aggregator permits pings every 3 s or
	// slower.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// MaxReportBytes is the report budget: the aggregators' payload limit
	// (default report.MaxReportBytes). A report over it is folded to fit
	// (wire.Fit) before it is signed.
	MaxReportBytes int
	// Registerer registers the uplink metrics; nil registers nowhere.
	Registerer prometheus.Registerer
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.ResolveInterval, DefaultResolveInterval)
	def(&c.ResolveUnsettled, DefaultResolveUnsettled)
	def(&c.BackoffInitial, DefaultBackoffInitial)
	def(&c.BackoffMax, DefaultBackoffMax)
	def(&c.HelloTimeout, DefaultHelloTimeout)
	def(&c.AckTimeout, DefaultAckTimeout)
	def(&c.KeepaliveTime, DefaultKeepaliveTime)
	def(&c.KeepaliveTimeout, DefaultKeepaliveTimeout)
	if c.AgentVersion == "" {
		c.AgentVersion = version.Version
	}
	if c.MaxReportBytes <= 0 {
		c.MaxReportBytes = report.MaxReportBytes
	}
	return c
}

// Validate checks c with its defaults applied.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if len(c.Aggregators) == 0 {
		errs = append(errs, errors.New("at least one aggregator address is required"))
	}
	for _, a := range c.Aggregators {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			errs = append(errs, fmt.Errorf("aggregator %q: want host:port", a))
		}
	}
	if c.CAFile == "" {
		errs = append(errs, errors.New("a CA file is required to verify the aggregators"))
	}
	if c.NodeName == "" {
		errs = append(errs, errors.New("node name is required"))
	}
	if c.TokenFile == "" && c.InsecureDevKeyFile == "" {
		errs = append(errs, errors.New("a token file is required"))
	}
	if c.BackoffInitial < 0 || c.BackoffMax < c.BackoffInitial {
		errs = append(errs, errors.New("backoff must be positive with max >= initial"))
	}
	if c.ResolveInterval < 0 || c.ResolveUnsettled < 0 || c.HelloTimeout < 0 || c.AckTimeout < 0 || c.KeepaliveTime < 0 || c.KeepaliveTimeout < 0 {
		errs = append(errs, errors.New("intervals and timeouts must not be negative"))
	}
	return errors.Join(errs...)
}

// pending is the newest signed report.
type pending struct {
	seq uint64
	sr  *pb.SignedReport
}

// Uplink keeps one stream per aggregator replica.
type Uplink struct {
	cfg        Config
	log        *zap.Logger
	signer     *signing.Signer
	instanceID string
	tls        *tls.Config
	ca         *tlsutil.CAFile
	m          *metrics

	seq    atomic.Uint64
	latest atomic.Pointer[pending]
	// fitState is 0 while reports fit as they are, 1 while they are
	// folded, 2 while even folding does not make them fit: its changes are
	// logged.
	fitState atomic.Int32
	desired  atomic.Int64 // nanoseconds

	// streamLost wakes the resolve loop when a stream that was open
	// breaks: the replica's pod may be gone, and its replacement joins the
	// Service within seconds.
	streamLost chan struct{}

	mu sync.Mutex // guards replicas and resolved
	// replicas by dial address.
	replicas map[string]*replica
	// resolved is the last good resolution of each Aggregators entry.
	resolved map[string][]target
}

// New validates cfg and builds an Uplink; nothing connects until Run.
func New(cfg Config, log *zap.Logger) (*Uplink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("uplink config: %w", err)
	}
	cfg = cfg.withDefaults()
	if log == nil {
		log = zap.NewNop()
	}
	log = log.With(zap.String("component", "uplink"))
	// The CA bundle is read for every connection (it rotates); a bundle not
	// mounted yet fails connections, with the reason, until it is.
	ca := tlsutil.NewCAFile(cfg.CAFile)
	if _, _, err := ca.Pool(); err != nil {
		log.Warn("aggregator CA bundle not readable yet; connections fail until it is", zap.String("caFile", cfg.CAFile), zap.Error(err))
	}
	var signer *signing.Signer
	var err error
	if cfg.InsecureDevKeyFile != "" {
		signer, err = signing.LoadKeyFile(cfg.InsecureDevKeyFile)
		if err != nil {
			return nil, fmt.Errorf("uplink: %w", err)
		}
		log.Warn("INSECURE: signing reports with a static development key", zap.String("file", cfg.InsecureDevKeyFile), zap.String("keyID", signer.KeyID()))
	} else if signer, err = signing.Generate(); err != nil {
		return nil, fmt.Errorf("uplink: %w", err)
	}
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return nil, fmt.Errorf("uplink: agent instance id: %w", err)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Uplink{
		cfg: cfg, log: log, signer: signer, instanceID: hex.EncodeToString(id),
		tls: &tls.Config{MinVersion: tls.VersionTLS13}, ca: ca, m: m,
		replicas: map[string]*replica{}, resolved: map[string][]target{}, streamLost: make(chan struct{}, 1),
	}, nil
}

// InstanceID returns this process's random agent instance id.
func (u *Uplink) InstanceID() string { return u.instanceID }

// KeyID returns the id of the key reports are signed with.
func (u *Uplink) KeyID() string { return u.signer.KeyID() }

// Publish hands over the newest report; it never blocks, and a report not yet
// sent to a replica is replaced by a newer one. It stamps a copy of r with
// the agent instance id and the next sequence number, and with the node name,
// agent version and sent-at when r leaves them empty, then signs it.
func (u *Uplink) Publish(r *report.NodeReport) {
	c := *r
	c.AgentInstanceID = u.instanceID
	c.Sequence = u.seq.Add(1)
	if c.NodeName == "" {
		c.NodeName = u.cfg.NodeName
	}
	if c.AgentVersion == "" {
		c.AgentVersion = u.cfg.AgentVersion
	}
	if c.SentAt.IsZero() {
		c.SentAt = time.Now()
	}
	fitted, fit := wire.Fit(&c, u.cfg.MaxReportBytes)
	u.countFit(c.Sequence, fit)
	sr, err := u.signer.SignReport(fitted)
	if err != nil {
		u.log.Error("sign report", zap.Uint64("sequence", c.Sequence), zap.Error(err))
		return
	}
	u.latest.Store(&pending{seq: c.Sequence, sr: sr})
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, rep := range u.replicas {
		rep.wakeUp()
	}
}

// countFit counts what wire.Fit changed in a report and logs when the
// report starts or stops being folded (or cannot be made to fit).
func (u *Uplink) countFit(seq uint64, fit wire.FitResult) {
	u.m.reportBytes.Set(float64(fit.Bytes))
	u.m.folded.Add(float64(fit.Folded))
	u.m.bounded.Add(float64(fit.Bounded))
	over := fit.Bytes > u.cfg.MaxReportBytes
	state := int32(0)
	switch {
	case over:
		state = 2
	case fit.Folded > 0:
		state = 1
	}
	if u.fitState.Swap(state) == state {
		return
	}
	fields := []zap.Field{zap.Uint64("sequence", seq), zap.Int("bytes", fit.Bytes), zap.Int("budget", u.cfg.MaxReportBytes),
		zap.Int("folded", fit.Folded), zap.Int("messagesLeftOut", fit.Stripped), zap.Int("messagesCut", fit.Cut)}
	switch state {
	case 2:
		u.log.Error("report over the budget even folded: the aggregators refuse it as oversized", fields...)
	case 1:
		u.log.Warn("report over the budget: observations folded into summaries (at least Unknown) to fit", fields...)
	default:
		u.log.Info("report within the budget again: nothing folded", fields...)
	}
}

// DesiredInterval returns the interval the aggregators asked for in their
// latest ack, or 0 when none has.
func (u *Uplink) DesiredInterval() time.Duration { return time.Duration(u.desired.Load()) }

// StreamStats is what the uplink knows about its stream to one replica.
type StreamStats struct {
	// Connected: the replica accepted our Hello and the stream is open.
	Connected bool
	// Sent and Acked count reports sent and acknowledged as accepted;
	// Rejected counts reports acknowledged as rejected.
	Sent, Acked, Rejected uint64
	// LastAcked is the sequence of the latest accepted report.
	LastAcked uint64
}

// Streams returns the stream of every replica currently resolved, by dial
// address.
func (u *Uplink) Streams() map[string]StreamStats {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make(map[string]StreamStats, len(u.replicas))
	for a, r := range u.replicas {
		out[a] = StreamStats{
			Connected: r.connected.Load(), Sent: r.sent.Load(), Acked: r.acked.Load(),
			Rejected: r.rejected.Load(), LastAcked: r.lastAcked.Load(),
		}
	}
	return out
}

// Run connects to every replica and streams until ctx is done. It returns
// nil when ctx is cancelled.
func (u *Uplink) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer func() {
		u.mu.Lock()
		for _, r := range u.replicas {
			r.cancel()
		}
		u.mu.Unlock()
		wg.Wait()
	}()
	t := time.NewTimer(0)
	defer t.Stop()
	next := time.Now() // when t fires
	quick := resolveRetryInitial
	var last map[string]target
	var unsettledUntil time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-u.streamLost:
			// A stream that was open broke: its pod may be gone, and the
			// replacement joins the Service within seconds. Resolve at the
			// quick pace from now on, but never sooner than it (a replica
			// that keeps accepting and dropping streams does not turn into
			// a DNS query per reconnect).
			now := time.Now()
			if !now.Before(unsettledUntil) {
				quick = resolveRetryInitial
			}
			unsettledUntil = now.Add(u.cfg.ResolveUnsettled)
			if next.Sub(now) > quick {
				t.Reset(quick)
				next = now.Add(quick)
			}
			continue
		case <-t.C:
		}
		targets := u.resolve(ctx)
		u.reconcile(ctx, targets, &wg)
		now := time.Now()
		if len(targets) == 0 || !sameTargets(last, targets) || u.streaming() == 0 {
			// Nothing to stream to (a fresh install, or every replica
			// down), or replicas that came or went: more changes follow
			// within seconds (the Deployment replaces a deleted pod, a
			// rollout goes on), and a warming replica waits for this node's
			// reports. One replica that stays down (crash looping, still
			// listed) beside others that stream does not keep the quick
			// pace.
			unsettledUntil = now.Add(u.cfg.ResolveUnsettled)
		}
		last = targets
		wait := u.cfg.ResolveInterval
		if now.Before(unsettledUntil) {
			wait, quick = min(quick, wait), min(2*quick, resolveRetryMax)
		} else {
			quick = resolveRetryInitial
		}
		t.Reset(wait)
		next = now.Add(wait)
	}
}

// For ResolveUnsettled after the replicas changed or a stream broke, and
// while no replica streams, re-resolves wait 1 s, doubling up to 8 s: a
// replacement replica is found within seconds, and while no replica
// streams a thousand agents ask the cluster DNS about 125 times a second.
const (
	resolveRetryInitial = time.Second
	resolveRetryMax     = 8 * time.Second
)

func sameTargets(a, b map[string]target) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			return false
		}
	}
	return true
}

// streaming counts the replicas whose stream is open.
func (u *Uplink) streaming() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, r := range u.replicas {
		if r.connected.Load() {
			n++
		}
	}
	return n
}

// lostStream wakes the resolve loop (see streamLost); it never blocks.
func (u *Uplink) lostStream() {
	select {
	case u.streamLost <- struct{}{}:
	default:
	}
}

// target is one replica to dial: an IP address and port, and the name its
// certificate must carry.
type target struct {
	addr, serverName string
}

// resolve turns the Aggregators entries into targets. An entry that fails to
// resolve keeps its previous targets, so a DNS blip drops no stream.
func (u *Uplink) resolve(ctx context.Context) map[string]target {
	out := map[string]target{}
	for _, entry := range u.cfg.Aggregators {
		host, port, _ := net.SplitHostPort(entry) // checked by Validate
		var ts []target
		if ip := net.ParseIP(host); ip != nil {
			ts = []target{{addr: net.JoinHostPort(ip.String(), port), serverName: host}}
		} else {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			ips, err := u.resolver().LookupIPAddr(rctx, host)
			cancel()
			if err != nil || len(ips) == 0 {
				u.mu.Lock()
				ts = u.resolved[entry]
				u.mu.Unlock()
				if ctx.Err() == nil {
					u.log.Warn("resolve aggregator", zap.String("aggregator", entry), zap.Int("keptAddresses", len(ts)), zap.Error(err))
				}
			} else {
				for _, ip := range ips {
					ts = append(ts, target{addr: net.JoinHostPort(ip.IP.String(), port), serverName: strings.TrimSuffix(host, ".")})
				}
			}
		}
		u.mu.Lock()
		u.resolved[entry] = ts
		u.mu.Unlock()
		for _, t := range ts {
			out[t.addr] = t
		}
	}
	return out
}

func (u *Uplink) resolver() *net.Resolver {
	if u.cfg.Resolver != nil {
		return u.cfg.Resolver
	}
	return net.DefaultResolver
}

// reconcile starts a replica goroutine per new target and stops those of
// targets gone from DNS.
func (u *Uplink) reconcile(ctx context.Context, targets map[string]target, wg *sync.WaitGroup) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if ctx.Err() != nil {
		return
	}
	for addr, r := range u.replicas {
		if _, ok := targets[addr]; !ok {
			u.log.Info("aggregator replica gone from DNS", zap.String("aggregator", addr))
			r.cancel()
			delete(u.replicas, addr)
		}
	}
	for addr, t := range targets {
		if _, ok := u.replicas[addr]; ok {
			continue
		}
		rctx, cancel := context.WithCancel(ctx)
		r := &replica{target: t, cancel: cancel, wake: make(chan struct{}, 1)}
		u.replicas[addr] = r
		wg.Add(1)
		go func() {
			defer wg.Done()
			u.runReplica(rctx, r)
		}()
	}
}
