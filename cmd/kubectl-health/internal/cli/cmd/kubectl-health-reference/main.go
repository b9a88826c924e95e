// Command kubectl-health-reference prints the kubectl-health plugin's
// reference data as JSON (pkg/reference.Binary): every command of cli.Root
// with its own flags and those it inherits, as cobra binds them.
// hack/reference renders docs/reference/flags.md from it (`make
// generate`).
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cozystack/cozy-health/cmd/kubectl-health/internal/cli"
	"github.com/cozystack/cozy-health/pkg/reference"
)

func main() {
	// A default read from the environment is printed as the variable
	// (--cache-dir's, under $HOME).
	if err := os.Setenv("HOME", "$HOME"); err != nil {
		fmt.Fprintln(os.Stderr, "kubectl-health-reference:", err)
		os.Exit(1)
	}
	b := reference.Binary{Name: "kubectl-health"}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		b.Commands = append(b.Commands, reference.Command{
			Name:      strings.Replace(c.CommandPath(), "kubectl-health", "kubectl health", 1),
			Usage:     strings.TrimSuffix(strings.Replace(c.UseLine(), "kubectl-health", "kubectl health", 1), " [flags]"),
			Short:     c.Short,
			Flags:     flags(c.LocalNonPersistentFlags(), c.PersistentFlags()),
			Inherited: flags(c.InheritedFlags()),
		})
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				walk(sub)
			}
		}
	}
	walk(cli.Root())
	if err := reference.Write(os.Stdout, b); err != nil {
		fmt.Fprintln(os.Stderr, "kubectl-health-reference:", err)
		os.Exit(1)
	}
}

// flags is every flag of the sets, by name (the sets sort them).
func flags(sets ...*pflag.FlagSet) []reference.Flag {
	var out []reference.Flag
	for _, fs := range sets {
		fs.VisitAll(func(f *pflag.Flag) {
			if f.Hidden {
				return
			}
			out = append(out, reference.Flag{Name: f.Name, Shorthand: f.Shorthand, Type: f.Value.Type(), Default: f.DefValue, Usage: f.Usage})
		})
	}
	return out
}
