// Command cozy-health-aggregator verifies node reports, keeps the full state
// in every replica and, on the Lease holder only, writes Health objects.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "Usage: cozy-health-aggregator [flags] (not implemented yet)")
	os.Exit(2)
}
