package uplink

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"

	"go.uber.org/zap"
	"google.golang.org/grpc/credentials"

	"github.com/cozystack/cozy-health/pkg/tlsutil"
)

// caReloadingCreds are TLS transport credentials that read the CA bundle
// (--ca-file) again for every handshake. When the aggregators' CA rotates,
// the aggregator publishes the old and the new CA together and the kubelet
// swaps the mounted ConfigMap; the next connection verifies with the new
// bundle while open streams keep going until they reconnect.
type caReloadingCreds struct {
	credentials.TransportCredentials // Info and the server side, from base
	base                             *tls.Config
	ca                               *tlsutil.CAFile
	log                              *zap.Logger
}

func newCAReloadingCreds(base *tls.Config, ca *tlsutil.CAFile, log *zap.Logger) *caReloadingCreds {
	return &caReloadingCreds{TransportCredentials: credentials.NewTLS(base), base: base, ca: ca, log: log}
}

// ClientHandshake verifies the server against the bundle as it is now.
func (c *caReloadingCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	pool, changed, err := c.ca.Pool()
	if pool == nil {
		return nil, nil, fmt.Errorf("aggregator CA bundle: %w", err)
	}
	if err != nil {
		c.log.Warn("aggregator CA bundle unreadable; verifying with the last good one", zap.String("caFile", c.ca.Path()), zap.Error(err))
	} else if changed {
		c.log.Info("aggregator CA bundle loaded", zap.String("caFile", c.ca.Path()))
	}
	tc := c.base.Clone()
	tc.RootCAs = pool
	return credentials.NewTLS(tc).ClientHandshake(ctx, authority, raw)
}

// Clone implements credentials.TransportCredentials.
func (c *caReloadingCreds) Clone() credentials.TransportCredentials {
	return newCAReloadingCreds(c.base.Clone(), c.ca, c.log)
}
