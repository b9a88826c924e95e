// Command kubectl-health is the kubectl plugin `kubectl health`: every
// Health object as a tree, the per-node views, and the node-drain
// pre-check. See internal/cli.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/cozystack/cozy-health/cmd/kubectl-health/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], cli.IO{Out: os.Stdout, Err: os.Stderr})
	stop()
	os.Exit(code)
}
