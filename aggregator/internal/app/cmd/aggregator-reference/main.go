// Command aggregator-reference prints the aggregator's reference data as
// JSON (pkg/reference.Binary): every flag as config.RegisterFlags binds it,
// and every metric app.New registers with every optional part on (the
// cluster adapters, the LINSTOR view, the self-signed serving certificate,
// delegated /metrics and drain-check authentication, the drain guard). The
// Go and process collectors' go_* and process_* are left out, as they
// change with the Go release. hack/reference renders
// docs/reference/flags.md and metrics.md from it (`make generate`).
//
// It builds the aggregator without starting it: nothing is dialled, and
// its listeners are on loopback ports the system picks.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"go.uber.org/zap"
	"k8s.io/client-go/rest"

	"github.com/cozystack/cozy-health/aggregator/internal/app"
	"github.com/cozystack/cozy-health/aggregator/internal/config"
	"github.com/cozystack/cozy-health/pkg/reference"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "aggregator-reference:", err)
		os.Exit(1)
	}
}

func run() error {
	// The defaults read from the environment are printed as the variable.
	for _, v := range []string{"POD_NAME", "POD_NAMESPACE"} {
		if err := os.Setenv(v, "$"+v); err != nil {
			return err
		}
	}
	cfg := config.Default()
	fs := flag.NewFlagSet("cozy-health-aggregator", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	b := reference.Binary{Name: "cozy-health-aggregator", Commands: []reference.Command{{
		Name:  "cozy-health-aggregator",
		Short: "verify node reports, keep the full state in every replica, answer drain checks and, on the Lease holder, write Health objects",
		Flags: reference.GoFlags(fs),
	}}}

	cfg.TLSMode, cfg.TLSNamespace = config.TLSModeSelfSigned, "cozy-health"
	cfg.MetricsAuth, cfg.DrainAuth = config.MetricsAuthDelegated, config.DrainAuthDelegated
	cfg.MetricsTLS = true
	cfg.LinstorURL = "https://linstor-controller.cozy-linstor.svc:3371"
	cfg.Listen, cfg.HTTPAddr, cfg.MetricsAddr, cfg.GuardAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	reg := reference.NewRegistry()
	if _, err := app.New(cfg, zap.NewNop(), app.Options{RestConfig: &rest.Config{Host: "https://127.0.0.1:1"}, Registry: reg}); err != nil {
		return fmt.Errorf("build the aggregator: %w", err)
	}
	metrics, err := reg.Metrics()
	if err != nil {
		return err
	}
	for _, m := range metrics {
		if !strings.HasPrefix(m.Name, "go_") && !strings.HasPrefix(m.Name, "process_") {
			b.Metrics = append(b.Metrics, m)
		}
	}
	return reference.Write(os.Stdout, b)
}
