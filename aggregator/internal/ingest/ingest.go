// Package ingest receives node reports on the aggregator: it authenticates
// each stream (TokenReview of a pod-bound token), verifies every report's
// ed25519 signature, rejects replays, skew, oversize, garbage and floods, and
// hands accepted reports to a Sink.
//
// CONTRACT SKELETON: the API below is what aggregator/main.go wires; the
// implementation is the signed report stream issue's.
package ingest

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"

	"github.com/cozystack/cozy-health/pkg/report"
)

// Sink receives every accepted report. It is called from stream goroutines
// and must not block for long.
type Sink interface {
	Accept(r *report.NodeReport, receivedAt time.Time)
}

// Config configures ingest; aggregator flags map onto it.
type Config struct {
	// TokenAudience is the audience agent tokens must carry (--token-audience).
	TokenAudience string
	// AgentServiceAccount is namespace/name of the agents' ServiceAccount
	// (--agent-service-account).
	AgentServiceAccount string
	// DesiredInterval is sent to agents in every ack.
	DesiredInterval time.Duration
	// InsecureDevKeysDir, when set, accepts streams whose key is listed there
	// without a token (--insecure-dev-keys-dir). Never the default.
	InsecureDevKeysDir string
}

// Deps are ingest's collaborators.
type Deps struct {
	TokenReviews authenticationv1client.TokenReviewInterface
	Sink         Sink
	Registerer   prometheus.Registerer
	Log          *zap.Logger
	Now          func() time.Time
}

// Server is the IngestService implementation.
type Server struct{}

// New validates cfg and builds a Server.
func New(cfg Config, deps Deps) (*Server, error) { return nil, errors.New("ingest: not implemented") }

// Register registers the IngestService on g.
func (s *Server) Register(g *grpc.Server) {}
