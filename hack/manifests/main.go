// Command manifests renders the files generated from the Helm chart: the
// plain manifests kubectl users apply (deploy/manifests/cozy-health.yaml: the
// chart's default values plus the release Namespace, labelled for the agent's
// Pod Security level, so that `kubectl apply --server-side -f` works on its
// own), the Talos ServiceAccount apart, and the files Cozystack takes from the
// chart (deploy/cozystack: the dashboard, the kube-state-metrics entry).
//
//	go run ./hack/manifests [-root .]
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/cozystack/cozy-health/deploy/render"
)

func main() {
	root := flag.String("root", ".", "repository root")
	flag.Parse()
	files, err := render.GeneratedFiles()
	if err != nil {
		fmt.Fprintf(os.Stderr, "manifests: %v\n", err)
		os.Exit(1)
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		out := filepath.Join(*root, p)
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			fmt.Fprintf(os.Stderr, "manifests: %v\n", err)
			os.Exit(1)
		}
		if err := os.WriteFile(out, files[p], 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "manifests: %v\n", err)
			os.Exit(1)
		}
	}
}
