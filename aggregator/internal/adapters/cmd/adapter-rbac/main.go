// Command adapter-rbac writes the aggregator's read-only RBAC rules for the
// cluster adapters' sources (adapters.RBACRules) into the chart
// (adapters.RBACFile). `make generate` runs it from the repository root; it
// lives under aggregator/ because only packages there may import the
// adapters.
package main

import (
	"fmt"
	"os"

	"github.com/cozystack/cozy-health/aggregator/internal/adapters"
)

func main() {
	if err := os.WriteFile(adapters.RBACFile, []byte(adapters.RBACRules()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "adapter-rbac:", err)
		os.Exit(1)
	}
}
