// Command cozy-health-agent is the per-node half of cozy-health: it reads
// local truths on its node and streams signed reports to every aggregator
// replica.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "Usage: cozy-health-agent [run|run-once] [flags] (not implemented yet)")
	os.Exit(2)
}
