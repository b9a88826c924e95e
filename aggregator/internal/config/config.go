// Package config turns the aggregator's command line and optional YAML file
// into a validated Config, the way every cozy-health binary does (pkg/cli):
// flags, then the --config file whose keys are the flag names (the command
// line wins), then Validate.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/cozystack/cozy-health/aggregator/internal/adapterkit"
	"github.com/cozystack/cozy-health/aggregator/internal/rollup"
	"github.com/cozystack/cozy-health/pkg/cli"
	"github.com/cozystack/cozy-health/pkg/logging"
)

// Config is everything the aggregator is configured with.
type Config struct {
	// ConfigFile is the optional YAML file (--config).
	ConfigFile string

	// Kubeconfig is the kubeconfig path; empty means in-cluster (--kubeconfig).
	Kubeconfig string
	// Namespace is the platform namespace Health objects live in (--namespace).
	Namespace string
	// LeaseNamespace is the namespace of the leader-election Lease (--lease-namespace).
	LeaseNamespace string
	// LeaseName is the name of the leader-election Lease (--lease-name).
	LeaseName string
	// LeaseDuration is how long a Lease is valid (--lease-duration).
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader retries renewing (--renew-deadline).
	RenewDeadline time.Duration
	// RetryPeriod is the wait between election attempts (--retry-period).
	RetryPeriod time.Duration
	// Identity is this replica's leader-election identity (--identity).
	Identity string

	// HeartbeatGrace is how long a node may stay silent before its entries
	// read Unknown/HeartbeatMissed; 0 means 3x the node's reported interval.
	HeartbeatGrace time.Duration
	// MaintenanceWindow is how long a node in planned maintenance (cordoned)
	// holds its node-level alerts (cozy_health_node_maintenance 1); past
	// it they page (--maintenance-window).
	MaintenanceWindow time.Duration
	// ManySilentShare, ManySilentMin and ManySilentWindow: silent nodes are
	// one event (ManyNodesSilent) when at least this share of all nodes,
	// and this many, fell silent within the window (0: one heartbeat
	// grace) (--many-silent-share, --many-silent-min, --many-silent-window).
	ManySilentShare  float64
	ManySilentMin    int
	ManySilentWindow time.Duration
	// ReportInterval is the interval asked of agents in every ack and the
	// unit of FreshForMultiple (--report-interval).
	ReportInterval time.Duration
	// WarmUp is how long a replica ingests before it campaigns for the
	// Lease, so a fresh leader never publishes a half-filled state.
	WarmUp time.Duration
	// WarmUpMax is how long, from its start, a replica waits for every
	// expected node (a Node matching --node-selector whose kubelet reports
	// Ready) to report to it before it campaigns anyway; agents find a new
	// replica when they next resolve the Service (within seconds after its
	// replicas changed, else every 30 s). 0: campaign after WarmUp without
	// waiting.
	WarmUpMax time.Duration

	// MetricsAddr serves /metrics (--metrics-addr).
	MetricsAddr string
	// HTTPAddr serves /healthz, /readyz and the drain-check API (--http-addr).
	HTTPAddr string
	// MetricsTLS serves /metrics over TLS with the serving certificate
	// (--metrics-tls): a scraper's bearer token never crosses the pod
	// network in clear. The probes (HTTPAddr) stay plain HTTP.
	MetricsTLS bool
	// HTTPLimits bound both HTTP servers (--http-*): every port is
	// reachable from every pod, and each connection an unauthenticated
	// client keeps open costs memory (about 18 KiB idle).
	HTTPLimits HTTPLimits

	// Listen is the gRPC ingest address (--listen).
	Listen string
	// TLSMode is where the serving certificate comes from (--tls-mode):
	// "files" (--tls-cert/--tls-key, re-read when they change; the lab),
	// "secret" (the Secret --tls-secret that cert-manager writes, watched),
	// "self-signed" (the aggregator keeps that Secret itself: its own CA,
	// rotated with an overlap). Empty: "files" when --tls-cert is given,
	// otherwise "self-signed".
	TLSMode string
	// TLSCert is the serving certificate (PEM file, --tls-cert).
	TLSCert string
	// TLSKey is the serving key (PEM file, --tls-key).
	TLSKey string
	// TLSNamespace holds the serving Secret and the CA ConfigMap
	// (--tls-namespace, default $POD_NAMESPACE: the release namespace).
	TLSNamespace string
	// TLSSecret is the serving Secret (--tls-secret).
	TLSSecret string
	// TLSCAConfigMap is the ConfigMap the agents' CA bundle is published in
	// (--tls-ca-configmap); empty publishes nothing (secret mode only).
	TLSCAConfigMap string
	// TLSOwnerConfigMap names a ConfigMap in the TLS namespace (the chart's
	// aggregator configuration) made the owner of the Secret and the CA
	// ConfigMap the aggregator creates (--tls-owner-configmap), so deleting
	// it (helm uninstall) garbage-collects them; empty: no owner.
	TLSOwnerConfigMap string
	// TLSServices are the Services whose DNS names the self-signed serving
	// certificate carries (--tls-service, comma list).
	TLSServices []string
	// TLSClusterDomain completes <svc>.<ns>.svc.<domain> (--tls-cluster-domain).
	TLSClusterDomain string
	// TLSExtraSANs are more DNS names or IP addresses for the self-signed
	// serving certificate (--tls-extra-san, comma list).
	TLSExtraSANs []string
	// TLSCAValidity, TLSCertValidity and TLSCAOverlap rule the self-signed
	// CA and serving certificate: each is renewed in its last third; a new
	// CA is published beside the old one for TLSCAOverlap before it signs.
	TLSCAValidity, TLSCertValidity, TLSCAOverlap time.Duration
	// TokenAudience is the audience agent tokens must carry.
	TokenAudience string
	// AgentServiceAccount is namespace/name of the agents' ServiceAccount.
	AgentServiceAccount string
	// InsecureDevKeysDir accepts listed keys without a token. Never in production.
	InsecureDevKeysDir string
	// AgentPeerCheck refuses an agent's Hello when its connection's peer
	// address is not one of its Node's addresses (--agent-peer-check): a
	// copied token then works only from the node it was issued for. The
	// Node's addresses are its InternalIP addresses and the values of
	// AgentPeerAnnotations on it; a Node without any (not yet known to the
	// informer, or registering) is not checked.
	AgentPeerCheck bool
	// AgentPeerAnnotations are Node annotations holding more addresses a
	// host-network agent's connection may come from (--agent-peer-annotations,
	// comma list; each value may itself be a comma list): kube-ovn sends
	// host-to-pod traffic from ovn0's join-subnet address
	// (ovn.kubernetes.io/ip_address), Cilium from cilium_host's.
	AgentPeerAnnotations []string

	// Peers are the other replicas (--peers, comma list of host:port; a
	// name resolves to every replica, as the headless Service's does;
	// this replica's own address may be listed, it is skipped): a node
	// this replica does not hear is asked of them (package peers). Empty:
	// no peer sync; PeerService is served all the same.
	Peers []string
	// PeerTokenFile is this replica's projected ServiceAccount token for
	// the agents' audience, sent to peers (--peer-token-file).
	PeerTokenFile string
	// PeerServiceAccount is namespace/name of the aggregator's own
	// ServiceAccount: the only caller PeerService answers
	// (--peer-service-account).
	PeerServiceAccount string
	// PeerCAFile verifies peers' serving certificates with --tls-mode
	// files (--peer-ca-file); the other modes verify with the CA of the
	// serving Secret.
	PeerCAFile string

	// FreshForMultiple: freshUntil = observedAt + FreshForMultiple x ReportInterval.
	FreshForMultiple int
	// RefreshPeriod is how often an unchanged object is rewritten so that its
	// freshUntil never lapses while the leader is alive.
	RefreshPeriod time.Duration
	// RollupPeriod is how often the state is rolled up (and heartbeats judged).
	RollupPeriod time.Duration
	// WritesPerSecond is the token-bucket rate of apiserver writes.
	WritesPerSecond float64
	// WriteBurst is the token-bucket burst of apiserver writes.
	WriteBurst int
	// DampDegraded is how long a worsening to Degraded must persist before it
	// is published (see rollup.Step).
	DampDegraded time.Duration
	// DampDown is the same for Down.
	DampDown time.Duration
	// DampUnknown is the same for Unknown.
	DampUnknown time.Duration

	// NodeSelector is a label selector of the Kubernetes Nodes an agent runs
	// on (--node-selector, as the agent DaemonSet's nodeSelector): each is
	// expected to report, and reads Unknown until it does. Empty: every
	// Node.
	NodeSelector string

	// DrainAuth is the drain check's authentication (--drain-auth): "none"
	// serves it like /healthz, to be reached through the Kubernetes API
	// service proxy (which authorizes services/proxy); "delegated" checks
	// every caller's bearer token with a TokenReview and a
	// SubjectAccessReview (get on nonResourceURL /v1/drain-check).
	DrainAuth string
	// MetricsAuth is /metrics' authentication (--metrics-auth): "none"
	// serves it to anyone who reaches the port; "delegated" only to
	// callers whose bearer token passes a TokenReview and whose user may
	// get nonResourceURL /metrics (a SubjectAccessReview), as Prometheus'
	// and VictoriaMetrics' scrapers are allowed by their ClusterRoles.
	// cozy_health_issue names tenants' namespaces and resources. The chart
	// sets delegated.
	MetricsAuth string

	// Runtime is --pprof (on the metrics address), --gomaxprocs and
	// --trim-startup-pages (after the warm-up; pkg/memtrim.Executable),
	// shared with the agent.
	cli.Runtime

	// LogLevel is the zap level (debug, info, warn, error).
	LogLevel string

	// GuardAddr is the drain guard's TLS listener (--guard-addr): the
	// validating webhook on pods/eviction (aggregator/internal/guard).
	// Empty: no guard.
	GuardAddr string
	// GuardUnknownFor: an unknown verdict refuses a cordoned node's
	// evictions this long after the replica saw the cordon
	// (--guard-unknown-for); then they are allowed with a warning.
	GuardUnknownFor time.Duration
	// GuardExemptNamespaces: evictions of pods here are always allowed
	// (--guard-exempt-namespaces; cozy-health's own namespace).
	GuardExemptNamespaces []string
	// GuardWebhook is the ValidatingWebhookConfiguration whose caBundle
	// every replica keeps equal to the CA bundle it publishes
	// (--guard-webhook-configuration; empty: not kept).
	GuardWebhook string

	// Adapters runs the cluster adapters (--adapters): HelmReleases,
	// backups, Kamaji control planes, WorkloadMonitors.
	Adapters bool
	// BackupMaxAge is the backup SLA per namespace (--backup-max-age,
	// "tenant-foo=26h,*=48h"; "*" is every other namespace). Written as
	// spec.sla.maxAge of the namespace's backups object; without one the
	// maxAge is derived from each backup's schedule.
	BackupMaxAge string
	// AdapterFreshFor is spec.sla.freshFor of the adapters' objects
	// (--adapter-fresh-for).
	AdapterFreshFor time.Duration
	// AdapterRefreshPeriod: an unchanged adapter object is rewritten this
	// often (--adapter-refresh-period).
	AdapterRefreshPeriod time.Duration
	// AdapterPeriod: every adapter is judged again this often, besides on
	// every change (--adapter-period).
	AdapterPeriod time.Duration
	// AdapterSyncTimeout: an adapter whose informer has not synced this
	// long after it started reads Unknown (--adapter-sync-timeout).
	AdapterSyncTimeout time.Duration
	// AdapterWritesPerSecond is the token-bucket rate of the adapters'
	// writes, beside the node components' (--adapter-writes-per-second).
	AdapterWritesPerSecond float64

	// LinstorURL is the LINSTOR controller's REST URL (--linstor-url);
	// empty: the controller's view is not read (the agents' drbdsetup, if
	// any, is the only DRBD source).
	LinstorURL string
	// LinstorSecretNamespace and LinstorSecret name the client certificate
	// Secret, read where it lives (--linstor-secret-namespace,
	// --linstor-secret; empty: no client certificate).
	LinstorSecretNamespace, LinstorSecret string
	// LinstorInterval: the controller's view is read this often
	// (--linstor-interval); it is Unknown past 3 intervals without a read.
	LinstorInterval time.Duration
}

// HTTPLimits bound an HTTP server of the aggregator (the probe/drain one
// and the metrics one, each on its own).
type HTTPLimits struct {
	// IdleTimeout closes a keep-alive connection idle this long
	// (--http-idle-timeout); above the scrape interval, so a scraper keeps
	// its connection (and its TLS session) between scrapes.
	IdleTimeout time.Duration
	// ReadHeaderTimeout and ReadTimeout bound the arrival of a request's
	// headers and of the whole request (--http-read-header-timeout,
	// --http-read-timeout); WriteTimeout the answer (--http-write-timeout).
	ReadHeaderTimeout, ReadTimeout, WriteTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers (--http-max-header-bytes);
	// a ServiceAccount token is about 1 KiB.
	MaxHeaderBytes int
	// MaxConnsPerPeer bounds the connections one IP address holds
	// (--http-max-conns-per-peer); more are closed at once, counted and
	// logged.
	MaxConnsPerPeer int
	// MaxConns bounds the connections of the server in all
	// (--http-max-conns); past it new ones wait in the kernel's accept
	// queue until one closes.
	MaxConns int
}

// Defaults of HTTPLimits.
const (
	DefaultHTTPIdleTimeout = 60 * time.Second
	// DefaultMaintenanceWindow: a Talos reboot or upgrade of one node
	// takes minutes; a quarter of an hour covers it and still pages for
	// a node that does not come back.
	DefaultMaintenanceWindow     = 15 * time.Minute
	DefaultHTTPReadHeaderTimeout = 5 * time.Second
	DefaultHTTPReadTimeout       = 10 * time.Second
	// DefaultHTTPWriteTimeout leaves room for a 30 s /debug/pprof/profile.
	DefaultHTTPWriteTimeout    = 60 * time.Second
	DefaultHTTPMaxHeaderBytes  = 16 << 10
	DefaultHTTPMaxConnsPerPeer = 32
	DefaultHTTPMaxConns        = 1024
)

// DefaultAgentPeerAnnotations are the Node annotations whose addresses an
// agent may connect from besides the InternalIPs.
var DefaultAgentPeerAnnotations = []string{"ovn.kubernetes.io/ip_address", "network.cilium.io/ipv4-cilium-host", "network.cilium.io/ipv6-cilium-host"}

// TLS modes (Config.TLSMode).
const (
	TLSModeFiles      = "files"
	TLSModeSecret     = "secret"
	TLSModeSelfSigned = "self-signed"
)

// Drain-check authentication modes (Config.DrainAuth).
const (
	DrainAuthNone      = "none"
	DrainAuthDelegated = "delegated"
)

// Metrics authentication modes (Config.MetricsAuth).
const (
	MetricsAuthNone      = "none"
	MetricsAuthDelegated = "delegated"
)

// Default returns the configuration with every default filled in. Identity
// defaults to $POD_NAME, then the host name.
func Default() Config {
	id := os.Getenv("POD_NAME")
	if id == "" {
		id, _ = os.Hostname()
	}
	return Config{
		Namespace:      "cozy-system",
		LeaseName:      "cozy-health-aggregator",
		LeaseDuration:  15 * time.Second,
		RenewDeadline:  10 * time.Second,
		RetryPeriod:    2 * time.Second,
		Identity:       id,
		ReportInterval: 5 * time.Second,
		// One P: ingest is a thread's work (10,000 nodes: a quarter of a
		// core, measured), and with a second P idle every report readied a
		// goroutine that woke a thread to spin looking for work (5,000
		// nodes: 19.3 % of a core with two Ps, 15.9 % with one, the same
		// staleness; docs/performance.md "Measured figures").
		Runtime:              cli.Runtime{MaxProcs: 1, TrimStartupPages: true},
		WarmUp:               6 * time.Second,
		WarmUpMax:            45 * time.Second,
		MetricsAddr:          ":9090",
		HTTPAddr:             ":8080",
		Listen:               ":9443",
		TLSNamespace:         os.Getenv("POD_NAMESPACE"),
		TLSSecret:            "cozy-health-aggregator-tls",
		TLSCAConfigMap:       "cozy-health-ca",
		TLSServices:          []string{"cozy-health-aggregator"},
		TLSClusterDomain:     "cluster.local",
		TLSCAValidity:        5 * 365 * 24 * time.Hour,
		TLSCertValidity:      90 * 24 * time.Hour,
		TLSCAOverlap:         24 * time.Hour,
		TokenAudience:        "health.cozystack.io",
		AgentServiceAccount:  "cozy-health/cozy-health-agent",
		AgentPeerCheck:       true,
		AgentPeerAnnotations: append([]string(nil), DefaultAgentPeerAnnotations...),
		PeerServiceAccount:   "cozy-health/cozy-health-aggregator",
		HTTPLimits: HTTPLimits{
			IdleTimeout: DefaultHTTPIdleTimeout, ReadHeaderTimeout: DefaultHTTPReadHeaderTimeout, ReadTimeout: DefaultHTTPReadTimeout,
			WriteTimeout: DefaultHTTPWriteTimeout, MaxHeaderBytes: DefaultHTTPMaxHeaderBytes,
			MaxConnsPerPeer: DefaultHTTPMaxConnsPerPeer, MaxConns: DefaultHTTPMaxConns,
		},
		FreshForMultiple:  6,
		MaintenanceWindow: DefaultMaintenanceWindow,
		ManySilentShare:   rollup.DefaultManySilentShare,
		ManySilentMin:     rollup.DefaultManySilentMin,
		RefreshPeriod:     10 * time.Second,
		RollupPeriod:      time.Second,
		WritesPerSecond:   2,
		WriteBurst:        6,
		DampDegraded:      10 * time.Second,
		DrainAuth:         DrainAuthNone,
		MetricsAuth:       MetricsAuthNone,
		LogLevel:          "info",

		Adapters:               true,
		AdapterFreshFor:        adapterkit.DefaultFreshFor,
		AdapterRefreshPeriod:   4 * time.Minute,
		AdapterPeriod:          adapterkit.DefaultPeriod,
		AdapterSyncTimeout:     adapterkit.DefaultSyncTimeout,
		AdapterWritesPerSecond: 5,
		LinstorSecretNamespace: "cozy-linstor",
		LinstorSecret:          "linstor-client-tls",
		LinstorInterval:        10 * time.Second,

		GuardUnknownFor: 5 * time.Minute,
	}
}

// RegisterFlags binds every flag to fs, writing into c; c's current values
// are the defaults (Default's, as Load binds them). The flags reference
// (docs/reference/flags.md) is generated from it.
func (c *Config) RegisterFlags(fs *flag.FlagSet) { bind(fs, c) }

// bind registers every flag on fs, writing into c.
func bind(fs *flag.FlagSet, c *Config) {
	fs.StringVar(&c.ConfigFile, cli.ConfigFlag, c.ConfigFile, "YAML file with any of these flags by name; flags given on the command line win")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", c.Kubeconfig, "kubeconfig path; empty: in-cluster config")
	fs.StringVar(&c.Namespace, "namespace", c.Namespace, "namespace of the platform Health objects")
	fs.StringVar(&c.LeaseNamespace, "lease-namespace", c.LeaseNamespace, "namespace of the leader-election Lease (default: --namespace)")
	fs.StringVar(&c.LeaseName, "lease-name", c.LeaseName, "name of the leader-election Lease")
	fs.DurationVar(&c.LeaseDuration, "lease-duration", c.LeaseDuration, "leader-election lease duration")
	fs.DurationVar(&c.RenewDeadline, "renew-deadline", c.RenewDeadline, "leader-election renew deadline")
	fs.DurationVar(&c.RetryPeriod, "retry-period", c.RetryPeriod, "leader-election retry period")
	fs.StringVar(&c.Identity, "identity", c.Identity, "leader-election identity (default: $POD_NAME, then the host name)")
	fs.DurationVar(&c.HeartbeatGrace, "heartbeat-grace", c.HeartbeatGrace, "silence after which a node's entries read Unknown (0: 3x the node's interval)")
	fs.DurationVar(&c.MaintenanceWindow, "maintenance-window", c.MaintenanceWindow, "how long a cordoned node (planned maintenance) holds its node-level alerts; past it they page")
	fs.Float64Var(&c.ManySilentShare, "many-silent-share", c.ManySilentShare, "share of all nodes that, falling silent within --many-silent-window, is one event (ManyNodesSilent) rather than that many silent nodes")
	fs.IntVar(&c.ManySilentMin, "many-silent-min", c.ManySilentMin, "fewest silent nodes that count as ManyNodesSilent")
	fs.DurationVar(&c.ManySilentWindow, "many-silent-window", c.ManySilentWindow, "nodes whose last reports lie within this window fell silent together (0: one heartbeat grace)")
	fs.DurationVar(&c.ReportInterval, "report-interval", c.ReportInterval, "report interval asked of agents; unit of --fresh-for-multiple")
	fs.DurationVar(&c.WarmUp, "warm-up", c.WarmUp, "how long to ingest before campaigning for the Lease")
	fs.DurationVar(&c.WarmUpMax, "warm-up-max", c.WarmUpMax, "how long from start to wait for every expected Ready node to report before campaigning anyway (0: do not wait for nodes)")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", c.MetricsAddr, "address serving /metrics")
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "address serving /healthz, /readyz and the drain-check API")
	fs.BoolVar(&c.MetricsTLS, "metrics-tls", c.MetricsTLS, "serve --metrics-addr over TLS with the serving certificate (scrape with https and the published CA)")
	fs.DurationVar(&c.HTTPLimits.IdleTimeout, "http-idle-timeout", c.HTTPLimits.IdleTimeout, "HTTP servers: close a keep-alive connection idle this long (keep above the scrape interval)")
	fs.DurationVar(&c.HTTPLimits.ReadHeaderTimeout, "http-read-header-timeout", c.HTTPLimits.ReadHeaderTimeout, "HTTP servers: a request's headers must arrive within this")
	fs.DurationVar(&c.HTTPLimits.ReadTimeout, "http-read-timeout", c.HTTPLimits.ReadTimeout, "HTTP servers: a whole request must arrive within this")
	fs.DurationVar(&c.HTTPLimits.WriteTimeout, "http-write-timeout", c.HTTPLimits.WriteTimeout, "HTTP servers: an answer must be written within this")
	fs.IntVar(&c.HTTPLimits.MaxHeaderBytes, "http-max-header-bytes", c.HTTPLimits.MaxHeaderBytes, "HTTP servers: largest request header block")
	fs.IntVar(&c.HTTPLimits.MaxConnsPerPeer, "http-max-conns-per-peer", c.HTTPLimits.MaxConnsPerPeer, "HTTP servers: connections one IP address may hold on each; more are closed at once (counted in cozy_health_http_connections_rejected_total)")
	fs.IntVar(&c.HTTPLimits.MaxConns, "http-max-conns", c.HTTPLimits.MaxConns, "HTTP servers: connections each holds in all; more wait in the accept queue")
	fs.StringVar(&c.Listen, "listen", c.Listen, "gRPC ingest address")
	fs.StringVar(&c.TLSMode, "tls-mode", c.TLSMode, "serving certificate source: files (--tls-cert/--tls-key), secret (the Secret --tls-secret, e.g. from cert-manager) or self-signed (the aggregator keeps that Secret with its own CA); empty: files when --tls-cert is set, else self-signed")
	fs.StringVar(&c.TLSCert, "tls-cert", c.TLSCert, "serving certificate (PEM file, --tls-mode=files)")
	fs.StringVar(&c.TLSKey, "tls-key", c.TLSKey, "serving key (PEM file, --tls-mode=files)")
	fs.StringVar(&c.TLSNamespace, "tls-namespace", c.TLSNamespace, "namespace of the serving Secret and the CA ConfigMap (default $POD_NAMESPACE)")
	fs.StringVar(&c.TLSSecret, "tls-secret", c.TLSSecret, "serving Secret (tls.crt, tls.key, ca.crt), watched in secret and self-signed modes")
	fs.StringVar(&c.TLSCAConfigMap, "tls-ca-configmap", c.TLSCAConfigMap, "ConfigMap the CA bundle agents trust is published in (key ca.crt); empty: none (secret mode only)")
	fs.StringVar(&c.TLSOwnerConfigMap, "tls-owner-configmap", c.TLSOwnerConfigMap, "ConfigMap (in the TLS namespace) that owns the Secret and the CA ConfigMap the aggregator creates, so deleting it garbage-collects them (the chart's own configuration ConfigMap); empty: no owner")
	fs.Var(&listFlag{p: &c.TLSServices}, "tls-service", "Service whose DNS names (<svc>, <svc>.<ns>, <svc>.<ns>.svc, <svc>.<ns>.svc.<cluster domain>) the self-signed serving certificate carries (comma list)")
	fs.StringVar(&c.TLSClusterDomain, "tls-cluster-domain", c.TLSClusterDomain, "cluster DNS domain for the self-signed serving certificate's names")
	fs.Var(&listFlag{p: &c.TLSExtraSANs}, "tls-extra-san", "more DNS names or IP addresses for the self-signed serving certificate (comma list)")
	fs.DurationVar(&c.TLSCAValidity, "tls-ca-validity", c.TLSCAValidity, "validity of a self-signed CA; a next CA is published in its last third")
	fs.DurationVar(&c.TLSCertValidity, "tls-cert-validity", c.TLSCertValidity, "validity of a self-signed serving certificate; renewed in its last third")
	fs.DurationVar(&c.TLSCAOverlap, "tls-ca-overlap", c.TLSCAOverlap, "how long a next CA is published beside the current one before it signs (agents re-read the bundle meanwhile)")
	fs.StringVar(&c.TokenAudience, "token-audience", c.TokenAudience, "audience agent tokens must carry")
	fs.StringVar(&c.AgentServiceAccount, "agent-service-account", c.AgentServiceAccount, "namespace/name of the agents' ServiceAccount")
	fs.BoolVar(&c.AgentPeerCheck, "agent-peer-check", c.AgentPeerCheck, "refuse an agent's hello from an address that is not one of its Node's (InternalIP, --agent-peer-annotations); loopback peers and Nodes without addresses are not checked")
	fs.Var(&listFlag{p: &c.AgentPeerAnnotations}, "agent-peer-annotations", "Node annotations holding more addresses an agent may connect from (comma list; e.g. kube-ovn's ovn0 address)")
	fs.Var(&listFlag{p: &c.Peers}, "peers", "the other replicas, host:port (comma list; a name resolving to every replica, e.g. the headless Service): nodes this replica does not hear are asked of them")
	fs.StringVar(&c.PeerTokenFile, "peer-token-file", c.PeerTokenFile, "this replica's projected ServiceAccount token (agents' audience) sent to peers; required with --peers")
	fs.StringVar(&c.PeerServiceAccount, "peer-service-account", c.PeerServiceAccount, "namespace/name of the aggregator's ServiceAccount: the only caller the peer service answers")
	fs.StringVar(&c.PeerCAFile, "peer-ca-file", c.PeerCAFile, "CA bundle verifying peers with --tls-mode files (other modes use the serving Secret's ca.crt)")
	fs.StringVar(&c.InsecureDevKeysDir, "insecure-dev-keys-dir", c.InsecureDevKeysDir, "DEVELOPMENT ONLY: accept listed agent keys without a token")
	fs.IntVar(&c.FreshForMultiple, "fresh-for-multiple", c.FreshForMultiple, "freshUntil = observedAt + this many report intervals")
	fs.DurationVar(&c.RefreshPeriod, "refresh-period", c.RefreshPeriod, "rewrite unchanged Health objects this often")
	fs.DurationVar(&c.RollupPeriod, "rollup-period", c.RollupPeriod, "how often the state is rolled up and heartbeats judged (a rollup in which nothing judged changed is only retimed)")
	fs.Float64Var(&c.WritesPerSecond, "writes-per-second", c.WritesPerSecond, "token-bucket rate of apiserver writes")
	fs.IntVar(&c.WriteBurst, "write-burst", c.WriteBurst, "token-bucket burst of apiserver writes")
	fs.DurationVar(&c.DampDegraded, "damp-degraded", c.DampDegraded, "a worsening to Degraded must persist this long before it is published")
	fs.DurationVar(&c.DampDown, "damp-down", c.DampDown, "a worsening to Down must persist this long before it is published")
	fs.DurationVar(&c.DampUnknown, "damp-unknown", c.DampUnknown, "a worsening to Unknown must persist this long before it is published")
	fs.StringVar(&c.NodeSelector, "node-selector", c.NodeSelector, "label selector of the Nodes agents run on (as the agent DaemonSet's); each is expected to report and reads Unknown until it does (empty: every Node)")
	fs.StringVar(&c.DrainAuth, "drain-auth", c.DrainAuth, "drain-check authentication: none (reach it through the Kubernetes API service proxy) or delegated (TokenReview and SubjectAccessReview of every caller)")
	fs.StringVar(&c.MetricsAuth, "metrics-auth", c.MetricsAuth, "/metrics (and /debug/pprof) authentication: none, or delegated (TokenReview and SubjectAccessReview get on nonResourceURL /metrics of every scraper)")
	c.Runtime.RegisterFlags(fs)
	logging.RegisterLevelFlag(fs, &c.LogLevel)
	fs.BoolVar(&c.Adapters, "adapters", c.Adapters, "run the cluster adapters (HelmReleases, CNPG/Cozystack/velero backups, Kamaji control planes, WorkloadMonitors)")
	fs.StringVar(&c.BackupMaxAge, "backup-max-age", c.BackupMaxAge, "backup SLA per namespace, e.g. tenant-foo=26h,*=48h (* is every other namespace); without one, 1.5x each backup's schedule interval")
	fs.DurationVar(&c.AdapterFreshFor, "adapter-fresh-for", c.AdapterFreshFor, "spec.sla.freshFor of the adapters' Health objects")
	fs.DurationVar(&c.AdapterRefreshPeriod, "adapter-refresh-period", c.AdapterRefreshPeriod, "rewrite unchanged adapter Health objects this often (at most half of --adapter-fresh-for)")
	fs.DurationVar(&c.AdapterPeriod, "adapter-period", c.AdapterPeriod, "judge every adapter again this often, besides on every change (backups age without events)")
	fs.DurationVar(&c.AdapterSyncTimeout, "adapter-sync-timeout", c.AdapterSyncTimeout, "an adapter whose informer has not synced this long after it started reads Unknown")
	fs.Float64Var(&c.AdapterWritesPerSecond, "adapter-writes-per-second", c.AdapterWritesPerSecond, "token-bucket rate of the adapters' writes (beside --writes-per-second)")
	fs.StringVar(&c.LinstorURL, "linstor-url", c.LinstorURL, "LINSTOR controller REST URL read once per --linstor-interval by every replica; empty disables the LINSTOR view")
	fs.StringVar(&c.LinstorSecretNamespace, "linstor-secret-namespace", c.LinstorSecretNamespace, "namespace of the LINSTOR client certificate Secret")
	fs.StringVar(&c.LinstorSecret, "linstor-secret", c.LinstorSecret, "Secret with ca.crt, tls.crt, tls.key of a LINSTOR API client certificate, watched where it lives; empty: no client certificate")
	fs.DurationVar(&c.LinstorInterval, "linstor-interval", c.LinstorInterval, "read the LINSTOR controller's view this often (Unknown past 3 intervals without a read)")
	fs.StringVar(&c.GuardAddr, "guard-addr", c.GuardAddr, "TLS listener of the drain guard (validating webhook on pods/eviction, path /v1/guard/eviction); empty: no guard")
	fs.DurationVar(&c.GuardUnknownFor, "guard-unknown-for", c.GuardUnknownFor, "an unknown drain verdict refuses a cordoned node's evictions this long after the cordon was seen, then allows them")
	fs.Var(&listFlag{p: &c.GuardExemptNamespaces}, "guard-exempt-namespaces", "namespaces whose pods' evictions the guard always allows (comma list; cozy-health's own)")
	fs.StringVar(&c.GuardWebhook, "guard-webhook-configuration", c.GuardWebhook, "ValidatingWebhookConfiguration whose caBundle is kept equal to the published CA bundle; empty: not kept")
}

// Load parses args (without the program name), applies the --config file if
// one is named, lets the command line override it, and validates the result.
// cli.ExitCode maps its error to the exit code.
func Load(args []string, stderr io.Writer) (Config, error) {
	var cfg Config
	if err := cli.Load("cozy-health-aggregator", args, stderr, func(fs *flag.FlagSet) {
		cfg = Default()
		bind(fs, &cfg)
	}); err != nil {
		return Config{}, err
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Validate refuses values the aggregator cannot run with, naming the flag.
func (c *Config) Validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	if c.Namespace == "" {
		bad("namespace", "must not be empty")
	}
	if c.LeaseNamespace == "" {
		c.LeaseNamespace = c.Namespace
	}
	if c.LeaseName == "" {
		bad("lease-name", "must not be empty")
	}
	if c.Identity == "" {
		bad("identity", "must not be empty (set $POD_NAME or --identity)")
	}
	if c.MaxProcs < 0 {
		bad("gomaxprocs", "must not be negative, got %d", c.MaxProcs)
	}
	if c.LeaseDuration <= 0 {
		bad("lease-duration", "must be > 0, got %s", c.LeaseDuration)
	}
	if c.RenewDeadline <= 0 || c.RenewDeadline >= c.LeaseDuration {
		bad("renew-deadline", "must be > 0 and < --lease-duration (%s), got %s", c.LeaseDuration, c.RenewDeadline)
	}
	if c.RetryPeriod <= 0 || c.RetryPeriod >= c.RenewDeadline {
		bad("retry-period", "must be > 0 and < --renew-deadline (%s), got %s", c.RenewDeadline, c.RetryPeriod)
	}
	if c.MaintenanceWindow <= 0 {
		bad("maintenance-window", "must be > 0, got %s", c.MaintenanceWindow)
	}
	if c.ManySilentShare <= 0 || c.ManySilentShare > 1 {
		bad("many-silent-share", "must be in (0, 1], got %g", c.ManySilentShare)
	}
	if c.ManySilentMin < 2 {
		bad("many-silent-min", "must be >= 2, got %d", c.ManySilentMin)
	}
	if c.ManySilentWindow < 0 {
		bad("many-silent-window", "must be >= 0 (0: one heartbeat grace), got %s", c.ManySilentWindow)
	}
	if c.HeartbeatGrace < 0 {
		bad("heartbeat-grace", "must be >= 0 (0: 3x the node's interval), got %s", c.HeartbeatGrace)
	}
	if c.ReportInterval < time.Second {
		bad("report-interval", "must be >= 1s, got %s", c.ReportInterval)
	}
	if c.WarmUp < 0 {
		bad("warm-up", "must be >= 0, got %s", c.WarmUp)
	}
	if c.WarmUpMax < 0 {
		bad("warm-up-max", "must be >= 0 (0: do not wait for nodes), got %s", c.WarmUpMax)
	}
	if c.Listen == "" {
		bad("listen", "must not be empty")
	}
	if c.TLSMode == "" {
		c.TLSMode = TLSModeSelfSigned
		if c.TLSCert != "" || c.TLSKey != "" {
			c.TLSMode = TLSModeFiles
		}
	}
	switch c.TLSMode {
	case TLSModeFiles:
		if c.TLSCert == "" {
			bad("tls-cert", "is required with --tls-mode=files: ingest is served over TLS only")
		}
		if c.TLSKey == "" {
			bad("tls-key", "is required with --tls-mode=files: ingest is served over TLS only")
		}
	case TLSModeSecret, TLSModeSelfSigned:
		if c.TLSCert != "" || c.TLSKey != "" {
			bad("tls-cert", "and --tls-key are for --tls-mode=files, not %s", c.TLSMode)
		}
		if c.TLSNamespace == "" {
			bad("tls-namespace", "is required with --tls-mode=%s (set $POD_NAMESPACE, or --tls-cert and --tls-key to serve files)", c.TLSMode)
		}
		if c.TLSSecret == "" {
			bad("tls-secret", "must not be empty with --tls-mode=%s", c.TLSMode)
		}
	default:
		bad("tls-mode", "want %s, %s or %s, got %q", TLSModeFiles, TLSModeSecret, TLSModeSelfSigned, c.TLSMode)
	}
	if c.TLSMode == TLSModeSelfSigned {
		if c.TLSCAConfigMap == "" {
			bad("tls-ca-configmap", "must not be empty with --tls-mode=self-signed: agents read the CA from it")
		}
		if len(c.TLSServices) == 0 && len(c.TLSExtraSANs) == 0 {
			bad("tls-service", "or --tls-extra-san must name the serving certificate's hosts")
		}
		if c.TLSCertValidity <= 0 {
			bad("tls-cert-validity", "must be > 0, got %s", c.TLSCertValidity)
		}
		if c.TLSCAValidity <= 0 {
			bad("tls-ca-validity", "must be > 0, got %s", c.TLSCAValidity)
		}
		if c.TLSCAOverlap < 0 || c.TLSCAOverlap >= c.TLSCAValidity/3 {
			bad("tls-ca-overlap", "must be >= 0 and < a third of --tls-ca-validity (%s), so the next CA signs before the current one expires; got %s", c.TLSCAValidity/3, c.TLSCAOverlap)
		}
	}
	if c.TokenAudience == "" {
		bad("token-audience", "must not be empty")
	}
	if ns, name, ok := strings.Cut(c.PeerServiceAccount, "/"); !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		bad("peer-service-account", "want namespace/name, got %q", c.PeerServiceAccount)
	}
	for _, p := range c.Peers {
		if host, port, err := net.SplitHostPort(p); err != nil || host == "" || port == "" {
			bad("peers", "want host:port, got %q", p)
		}
	}
	if len(c.Peers) > 0 && c.PeerTokenFile == "" {
		bad("peer-token-file", "is required with --peers (the token peers authenticate this replica by)")
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"http-idle-timeout", c.HTTPLimits.IdleTimeout}, {"http-read-header-timeout", c.HTTPLimits.ReadHeaderTimeout},
		{"http-read-timeout", c.HTTPLimits.ReadTimeout}, {"http-write-timeout", c.HTTPLimits.WriteTimeout}} {
		if d.v <= 0 {
			bad(d.flag, "must be > 0 (no bound lets an idle or slow client hold a connection forever), got %s", d.v)
		}
	}
	for _, n := range []struct {
		flag string
		v    int
	}{{"http-max-header-bytes", c.HTTPLimits.MaxHeaderBytes}, {"http-max-conns-per-peer", c.HTTPLimits.MaxConnsPerPeer}, {"http-max-conns", c.HTTPLimits.MaxConns}} {
		if n.v <= 0 {
			bad(n.flag, "must be > 0, got %d", n.v)
		}
	}
	if ns, name, ok := strings.Cut(c.AgentServiceAccount, "/"); !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		bad("agent-service-account", "want namespace/name, got %q", c.AgentServiceAccount)
	}
	if c.FreshForMultiple < 2 {
		bad("fresh-for-multiple", "must be >= 2, got %d", c.FreshForMultiple)
	}
	if c.RollupPeriod <= 0 || c.RollupPeriod > c.ReportInterval {
		bad("rollup-period", "must be > 0 and <= --report-interval (%s), got %s", c.ReportInterval, c.RollupPeriod)
	}
	if c.FreshForMultiple >= 2 && c.ReportInterval > 0 {
		freshFor := time.Duration(c.FreshForMultiple) * c.ReportInterval
		if c.RefreshPeriod <= 0 || c.RefreshPeriod > freshFor/2 {
			bad("refresh-period", "must be > 0 and <= half of --fresh-for-multiple x --report-interval (%s), got %s", freshFor/2, c.RefreshPeriod)
		}
	}
	if c.WritesPerSecond <= 0 {
		bad("writes-per-second", "must be > 0, got %g", c.WritesPerSecond)
	}
	if c.WriteBurst < 1 {
		bad("write-burst", "must be >= 1, got %d", c.WriteBurst)
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"damp-degraded", c.DampDegraded}, {"damp-down", c.DampDown}, {"damp-unknown", c.DampUnknown}} {
		if d.v < 0 {
			bad(d.flag, "must be >= 0, got %s", d.v)
		}
	}
	if _, err := c.Nodes(); err != nil {
		bad("node-selector", "%v", err)
	}
	switch c.DrainAuth {
	case DrainAuthNone, DrainAuthDelegated:
	default:
		bad("drain-auth", "want %s or %s, got %q", DrainAuthNone, DrainAuthDelegated, c.DrainAuth)
	}
	switch c.MetricsAuth {
	case MetricsAuthNone, MetricsAuthDelegated:
	default:
		bad("metrics-auth", "want %s or %s, got %q", MetricsAuthNone, MetricsAuthDelegated, c.MetricsAuth)
	}
	if _, err := ParseMaxAges(c.BackupMaxAge); err != nil {
		bad("backup-max-age", "%v", err)
	}
	if c.AdapterFreshFor < time.Second {
		bad("adapter-fresh-for", "must be >= 1s, got %s", c.AdapterFreshFor)
	}
	if c.AdapterRefreshPeriod <= 0 || c.AdapterRefreshPeriod > c.AdapterFreshFor/2 {
		bad("adapter-refresh-period", "must be > 0 and <= half of --adapter-fresh-for (%s), got %s", c.AdapterFreshFor/2, c.AdapterRefreshPeriod)
	}
	if c.AdapterPeriod <= 0 || c.AdapterPeriod > c.AdapterRefreshPeriod {
		bad("adapter-period", "must be > 0 and <= --adapter-refresh-period (%s), got %s", c.AdapterRefreshPeriod, c.AdapterPeriod)
	}
	if c.AdapterSyncTimeout <= 0 {
		bad("adapter-sync-timeout", "must be > 0, got %s", c.AdapterSyncTimeout)
	}
	if c.LinstorURL != "" {
		if u, err := url.Parse(c.LinstorURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("linstor-url", "want an http:// or https:// URL with a host, got %q", c.LinstorURL)
		}
		if c.LinstorSecret != "" && c.LinstorSecretNamespace == "" {
			bad("linstor-secret-namespace", "must be set with --linstor-secret")
		}
	}
	if c.LinstorInterval < time.Second {
		bad("linstor-interval", "must be >= 1s, got %s", c.LinstorInterval)
	}
	if c.AdapterWritesPerSecond <= 0 {
		bad("adapter-writes-per-second", "must be > 0, got %g", c.AdapterWritesPerSecond)
	}
	if c.GuardUnknownFor < 0 {
		bad("guard-unknown-for", "must be >= 0, got %s", c.GuardUnknownFor)
	}
	if err := logging.ValidateLevel(c.LogLevel); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// TLSHosts are the SANs of a self-signed serving certificate: each
// --tls-service's DNS names, then --tls-extra-san.
func (c *Config) TLSHosts() []string {
	var out []string
	for _, s := range c.TLSServices {
		out = append(out, s, s+"."+c.TLSNamespace, s+"."+c.TLSNamespace+".svc")
		if d := strings.Trim(c.TLSClusterDomain, "."); d != "" {
			out = append(out, s+"."+c.TLSNamespace+".svc."+d)
		}
	}
	return append(out, c.TLSExtraSANs...)
}

// listFlag is a repeatable flag that also splits comma lists; its first
// use replaces the default.
type listFlag struct {
	p   *[]string
	set bool
}

func (l *listFlag) String() string {
	if l.p == nil {
		return ""
	}
	return strings.Join(*l.p, ",")
}

func (l *listFlag) Set(v string) error {
	if !l.set {
		*l.p, l.set = nil, true
	}
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*l.p = append(*l.p, part)
		}
	}
	return nil
}

// Nodes is NodeSelector parsed.
func (c *Config) Nodes() (labels.Selector, error) {
	return labels.Parse(c.NodeSelector)
}

// FreshFor is how long a written status stays trustworthy.
func (c *Config) FreshFor() time.Duration {
	return time.Duration(c.FreshForMultiple) * c.ReportInterval
}

// ParseMaxAges parses --backup-max-age: comma-separated namespace=duration
// pairs, "*" for every other namespace.
func ParseMaxAges(s string) (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		ns, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || ns == "" {
			return nil, fmt.Errorf("want namespace=duration, got %q", part)
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%s: want a positive duration, got %q", ns, v)
		}
		if _, dup := out[ns]; dup {
			return nil, fmt.Errorf("%s given twice", ns)
		}
		out[ns] = d
	}
	return out, nil
}
