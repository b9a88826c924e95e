// Command cozy-health-aggregator verifies node reports, keeps the full state
// in every replica and, on the Lease holder only, writes Health objects.
//
// Flags are listed by --help; each may also be set in the YAML file named by
// --config, under the flag's name (flags win).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/cozystack/cozy-health/aggregator/internal/app"
	"github.com/cozystack/cozy-health/aggregator/internal/config"
	"github.com/cozystack/cozy-health/pkg/version"
)

func main() {
	os.Exit(run())
}

func run() int {
	cfg, err := config.Load(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "cozy-health-aggregator: %v\n", err)
		return 2
	}
	log, err := newLogger(cfg.LogLevel)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cozy-health-aggregator: logger: %v\n", err)
		return 2
	}
	defer func() { _ = log.Sync() }()
	log = log.With(zap.String("version", version.Version))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	a, err := app.New(cfg, log, app.Options{})
	if err != nil {
		log.Error("start aggregator", zap.String("component", "main"), zap.Error(err))
		return 1
	}
	if err := a.Run(ctx); err != nil {
		log.Error("aggregator stopped", zap.String("component", "main"), zap.Error(err))
		return 1
	}
	return 0
}

func newLogger(level string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, err
	}
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(lvl)
	return zc.Build()
}
