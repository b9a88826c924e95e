package app

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/cozystack/cozy-health/aggregator/internal/config"
	"github.com/cozystack/cozy-health/aggregator/internal/ingest"
	"github.com/cozystack/cozy-health/aggregator/internal/peers"
	"github.com/cozystack/cozy-health/aggregator/internal/servingcert"
	"github.com/cozystack/cozy-health/pkg/logging"
	"github.com/cozystack/cozy-health/pkg/tlsutil"
)

// newPeers wires the replicas' peer sync (issue 36, partial partitions):
// the PeerService on the ingest port, answering the aggregator's own
// ServiceAccount from ingest's latest reports, and, with --peers, the loop
// that asks the other replicas for the nodes this one does not hear. It
// returns the loop, nil without --peers.
func (a *App) newPeers(srv *ingest.Server) (*peers.Syncer, error) {
	cfg := a.cfg
	m, err := peers.NewMetrics(a.reg)
	if err != nil {
		return nil, err
	}
	log := logging.Component(a.base, "peers")
	icfg := ingest.DefaultConfig()
	ps, err := peers.NewServer(peers.ServerConfig{
		Identity: cfg.Identity, Audience: cfg.TokenAudience, ServiceAccount: cfg.PeerServiceAccount, MaxAge: icfg.SkewWindow,
	}, srv, a.reviews.AuthenticationV1().TokenReviews(), m, a.base, a.clock.Now)
	if err != nil {
		return nil, fmt.Errorf("peer service: %w", err)
	}
	ps.Register(a.grpc)
	if len(cfg.Peers) == 0 {
		return nil, nil
	}
	pool, err := a.peerCAPool()
	if err != nil {
		return nil, err
	}
	log.Info("peer sync on", zap.Strings("peers", cfg.Peers), zap.String("identity", cfg.Identity))
	return peers.NewSyncer(peers.SyncConfig{
		Identity: cfg.Identity, Peers: cfg.Peers, Interval: cfg.ReportInterval, SkewWindow: icfg.SkewWindow,
		MaxPayloadBytes: icfg.MaxPayloadBytes, TokenFile: cfg.PeerTokenFile, CAPool: pool,
	}, srv, a.state, m, a.base, a.clock.Now), nil
}

// peerCAPool is the CA bundle that verifies the other replicas: the
// serving Secret's ca.crt (every replica serves a certificate of that CA),
// or --peer-ca-file with --tls-mode files.
func (a *App) peerCAPool() (func() (*x509.CertPool, error), error) {
	cfg := a.cfg
	if cfg.PeerCAFile != "" {
		return func() (*x509.CertPool, error) { return tlsutil.LoadCAPool(cfg.PeerCAFile) }, nil
	}
	if a.secretInformers == nil {
		return nil, errors.New("--peers with --tls-mode " + config.TLSModeFiles + " needs --peer-ca-file")
	}
	lister := a.secretInformers.Core().V1().Secrets().Lister()
	return func() (*x509.CertPool, error) {
		sec, err := lister.Secrets(cfg.TLSNamespace).Get(cfg.TLSSecret)
		if err != nil {
			return nil, fmt.Errorf("serving Secret %s/%s: %w", cfg.TLSNamespace, cfg.TLSSecret, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(sec.Data[servingcert.KeyCA]) {
			return nil, fmt.Errorf("serving Secret %s/%s holds no CA in %s", cfg.TLSNamespace, cfg.TLSSecret, servingcert.KeyCA)
		}
		return pool, nil
	}, nil
}

// runPeers runs the peer sync loop, if any, until ctx ends.
func (a *App) runPeers(ctx context.Context) {
	if a.peerSync != nil {
		a.peerSync.Run(ctx)
	}
}
