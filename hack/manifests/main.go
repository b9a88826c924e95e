// Command manifests renders the Helm chart into the plain manifests
// kubectl users apply (deploy/manifests/cozy-health.yaml): the chart's default
// values plus the release Namespace, labelled for the agent's Pod Security
// level, so that `kubectl apply --server-side -f` works on its own.
//
//	go run ./hack/manifests [-o deploy/manifests/cozy-health.yaml]
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cozystack/cozy-health/deploy"
	"github.com/cozystack/cozy-health/deploy/render"
)

const header = `# cozy-health plain manifests, rendered from the Helm chart
# (deploy/charts/cozy-health) with its default values and namespace.create=true
# by 'make manifests'. DO NOT EDIT: change the chart and run 'make manifests'.
#
#   kubectl apply --server-side -f deploy/manifests/cozy-health.yaml
#
# Before applying on Talos, apply the machine-config patches in talos/manifests.
`

// ManifestsOptions are the render options of the plain manifests.
var manifestsOptions = render.Options{Set: []string{"namespace.create=true"}}

func main() {
	out := flag.String("o", deploy.ManifestsFile, "output file")
	flag.Parse()
	r, err := render.Render(manifestsOptions)
	if err != nil {
		fmt.Fprintf(os.Stderr, "manifests: %v\n", err)
		os.Exit(1)
	}
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "manifests: %v\n", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, append([]byte(header), r.YAML()...), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "manifests: %v\n", err)
		os.Exit(1)
	}
}
