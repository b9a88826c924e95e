// Package uplink streams the agent's signed reports to every aggregator
// replica.
//
// CONTRACT SKELETON: the API below is what agent/main.go wires; the
// implementation is the signed report stream issue's.
package uplink

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/cozystack/cozy-health/pkg/report"
)

// Config configures the uplink; agent flags map onto it one to one.
type Config struct {
	// Aggregators are host:port addresses and/or DNS names (a headless
	// Service) resolved to all their A/AAAA records (--aggregator).
	Aggregators []string
	// CAFile verifies the aggregators' serving certificates (--ca-file).
	CAFile string
	// TokenFile is the projected ServiceAccount token, re-read on rotation
	// (--token-file).
	TokenFile string
	// NodeName is the node this agent speaks for (--node-name).
	NodeName string
	// InsecureDevKeyFile, when set, signs with a static key from this file
	// instead of a fresh in-memory key (--insecure-dev-key-file).
	InsecureDevKeyFile string
	// ResolveInterval is how often DNS names are re-resolved.
	ResolveInterval time.Duration
}

// Uplink keeps one stream per aggregator replica.
type Uplink struct{}

// New validates cfg and builds an Uplink; nothing connects until Run.
func New(cfg Config, log *zap.Logger) (*Uplink, error) {
	return nil, errors.New("uplink: not implemented")
}

// Publish hands over the newest report; it never blocks, and a report not yet
// sent to a replica is replaced by a newer one.
func (u *Uplink) Publish(r *report.NodeReport) {}

// DesiredInterval returns the interval the aggregators asked for in their
// latest ack, or 0 when none has.
func (u *Uplink) DesiredInterval() time.Duration { return 0 }

// Run connects to every replica and streams until ctx is done.
func (u *Uplink) Run(ctx context.Context) error { return errors.New("uplink: not implemented") }
