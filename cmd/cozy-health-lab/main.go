// Command cozy-health-lab runs a whole cozy-health cluster on one machine.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "cozy-health-lab: not yet implemented (see issue: local lab and make demo)")
	os.Exit(2)
}
