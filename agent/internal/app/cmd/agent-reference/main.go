// Command agent-reference prints the agent's reference data as JSON
// (pkg/reference.Binary): every flag of `cozy-health-agent [run|run-once]`
// as config.RegisterFlags binds it, and every metric the agent registers
// (the runner's and the uplink's; the Go and process collectors' go_* and
// process_* are left out, as they change with the Go release).
// hack/reference renders docs/reference/flags.md and metrics.md from it
// (`make generate`).
package main

import (
	"flag"
	"fmt"
	"os"

	"go.uber.org/zap"

	"github.com/cozystack/cozy-health/agent/internal/config"
	"github.com/cozystack/cozy-health/agent/internal/runner"
	"github.com/cozystack/cozy-health/agent/internal/uplink"
	"github.com/cozystack/cozy-health/pkg/reference"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "agent-reference:", err)
		os.Exit(1)
	}
}

func run() error {
	// The defaults read from the environment are printed as the variable.
	if err := os.Setenv("NODE_NAME", "$NODE_NAME"); err != nil {
		return err
	}
	cfg := config.Default()
	fs := flag.NewFlagSet("cozy-health-agent", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	b := reference.Binary{Name: "cozy-health-agent", Commands: []reference.Command{{
		Name:  "cozy-health-agent [run|run-once]",
		Short: "run: run the checks every interval and stream signed reports to every aggregator replica; run-once: run every check once, print the observations, exit 0 (all Healthy), 1 (Degraded or Down) or 2 (Unknown). `cozy-health-agent version` prints the version.",
		Flags: reference.GoFlags(fs),
	}}}

	// The agent's metrics, registered as agent/internal/app wires them:
	// the runner's in New, the uplink's in Run.
	reg := reference.NewRegistry()
	if _, err := runner.New(runner.Config{NodeName: "node", Interval: cfg.Interval, CheckDeadline: cfg.CheckDeadline, Concurrency: cfg.Concurrency},
		nil, reg, zap.NewNop()); err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	if _, err := uplink.New(uplink.Config{Aggregators: []string{"aggregator:9443"}, CAFile: "/nonexistent/ca.crt", TokenFile: cfg.Uplink.TokenFile,
		NodeName: "node", Registerer: reg}, zap.NewNop()); err != nil {
		return fmt.Errorf("uplink: %w", err)
	}
	var err error
	if b.Metrics, err = reg.Metrics(); err != nil {
		return err
	}
	return reference.Write(os.Stdout, b)
}
