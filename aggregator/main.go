// Command cozy-health-aggregator verifies node reports, keeps the full state
// in every replica and, on the Lease holder only, writes Health objects.
//
// Flags are listed by --help; each may also be set in the YAML file named by
// --config, under the flag's name (flags win). Exit codes (pkg/cli): 0 after
// a clean stop or --help, 1 when running fails, 2 for a bad command line,
// configuration file or value.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"

	"github.com/cozystack/cozy-health/aggregator/internal/app"
	"github.com/cozystack/cozy-health/aggregator/internal/config"
	"github.com/cozystack/cozy-health/pkg/cli"
	"github.com/cozystack/cozy-health/pkg/logging"
	"github.com/cozystack/cozy-health/pkg/version"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	cfg, err := config.Load(args, stderr)
	if err != nil {
		if code := cli.ExitCode(err); code != cli.ExitUsage {
			return code
		}
		fmt.Fprintf(stderr, "cozy-health-aggregator: %v\n", err)
		return cli.ExitUsage
	}
	base, err := logging.New(cfg.LogLevel, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "cozy-health-aggregator: %v\n", err)
		return cli.ExitUsage
	}
	defer func() { _ = base.Sync() }()
	base = base.With(zap.String("version", version.Version))
	log := logging.Component(base, "main")

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	a, err := app.New(cfg, base, app.Options{})
	if err != nil {
		log.Error("start aggregator", zap.Error(err))
		return cli.ExitFailure
	}
	if err := a.Run(ctx); err != nil {
		log.Error("aggregator stopped", zap.Error(err))
		return cli.ExitFailure
	}
	return cli.ExitOK
}
