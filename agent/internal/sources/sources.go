// Package sources opens, once per agent, the node-local sources that
// several checks share, each configured by its own flags: the Talos API
// (sources/machineapi: --talosconfig, --talos-endpoints, --talos-node), this
// node's role from its Node object (sources/noderole: --kube-api-*), one
// shared scrape of etcd's metrics (sources/etcdmetrics: --etcd-metrics-url),
// and the host's /proc (--proc-root). The LINSTOR controller's view is
// cluster-level: the aggregator reads it (aggregator/internal/linstorview).
// A check is built from the Set (checks.Plugin.Build) and
// takes what it reads; a source left unconfigured is nil in the Set, and
// the checks that need it are not applicable.
//
// Sources that only one check reads (a socket, a URL) are that check's own
// flags, in its package.
package sources

import (
	"errors"
	"flag"
	"fmt"

	"go.uber.org/zap"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/agent/internal/sources/etcdmetrics"
	"github.com/cozystack/cozy-health/agent/internal/sources/machineapi"
	"github.com/cozystack/cozy-health/agent/internal/sources/noderole"
)

// Config is the shared sources' flags.
type Config struct {
	Talos machineapi.Flags
	// EtcdMetricsURL is etcd's plain-HTTP metrics URL (--etcd-metrics-url).
	EtcdMetricsURL string
	// ProcRoot is the host's /proc (--proc-root).
	ProcRoot string
	// KubeAPIServer is the API server the agent reads its own Node object
	// from (its control-plane role label) when the Talos API cannot be
	// asked; "" is the in-cluster address from $KUBERNETES_SERVICE_HOST
	// and $KUBERNETES_SERVICE_PORT (--kube-api-server).
	KubeAPIServer string
	// KubeAPITokenFile is the ServiceAccount token for that read; empty
	// disables it (--kube-api-token-file).
	KubeAPITokenFile string
	// KubeAPICAFile verifies the API server (--kube-api-ca-file).
	KubeAPICAFile string
}

// RegisterFlags binds the shared sources' flags, with their defaults, to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Talos.RegisterFlags(fs)
	fs.StringVar(&c.EtcdMetricsURL, "etcd-metrics-url", "http://127.0.0.1:2381/metrics", "etcd metrics URL (listen-metrics-urls); empty disables")
	fs.StringVar(&c.ProcRoot, "proc-root", "/proc", "host /proc mount; empty disables diskstats")
	fs.StringVar(&c.KubeAPIServer, "kube-api-server", "", "API server URL the agent reads its own Node's control-plane role label from when the Talos API cannot be asked; empty: in-cluster ($KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT)")
	// The chart mounts a token of the agent's ServiceAccount (get nodes)
	// where the kubelet mounts the default one.
	fs.StringVar(&c.KubeAPITokenFile, "kube-api-token-file", "/var/run/secrets/kubernetes.io/serviceaccount/token", "ServiceAccount token file for reading the agent's own Node (get nodes); empty disables: without Talos access every node's etcd reads Unknown")
	fs.StringVar(&c.KubeAPICAFile, "kube-api-ca-file", "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt", "CA file verifying the API server")
}

// Validate rejects values the sources cannot be opened with.
func (c *Config) Validate() error {
	errs := []error{
		checkkit.ValidateURL("etcd-metrics-url", c.EtcdMetricsURL),
		checkkit.ValidateURL("kube-api-server", c.KubeAPIServer),
	}
	return errors.Join(errs...)
}

// Set is the opened sources, shared by the checks built from it.
type Set struct {
	// Node is the node this agent speaks for.
	Node string
	// Log is the agent's base logger (each check or source adds its own
	// component).
	Log *zap.Logger
	// Talos asks the Talos API; nil when --talosconfig is empty.
	Talos *machineapi.Client
	// Roles reads this node's control-plane role from its Node object,
	// for the etcd checks when Talos cannot be asked; nil when disabled.
	Roles *noderole.Reader
	// EtcdMetrics is one scrape of etcd's metrics per interval, shared by
	// etcd-member (the quota) and fsync-latency (the histograms); its URL
	// is "" when disabled.
	EtcdMetrics *etcdmetrics.Reader
	// ProcRoot is the host's /proc; "" when disabled.
	ProcRoot string
}

// Open opens the sources of a validated configuration for node. Nothing is
// dialled or read yet: a missing input makes the checks that need it read
// Unknown, it never stops the agent.
func Open(cfg Config, node string, log *zap.Logger) (*Set, error) {
	s := &Set{Node: node, Log: log, ProcRoot: cfg.ProcRoot,
		EtcdMetrics: etcdmetrics.New(cfg.EtcdMetricsURL, etcdmetrics.DefaultShareFor)}
	var err error
	if s.Talos, err = cfg.Talos.Open(log); err != nil {
		return nil, err
	}
	if cfg.KubeAPITokenFile != "" {
		server := cfg.KubeAPIServer
		if server == "" {
			server = noderole.ServerFromEnv()
		}
		if server != "" {
			if s.Roles, err = noderole.New(noderole.Config{Server: server, TokenFile: cfg.KubeAPITokenFile, CAFile: cfg.KubeAPICAFile, NodeName: node}); err != nil {
				_ = s.Close()
				return nil, fmt.Errorf("open the Node role reader: %w", err)
			}
		}
	}
	return s, nil
}

// Close releases what the sources hold open.
func (s *Set) Close() error {
	if s.Talos != nil {
		return s.Talos.Close()
	}
	return nil
}
