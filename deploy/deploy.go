// Package deploy carries the Helm chart (deploy/charts/cozy-health), the
// single source of cozy-health's install, and the plain manifests rendered
// from it (deploy/manifests, by `make manifests`), embedded so that tools and
// tests use exactly what ships. Rendering lives in deploy/render, so that
// importing this package costs no Helm dependency.
package deploy

import (
	"embed"
	"io/fs"
)

// ChartDir is the chart's directory relative to the repository root.
const ChartDir = "deploy/charts/cozy-health"

// ManifestsFile is the rendered plain manifests' path relative to the
// repository root.
const ManifestsFile = "deploy/manifests/cozy-health.yaml"

//go:embed all:charts/cozy-health
var chartFS embed.FS

//go:embed manifests/cozy-health.yaml
var manifests []byte

//go:embed manifests/talos-serviceaccount.yaml
var talosServiceAccount []byte

//go:embed all:cozystack
var cozystackFS embed.FS

// CozystackDir is the Cozystack package's directory relative to the
// repository root: the files to carry into Cozystack's repository, laid out
// as there (packages/..., dashboards/...), and snippets/ to merge into files
// of theirs.
const CozystackDir = "deploy/cozystack"

// Chart returns the chart's files, rooted at the chart's directory.
func Chart() fs.FS {
	sub, err := fs.Sub(chartFS, "charts/cozy-health")
	if err != nil {
		panic(err) // the path is a constant embedded above
	}
	return sub
}

// Cozystack returns the Cozystack package's files, rooted at CozystackDir.
func Cozystack() fs.FS {
	sub, err := fs.Sub(cozystackFS, "cozystack")
	if err != nil {
		panic(err) // the path is a constant embedded above
	}
	return sub
}

// Manifests returns the plain manifests rendered from the chart with its
// default values (and the release Namespace), as `kubectl apply` users get
// them.
func Manifests() []byte { return manifests }

// TalosServiceAccount returns the chart's Talos ServiceAccount rendered
// apart (deploy/manifests/talos-serviceaccount.yaml): the chart renders it
// only where Talos serves talos.dev/v1alpha1, so the plain manifests leave
// it out.
func TalosServiceAccount() []byte { return talosServiceAccount }
