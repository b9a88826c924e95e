// Command ingest-test-server runs one real ingest server (TLS, keepalives,
// TokenReview or development keys) and prints every accepted report as a
// JSON line on stdout. The uplink's tests (agent/internal/uplink) build it
// and start several of them as aggregator replicas, and kill, stop and
// restart them; a process boundary is how the agent and the aggregator meet
// in tests, as they do in a cluster.
//
// It lives here and not beside those tests because it must import
// aggregator/internal/ingest, and Go lets only packages under aggregator/
// import it; the whole aggregator binary would need an apiserver even with
// development keys.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cozystack/cozy-health/aggregator/internal/ingest"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Accepted is one line of output.
type Accepted struct {
	Node       string `json:"node"`
	Instance   string `json:"instance"`
	Sequence   uint64 `json:"sequence"`
	ReceivedAt int64  `json:"receivedAtUnixNano"`
}

// jsonSink prints accepted reports.
type jsonSink struct {
	mu sync.Mutex // guards w
	w  *bufio.Writer
}

func (s *jsonSink) Accept(r *report.NodeReport, at time.Time) {
	b, _ := json.Marshal(Accepted{Node: r.NodeName, Instance: r.AgentInstanceID, Sequence: r.Sequence, ReceivedAt: at.UnixNano()})
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = s.w.Write(append(b, '\n'))
	_ = s.w.Flush()
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ingest-test-server:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("ingest-test-server", flag.ContinueOnError)
	cfg := ingest.DefaultConfig()
	listen := fs.String("listen", "127.0.0.1:0", "gRPC listen address")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig for TokenReviews")
	fs.StringVar(&cfg.TLSCertFile, "tls-cert", "", "serving certificate")
	fs.StringVar(&cfg.TLSKeyFile, "tls-key", "", "serving key")
	fs.StringVar(&cfg.TokenAudience, "token-audience", cfg.TokenAudience, "agent token audience")
	fs.StringVar(&cfg.AgentServiceAccount, "agent-service-account", cfg.AgentServiceAccount, "namespace/name of the agents' ServiceAccount")
	fs.StringVar(&cfg.InsecureDevKeysDir, "insecure-dev-keys-dir", "", "accept the development keys listed here without a token")
	fs.DurationVar(&cfg.DesiredInterval, "desired-interval", cfg.DesiredInterval, "interval sent in acks")
	fs.Float64Var(&cfg.RatePerNode, "rate-per-node", 50, "reports per second per node")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	log, err := zap.NewDevelopment()
	if err != nil {
		return fmt.Errorf("logger: %w", err)
	}
	deps := ingest.Deps{Sink: &jsonSink{w: bufio.NewWriter(os.Stdout)}, Registerer: prometheus.NewRegistry(), Log: log}
	if *kubeconfig != "" {
		rc, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
		if err != nil {
			return fmt.Errorf("load kubeconfig: %w", err)
		}
		cs, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return fmt.Errorf("kubernetes client: %w", err)
		}
		deps.TokenReviews = cs.AuthenticationV1().TokenReviews()
	}
	srv, err := ingest.New(cfg, deps)
	if err != nil {
		return err
	}
	defer srv.Stop()
	opts, err := ingest.ServerOptions(cfg)
	if err != nil {
		return err
	}
	g := grpc.NewServer(opts...)
	srv.Register(g)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		g.Stop()
	}()
	log.Info("listening", zap.String("addr", ln.Addr().String()))
	if err := g.Serve(srv.Listener(ln)); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}
