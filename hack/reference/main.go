// Command reference writes the generated reference pages from the code's
// own tables (`make generate`; `make verify-generate` fails when one is
// stale):
//
//   - docs/reference/flags.md: every flag of cozy-health-agent,
//     cozy-health-aggregator and kubectl-health, with its type, default and
//     help, as their flag sets bind them;
//   - docs/reference/metrics.md: every metric both binaries register, with
//     its type, labels and help, from the registries' descriptors;
//   - docs/reference/values.md: every value of the Helm chart
//     (deploy/charts/cozy-health/values.yaml) with its default and the
//     comment above it, and what the Cozystack package sets over them.
//
// The flags and metrics come from a small main beside each binary's wiring
// (it may import that binary's internal packages), run with `go run`, which
// prints a pkg/reference.Binary as JSON.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// sources are the mains printing each binary's reference data, in the
// order the pages list them.
var sources = []string{
	"./agent/internal/app/cmd/agent-reference",
	"./aggregator/internal/app/cmd/aggregator-reference",
	"./cmd/kubectl-health/internal/cli/cmd/kubectl-health-reference",
}

// Values files: the chart's, and the Cozystack package's over it.
const (
	chartValues   = "deploy/charts/cozy-health/values.yaml"
	packageValues = "deploy/cozystack/packages/system/cozy-health/values.yaml"
)

func main() {
	root := flag.String("root", ".", "repository root")
	out := flag.String("out", "docs/reference", "directory the pages are written to, relative to -root")
	flag.Parse()
	if err := run(*root, *out); err != nil {
		fmt.Fprintln(os.Stderr, "reference:", err)
		os.Exit(1)
	}
}

func run(root, out string) error {
	var bins []binary
	for _, src := range sources {
		cmd := exec.Command("go", "run", src)
		cmd.Dir = root
		cmd.Stderr = os.Stderr
		data, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("go run %s: %w", src, err)
		}
		b, err := readBinary(bytes.NewReader(data))
		if err != nil {
			return fmt.Errorf("%s: %w", src, err)
		}
		bins = append(bins, b)
	}
	chart, err := os.ReadFile(filepath.Join(root, chartValues))
	if err != nil {
		return err
	}
	pkg, err := os.ReadFile(filepath.Join(root, packageValues))
	if err != nil {
		return err
	}
	values, err := valuesPage(chart, pkg)
	if err != nil {
		return err
	}
	for name, page := range map[string]string{"flags.md": flagsPage(bins), "metrics.md": metricsPage(bins), "values.md": values} {
		if err := os.WriteFile(filepath.Join(root, out, name), []byte(page), 0o644); err != nil {
			return err
		}
	}
	return nil
}
