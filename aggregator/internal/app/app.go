// Package app is the one place the aggregator is wired: ingest -> state ->
// rollup -> {writer, metrics, drain}, the gRPC server (ingest and
// DrainService), the probe/drain HTTP server, the metrics server, the
// Node informer and leader election. main builds a Config and calls New and
// Run; tests and benchmarks do the same in process.
//
// New only builds: it opens the listeners but starts no goroutine. Run
// starts everything under one errgroup and stops it all when its context
// ends. Kubernetes is read through one client and one shared informer
// factory (App.informers), started in Run.
package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"

	"github.com/cozystack/cozy-health/aggregator/internal/adapterkit"
	"github.com/cozystack/cozy-health/aggregator/internal/config"
	"github.com/cozystack/cozy-health/aggregator/internal/delegated"
	"github.com/cozystack/cozy-health/aggregator/internal/drainserver"
	"github.com/cozystack/cozy-health/aggregator/internal/ingest"
	"github.com/cozystack/cozy-health/aggregator/internal/leader"
	"github.com/cozystack/cozy-health/aggregator/internal/linstorview"
	"github.com/cozystack/cozy-health/aggregator/internal/metrics"
	"github.com/cozystack/cozy-health/aggregator/internal/peers"
	"github.com/cozystack/cozy-health/aggregator/internal/quorum"
	"github.com/cozystack/cozy-health/aggregator/internal/rollup"
	"github.com/cozystack/cozy-health/aggregator/internal/servingcert"
	"github.com/cozystack/cozy-health/aggregator/internal/state"
	"github.com/cozystack/cozy-health/aggregator/internal/status"
	"github.com/cozystack/cozy-health/aggregator/internal/writer"
	"github.com/cozystack/cozy-health/pkg/client/clientset/versioned"
	"github.com/cozystack/cozy-health/pkg/logging"
	"github.com/cozystack/cozy-health/pkg/memtrim"
	"github.com/cozystack/cozy-health/pkg/tlsutil"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

var _ ingest.Sink = (*state.State)(nil)

// Options are the non-flag inputs of New.
type Options struct {
	// RestConfig, when set, is used instead of --kubeconfig / in-cluster.
	RestConfig *rest.Config
	// Clock defaults to the real clock.
	Clock clock.WithTicker
	// Registry, when set, is the registry every metric is registered on
	// and /metrics serves, instead of a new one: the metrics reference
	// (docs/reference/metrics.md) is generated from what New registers.
	Registry Registry
}

// Registry is where the aggregator's metrics are registered and gathered
// from (a *prometheus.Registry).
type Registry interface {
	prometheus.Registerer
	prometheus.Gatherer
}

// App is a wired aggregator.
type App struct {
	cfg config.Config
	// base is the logger New was given, which the subsystems it wires
	// add their own component to; log is its own (component aggregator).
	base  *zap.Logger
	log   *zap.Logger
	clock clock.WithTicker
	// kube and hc are the trusted clients: informers, adapters, the writer
	// (hc). reviews is a second client, on its own connection and rate
	// limiter, for the reviews that untrusted callers cause (agents'
	// TokenReviews, delegated authn/authz of drain and /metrics): a flood
	// of them cannot delay a Lease renewal or a Health write.
	kube    kubernetes.Interface
	hc      versioned.Interface
	reviews kubernetes.Interface
	authz   *delegated.Authorizer
	// lease renews the Lease, on a client of its own too (informer
	// relists and adapter reads share kube's rate limiter).
	lease kubernetes.Interface
	// informers is the one shared informer factory on kube: every watch of
	// a Kubernetes object goes through it (the Node informer feeds both the
	// state's node set and the drain check). New takes informers from it and
	// registers handlers; Run starts it. A cluster adapter plugs in the same
	// way: its informers come from this factory (or, for CRDs such as
	// HelmReleases, CNPG Clusters or Kamaji control planes, from a dynamic
	// informer factory kept beside it and started at the same place in Run),
	// and any loop it needs runs as one more goroutine of Run's errgroup.
	informers informers.SharedInformerFactory
	// healths watches the Health objects of the platform namespace (the
	// watchdog's freshUntil metric); kept beside the factory, as it is a
	// CRD, and started with it.
	healths cache.SharedIndexInformer
	reg     Registry
	metrics *metrics.Metrics
	state   *state.State
	nodes   labels.Selector
	writer  *writer.Writer
	// publish hands desired status to the metrics and the writer.
	publish status.Publisher
	engine  *rollup.Engine
	// rollup is what the engine judges against.
	rollup rollup.Config
	// adapters runs the cluster adapters (nil with --adapters=false); its
	// informers are dynamic, one per served API, started and stopped as
	// CRDs come and go, under Run's errgroup.
	adapters *adapterkit.Manager
	// linstor reads the LINSTOR controller's view (nil without
	// --linstor-url); the engine and the drain check read it.
	linstor *linstorview.Reader
	drain   *drainserver.Service
	// claims counts and logs the cluster claims the rollup and the drain
	// check do not believe (quorum.Auditor).
	claims  *quorum.Auditor
	ingest  *ingest.Server
	grpc    *grpc.Server
	health  *health.Server
	httpSrv *http.Server
	metSrv  *http.Server

	// peerSync asks the other replicas for the nodes this one does not
	// hear (nil without --peers).
	peerSync *peers.Syncer

	// certs serves the certificate of the watched Secret (--tls-mode
	// secret or self-signed); nil with --tls-mode=files. Its informer comes
	// from secretInformers, a factory kept beside informers because it is
	// scoped to that one Secret's name (RBAC resourceNames), and started
	// with it.
	certs           *servingcert.Manager
	secretInformers informers.SharedInformerFactory
	// leaseInformers watches the kubelets' Leases in kube-node-lease
	// (kubeletLeases), a namespaced factory beside informers.
	leaseInformers informers.SharedInformerFactory

	grpcLis, httpLis, metLis net.Listener
	// guard is the drain guard (nil without --guard-addr).
	guard *guardServer
	// budget is every node's drain verdict, computed continuously
	// (cozy_health_drain_verdict).
	budget *drainserver.Budget
	// ready is set when the warm-up is done (see warmUp); warming says,
	// until then, how far it is.
	ready   atomic.Bool
	warming atomic.Pointer[string]
	// nodesSynced tells whether the Node informer has synced: until it
	// has, the expected nodes are not known; nodeLister lists them.
	nodesSynced func() bool
	nodeLister  corelisters.NodeLister
}

// RestConfig returns the client configuration --kubeconfig names, or the
// in-cluster one.
func RestConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster config (set --kubeconfig outside a cluster): %w", err)
		}
		return c, nil
	}
	c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	}
	return c, nil
}

// New builds the aggregator and opens its listeners. cfg must be validated.
// It sets GOMAXPROCS to cfg.MaxProcs unless $GOMAXPROCS is set.
func New(cfg config.Config, log *zap.Logger, opts Options) (a *App, err error) {
	if cfg.MaxProcs > 0 && os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(cfg.MaxProcs)
	}
	a = &App{cfg: cfg, base: log, log: logging.Component(log, "aggregator"), clock: opts.Clock}
	if a.clock == nil {
		a.clock = clock.RealClock{}
	}
	if a.nodes, err = cfg.Nodes(); err != nil {
		return nil, fmt.Errorf("--node-selector: %w", err)
	}
	rc := opts.RestConfig
	if rc == nil {
		if rc, err = RestConfig(cfg.Kubeconfig); err != nil {
			return nil, err
		}
	}
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = 20, 40
	rc.UserAgent = "cozy-health-aggregator"
	if a.kube, err = kubernetes.NewForConfig(rc); err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	hc, err := versioned.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("health client: %w", err)
	}
	a.hc = hc
	if a.reviews, err = kubernetes.NewForConfig(reviewConfig(rc)); err != nil {
		return nil, fmt.Errorf("review client: %w", err)
	}
	a.authz = delegated.New(a.reviews, 10*time.Second)
	if a.lease, err = kubernetes.NewForConfig(ownClient(rc, 5, 10, "leader-election")); err != nil {
		return nil, fmt.Errorf("leader election client: %w", err)
	}

	if a.reg = opts.Registry; a.reg == nil {
		a.reg = prometheus.NewRegistry()
	}
	if err := a.reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("register go collector: %w", err)
	}
	if err := a.reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("register process collector: %w", err)
	}
	if a.metrics, err = metrics.New(a.reg); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	obs := &stateObservers{a.metrics}
	a.state = state.New(obs)
	a.writer, err = writer.New(writer.Config{
		Namespace: cfg.Namespace, FreshFor: cfg.FreshFor(), RefreshPeriod: cfg.RefreshPeriod,
		WritesPerSecond: cfg.WritesPerSecond, WriteBurst: cfg.WriteBurst,
		AdapterFreshFor: cfg.AdapterFreshFor, AdapterRefreshPeriod: cfg.AdapterRefreshPeriod, AdapterWritesPerSecond: cfg.AdapterWritesPerSecond,
	}, hc, a.metrics, a.base, a.clock)
	if err != nil {
		return nil, err
	}
	if a.claims, err = quorum.NewAuditor(a.reg, a.base, a.clock.Now); err != nil {
		return nil, err
	}
	// One publisher: every replica exports what it decides; only the
	// leader's writer writes it.
	a.publish = status.Publishers{a.metrics, a.writer}
	a.rollup = rollup.Config{HeartbeatGrace: cfg.HeartbeatGrace, DefaultInterval: cfg.ReportInterval, FreshForMultiple: cfg.FreshForMultiple,
		ManySilentShare: cfg.ManySilentShare, ManySilentMin: cfg.ManySilentMin, ManySilentWindow: cfg.ManySilentWindow}
	// The ReplicaPartitioned condition names this replica.
	a.rollup.Replica = cfg.Identity
	a.engine = rollup.NewEngine(a.state, a.rollup,
		rollup.Holds{Degraded: cfg.DampDegraded, Down: cfg.DampDown, Unknown: cfg.DampUnknown},
		rollup.DefaultMaxListed, cfg.Namespace, a.metrics, a.publish, a.clock, a.base)
	a.engine.SetRejected(func(r quorum.Rejection, detail string) {
		// Until the Node informer has synced, every node's role is
		// unknown: that is the aggregator starting, not a claim to count.
		if r.Reason == quorum.ReasonRoleUnknown && (a.nodesSynced == nil || !a.nodesSynced()) {
			return
		}
		a.claims.Reject(r, detail)
	})

	if cfg.Adapters {
		if a.adapters, err = a.newAdapters(cfg, rc); err != nil {
			return nil, err
		}
	}
	if cfg.LinstorURL != "" {
		if a.linstor, err = linstorview.New(linstorview.Config{URL: cfg.LinstorURL, SecretNamespace: cfg.LinstorSecretNamespace,
			SecretName: cfg.LinstorSecret, Interval: cfg.LinstorInterval, Metrics: a.metrics}, a.kube, a.base, a.clock); err != nil {
			return nil, fmt.Errorf("--linstor-url: %w", err)
		}
		a.engine.SetCluster(a.linstor.Facts)
	}

	a.informers = informers.NewSharedInformerFactory(a.kube, 10*time.Minute)
	nodes := a.informers.Core().V1().Nodes()
	a.nodesSynced, a.nodeLister = nodes.Informer().HasSynced, nodes.Lister()
	if err := trackNodes(nodes.Informer(), a.state, a.nodes, a.clock.Now, a.base); err != nil {
		return nil, err
	}
	if a.leaseInformers, _, err = kubeletLeases(a.kube, a.state, a.clock.Now, a.base); err != nil {
		return nil, err
	}
	if a.healths, err = trackHealths(hc, cfg.Namespace, cfg.Adapters, a.metrics, a.base); err != nil {
		return nil, err
	}
	var drainAuth *drainserver.Authorizer
	if a.drain, drainAuth, err = a.newDrain(nodes, log); err != nil {
		return nil, err
	}
	if a.budget, err = drainserver.NewBudget(a.drain, a.reg); err != nil {
		return nil, err
	}
	// A node that leaves the state loses its drain-verdict series at once,
	// as its other series do, not at the budget's next evaluation.
	*obs = append(*obs, a.budget)
	a.engine.SetBudget(budgetFacts(a.budget, budgetPeriod))

	icfg := ingest.Config{
		TokenAudience: cfg.TokenAudience, AgentServiceAccount: cfg.AgentServiceAccount,
		DesiredInterval: cfg.ReportInterval, InsecureDevKeysDir: cfg.InsecureDevKeysDir,
		TLSCertFile: cfg.TLSCert, TLSKeyFile: cfg.TLSKey,
		CheckPeerAddress: cfg.AgentPeerCheck,
	}
	if cfg.TLSMode == config.TLSModeSecret || cfg.TLSMode == config.TLSModeSelfSigned {
		a.secretInformers = servingcert.InformerFactory(a.kube, cfg.TLSNamespace, cfg.TLSSecret)
		a.certs, err = servingcert.New(servingcert.Config{
			Mode: cfg.TLSMode, Namespace: cfg.TLSNamespace, SecretName: cfg.TLSSecret, ConfigMapName: cfg.TLSCAConfigMap, OwnerConfigMap: cfg.TLSOwnerConfigMap,
			Hosts: cfg.TLSHosts(), CAValidity: cfg.TLSCAValidity, CertValidity: cfg.TLSCertValidity, CAOverlap: cfg.TLSCAOverlap,
		}, a.kube, a.secretInformers.Core().V1().Secrets(), a.reg, log, a.clock)
		if err != nil {
			return nil, err
		}
		icfg.GetCertificate = a.certs.GetCertificate
	}
	srv, err := ingest.New(icfg, ingest.Deps{
		TokenReviews: a.reviews.AuthenticationV1().TokenReviews(), Sink: state.DirectSink{S: a.state}, Registerer: a.reg, Log: log, Now: a.clock.Now,
		NodeAddresses: nodeAddresses(a.nodeLister, cfg.AgentPeerAnnotations),
	})
	if err != nil {
		return nil, fmt.Errorf("ingest: %w", err)
	}
	a.ingest = srv
	built := a // a is nil when New fails
	defer func() {
		if err != nil {
			built.ingest.Stop()
			built.closeListeners()
		}
	}()
	// ingest's options admit the calls on this port that are not agent
	// streams (the drain check, gRPC health) as streams are admitted.
	gopts, err := srv.ServerOptions()
	if err != nil {
		return nil, err
	}
	grpcMetrics := grpcprom.NewServerMetrics()
	if err := a.reg.Register(grpcMetrics); err != nil {
		return nil, fmt.Errorf("register grpc metrics: %w", err)
	}
	gopts = append(gopts,
		grpc.ChainUnaryInterceptor(grpcMetrics.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(grpcMetrics.StreamServerInterceptor()))
	a.grpc = grpc.NewServer(gopts...)
	srv.Register(a.grpc)
	a.health = health.NewServer()
	healthpb.RegisterHealthServer(a.grpc, a.health)

	// Never anonymous on the ingest port, whatever --drain-auth says.
	pb.RegisterDrainServiceServer(a.grpc, drainserver.NewGRPCServer(a.drain, drainserver.NewAuthorizerFrom(a.authz)))
	// The other replicas ask this one for the nodes they do not hear
	// (peers.go).
	if a.peerSync, err = a.newPeers(srv); err != nil {
		return nil, err
	}
	grpcMetrics.InitializeMetrics(a.grpc)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !a.ready.Load() {
			msg := "warming up: ingesting reports before publishing"
			if p := a.warming.Load(); p != nil {
				msg = *p
			}
			http.Error(w, msg, http.StatusServiceUnavailable)
			return
		}
		if !a.servingCertLoaded() {
			http.Error(w, "no serving certificate yet from Secret "+cfg.TLSNamespace+"/"+cfg.TLSSecret, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	drainserver.NewHandler(a.drain, drainAuth).Mount(mux)
	drainserver.NewBudgetHandler(a.budget, drainAuth).Mount(mux)
	httpLog := logging.Component(a.base, "http")
	a.httpSrv = newHTTPServer(mux, cfg.HTTPLimits, httpLog)
	metMux := http.NewServeMux()
	metMux.Handle("GET /metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{Registry: a.reg}))
	if cfg.Pprof {
		metMux.HandleFunc("GET /debug/pprof/", pprof.Index)
		metMux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		metMux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		metMux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	var metHandler http.Handler = metMux
	if cfg.MetricsAuth == config.MetricsAuthDelegated {
		if metHandler, err = a.metricsAuth(metMux); err != nil {
			return nil, err
		}
	}
	a.metSrv = newHTTPServer(metHandler, cfg.HTTPLimits, httpLog)
	connMetrics, err := newHTTPConnMetrics(a.reg)
	if err != nil {
		return nil, err
	}

	if a.grpcLis, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("listen --listen %s: %w", cfg.Listen, err)
	}
	// Connections per peer bounded, and ingest able to end a stream it
	// replaces or revokes.
	a.grpcLis = srv.Listener(a.grpcLis)
	if a.httpLis, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		return nil, fmt.Errorf("listen --http-addr %s: %w", cfg.HTTPAddr, err)
	}
	if a.metLis, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
		return nil, fmt.Errorf("listen --metrics-addr %s: %w", cfg.MetricsAddr, err)
	}
	// Every pod reaches these ports: connections bounded per address and
	// in all (see newHTTPServer for the timeouts).
	a.httpLis = limitListener(a.httpLis, "http", cfg.HTTPLimits, connMetrics, httpLog)
	a.metLis = limitListener(a.metLis, "metrics", cfg.HTTPLimits, connMetrics, httpLog)
	if cfg.MetricsTLS {
		// The scraper's bearer token never crosses the network in clear;
		// the TLS handshake is bounded by the server's read timeouts.
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if a.certs != nil {
			tc.GetCertificate = tlsutil.RefuseExpired(a.certs.GetCertificate, time.Now)
		} else if tc, err = tlsutil.ServerConfig(cfg.TLSCert, cfg.TLSKey); err != nil {
			return nil, fmt.Errorf("--metrics-tls: %w", err)
		}
		a.metLis = tls.NewListener(a.metLis, tc)
	}
	if a.guard, err = a.newGuard(rc, nodes); err != nil {
		return nil, err
	}
	return a, nil
}

// reviewConfig is rc for the review client: its own rate limiter (50/s,
// burst 100, above ingest's TokenReview budget) and its own connections
// (a Dial of its own keeps client-go from sharing the trusted client's
// cached transport).
func reviewConfig(rc *rest.Config) *rest.Config { return ownClient(rc, 50, 100, "reviews") }

// ownClient is rc with a rate limiter (qps, burst) and connections of its
// own: a Dial of its own keeps client-go from sharing another client's
// cached transport.
func ownClient(rc *rest.Config, qps float32, burst int, name string) *rest.Config {
	c := rest.CopyConfig(rc)
	c.QPS, c.Burst = qps, burst
	c.RateLimiter = nil
	c.UserAgent = "cozy-health-aggregator/" + name
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	c.Dial = d.DialContext
	return c
}

// metricsAuth wraps the metrics mux with delegated authn/authz (get on the
// request's nonResourceURL): every refusal is counted in
// cozy_health_metrics_rejected_total{reason} and logged, sampled.
func (a *App) metricsAuth(next http.Handler) (http.Handler, error) {
	rejected := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cozy_health_metrics_rejected_total",
		Help: "Requests to the metrics listener refused by delegated authentication, by reason (unauthenticated, forbidden, throttled, unavailable).",
	}, []string{"reason"})
	for _, r := range []string{delegated.ReasonUnauthenticated, delegated.ReasonForbidden, delegated.ReasonThrottled, delegated.ReasonUnavailable} {
		rejected.WithLabelValues(r)
	}
	if err := a.reg.Register(rejected); err != nil {
		return nil, fmt.Errorf("register metrics auth metrics: %w", err)
	}
	log := logging.Component(a.base, "metrics-auth").WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(c, time.Second, 5, 100)
	}))
	return a.authz.Handler(next, func(reason string, err error) {
		rejected.WithLabelValues(reason).Inc()
		log.Warn("metrics request refused", zap.String("reason", reason), zap.Error(err))
	}), nil
}

func (a *App) closeListeners() {
	for _, l := range []net.Listener{a.grpcLis, a.httpLis, a.metLis} {
		if l != nil {
			_ = l.Close()
		}
	}
}

// GRPCAddr is the bound ingest address (--listen).
func (a *App) GRPCAddr() string { return a.grpcLis.Addr().String() }

// HTTPAddr is the bound probe/drain address (--http-addr).
func (a *App) HTTPAddr() string { return a.httpLis.Addr().String() }

// MetricsAddr is the bound metrics address (--metrics-addr).
func (a *App) MetricsAddr() string { return a.metLis.Addr().String() }

// servingCertLoaded reports whether there is a certificate to serve.
func (a *App) servingCertLoaded() bool {
	if a.certs == nil {
		return true
	}
	select {
	case <-a.certs.Ready():
		return true
	default:
		return false
	}
}

// ServingCertReady is closed once the replica has a certificate to serve
// (at once with --tls-mode=files).
func (a *App) ServingCertReady() <-chan struct{} {
	if a.certs == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return a.certs.Ready()
}

// State is the replica's state (the ingest sink).
func (a *App) State() *state.State { return a.state }

// Engine is the replica's rollup engine.
func (a *App) Engine() *rollup.Engine { return a.engine }

// Run serves until ctx is cancelled, then shuts down: the writer stops, a
// held Lease is released, the servers drain. Everything the aggregator runs
// is a goroutine of this errgroup: the first to fail stops the others.
func (a *App) Run(ctx context.Context) error {
	start := a.clock.Now()
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		// The shared informers (see App.informers): started here, stopped
		// and waited for when ctx ends.
		a.informers.Start(ctx.Done())
		a.leaseInformers.Start(ctx.Done())
		if a.secretInformers != nil {
			a.secretInformers.Start(ctx.Done())
		}
		healths := make(chan struct{})
		go func() { a.healths.Run(ctx.Done()); close(healths) }()
		<-ctx.Done()
		<-healths
		a.informers.Shutdown()
		a.leaseInformers.Shutdown()
		if a.secretInformers != nil {
			a.secretInformers.Shutdown()
		}
		return nil
	})
	g.Go(func() error { a.drain.Run(ctx); return nil })
	g.Go(func() error { a.runPeers(ctx); return nil })
	g.Go(func() error { a.runMaintenance(ctx); return nil })
	if a.adapters != nil {
		g.Go(func() error {
			a.seedAdapterTransitions(ctx)
			return a.adapters.Run(ctx)
		})
	}
	if a.linstor != nil {
		g.Go(func() error { return a.linstor.Run(ctx) })
	}
	g.Go(func() error { return serveHTTP(a.httpSrv, a.httpLis) })
	g.Go(func() error { return serveHTTP(a.metSrv, a.metLis) })
	if a.guard != nil {
		g.Go(func() error { return a.guard.run(ctx) })
	}
	g.Go(func() error { a.budget.Run(ctx, budgetPeriod); return nil })
	g.Go(func() error {
		if err := a.grpc.Serve(a.grpcLis); err != nil {
			return fmt.Errorf("serve grpc: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		a.seedTransitions(ctx)
		a.engine.Run(ctx, a.cfg.RollupPeriod)
		return nil
	})
	if a.certs != nil {
		g.Go(func() error { return a.certs.Run(ctx) })
	}
	g.Go(func() error {
		if !a.warmUp(ctx, start) {
			return nil
		}
		a.ready.Store(true)
		if a.cfg.TrimStartupPages {
			if res, err := memtrim.Executable(); err != nil {
				a.log.Warn("trim start-up pages", zap.Error(err))
			} else {
				a.log.Debug("trimmed start-up pages", zap.Int("mappings", res.Mappings), zap.Uint64("bytes", res.Bytes))
			}
		}
		return leader.Run(ctx, leader.Config{
			Namespace: a.cfg.LeaseNamespace, Name: a.cfg.LeaseName, Identity: a.cfg.Identity,
			LeaseDuration: a.cfg.LeaseDuration, RenewDeadline: a.cfg.RenewDeadline, RetryPeriod: a.cfg.RetryPeriod,
		}, a.lease, leader.Callbacks{
			OnStartedLeading: func(ctx context.Context) {
				a.metrics.SetLeader(true)
				a.writer.Run(ctx)
			},
			OnStoppedLeading: func() { a.metrics.SetLeader(false) },
		}, a.base)
	})
	g.Go(func() error {
		<-ctx.Done()
		a.health.Shutdown()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.httpSrv.Shutdown(sctx)
		_ = a.metSrv.Shutdown(sctx)
		stopped := make(chan struct{})
		go func() { a.grpc.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-sctx.Done():
			a.grpc.Stop()
		}
		a.ingest.Stop()
		return nil
	})
	a.log.Info("aggregator running", zap.String("grpc", a.GRPCAddr()), zap.String("http", a.HTTPAddr()), zap.String("metrics", a.MetricsAddr()),
		zap.String("identity", a.cfg.Identity), zap.String("drain_check", drainserver.Path), zap.String("drain_auth", a.cfg.DrainAuth))
	return g.Wait()
}

// seedTransitions reads the Health objects an earlier leader wrote and
// seeds the rollup with their conditions' lastTransitionTime, valid through
// the warm-up and two heartbeat graces (while this replica's own view
// fills). Without the apiserver within a few seconds it goes on unseeded:
// transitions then date from this replica's start.
func (a *App) seedTransitions(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	list, err := a.hc.HealthV1alpha1().Healths(a.cfg.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		a.log.Warn("read Health objects to keep their lastTransitionTime; transitions date from this start", zap.Error(err))
		return
	}
	until := a.clock.Now().Add(max(a.cfg.WarmUp, a.cfg.WarmUpMax) + 2*a.rollup.Grace(0))
	a.engine.Seed(list.Items, until)
	a.log.Info("seeded condition transitions from the Health objects", zap.Int("objects", len(list.Items)), zap.Time("until", until))
}

func serveHTTP(s *http.Server, l net.Listener) error {
	if err := s.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve http: %w", err)
	}
	return nil
}
