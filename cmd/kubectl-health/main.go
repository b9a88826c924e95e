// Command kubectl-health is the kubectl plugin `kubectl health`.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "Usage: kubectl health [drain-check NODE|nodes|node NAME] (not implemented yet)")
	os.Exit(2)
}
