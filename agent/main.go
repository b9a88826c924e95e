// Command cozy-health-agent is the per-node half of cozy-health: it reads
// local truths on its node and streams signed reports to every aggregator
// replica. It is wired in agent/internal/app.
//
//	cozy-health-agent [run] [flags]        run the checks every interval and stream reports
//	cozy-health-agent run-once [flags]     run every check once, print, exit 0/1/2
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"go.uber.org/zap"

	"github.com/cozystack/cozy-health/agent/internal/app"
	"github.com/cozystack/cozy-health/agent/internal/config"
	"github.com/cozystack/cozy-health/pkg/cli"
	"github.com/cozystack/cozy-health/pkg/logging"
	"github.com/cozystack/cozy-health/pkg/version"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cmd := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "version":
		fmt.Fprintln(stdout, version.Version)
		return cli.ExitOK
	case "run", "run-once":
	default:
		fmt.Fprintf(stderr, "cozy-health-agent: unknown command %q; want run, run-once or version\n", cmd)
		return cli.ExitUsage
	}
	cfg, err := config.Load(cmd, args, stderr)
	if err != nil {
		if code := cli.ExitCode(err); code != cli.ExitUsage {
			return code // --help
		}
		fmt.Fprintf(stderr, "cozy-health-agent: %v\n", err)
		return cli.ExitUsage
	}
	base, err := logging.New(cfg.LogLevel, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "cozy-health-agent: %v\n", err)
		return cli.ExitUsage
	}
	defer func() { _ = base.Sync() }()
	// Subsystems add their own "component"; base carries only the node.
	base = base.With(zap.String("node", cfg.NodeName))
	log := logging.Component(base, "agent")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a, err := app.New(cfg, base)
	if err != nil {
		log.Error("start agent", zap.Error(err))
		if cmd == "run-once" {
			return app.ExitUnknown
		}
		return cli.ExitFailure
	}
	defer a.Close()
	if cmd == "run-once" {
		return a.RunOnce(ctx, stdout)
	}
	if err := a.Run(ctx); err != nil {
		log.Error("agent stopped", zap.Error(err))
		return cli.ExitFailure
	}
	return cli.ExitOK
}
