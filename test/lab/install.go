package lab

import (
	"context"

	"github.com/cozystack/cozy-health/test/harness/realnode"
)

// InstallChart installs the chart on a real node as `make lab-node` does
// (release cozy-health in namespace cozy-health, labelled privileged; the
// images of binDir's binaries imported).
func InstallChart(ctx context.Context, c *realnode.Cluster, binDir string, logf func(string, ...any)) error {
	return installOnNode(ctx, c, binDir, logf)
}
