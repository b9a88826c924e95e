package main

import (
	"fmt"
	"io/fs"
	"strings"

	"helm.sh/helm/v3/pkg/registry"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/cozy-health/deploy"
	"github.com/cozystack/cozy-health/deploy/render"
)

// The names of the objects a user applies.
const (
	namespace     = "cozy-health"
	releaseName   = "cozy-health"
	chartSource   = "cozy-health"
	packageSource = "cozy-health-package"
	// cozySystem is where Cozystack keeps its package sources (its own
	// cozystack-packages OCIRepository).
	cozySystem = "cozy-system"
	// valuesConfigMap is an optional ConfigMap of the user's values over the
	// chart's, read by the HelmRelease when it exists.
	valuesConfigMap = "cozy-health-values"
	// helmChartLayer is Helm's chart layer (helm.sh/helm/v3/pkg/registry
	// ChartLayerMediaType), the layer the chart's OCIRepository extracts.
	helmChartLayer = registry.ChartLayerMediaType
	interval       = "10m"
)

// objects are the inputs of the Flux objects.
type objects struct {
	Registry   string
	Insecure   bool
	PullSecret string
	// Images are the pinned references by values key (agent.image...).
	Images  map[string]string
	Chart   artifactRef
	Package artifactRef
}

// artifactRef is an OCI artifact: its repository (no scheme), tag and
// digest.
type artifactRef struct {
	Repo, Tag, Digest string
}

// ociRepository is a Flux OCIRepository (source.toolkit.fluxcd.io/v1, as
// source-controller v1.7 serves it) for a, pinned to its digest (the tag
// stays for the reader; the digest wins, Flux's documented precedence).
func (o objects) ociRepository(name, ns string, a artifactRef, layerMediaType string) map[string]any {
	spec := map[string]any{
		"interval": interval,
		"url":      "oci://" + a.Repo,
		"ref":      map[string]any{"tag": a.Tag, "digest": a.Digest},
	}
	if layerMediaType != "" {
		spec["layerSelector"] = map[string]any{"mediaType": layerMediaType, "operation": "copy"}
	}
	if o.Insecure {
		spec["insecure"] = true
	}
	if o.PullSecret != "" {
		spec["secretRef"] = map[string]any{"name": o.PullSecret}
	}
	return map[string]any{
		"apiVersion": "source.toolkit.fluxcd.io/v1",
		"kind":       "OCIRepository",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec":       spec,
	}
}

// pullSecretValues are the chart values that name the image pull secret.
func (o objects) pullSecretValues() map[string]any {
	return map[string]any{"image": map[string]any{"pullSecrets": []any{map[string]any{"name": o.PullSecret}}}}
}

// helmFile is flux/cozy-health.yaml: the release namespace (labelled
// privileged, as the agent's hostNetwork and hostPath need under Talos'
// baseline PodSecurity), the chart's OCIRepository and the HelmRelease.
func (o objects) helmFile() (string, error) {
	hrSpec := map[string]any{
		"interval":    interval,
		"releaseName": releaseName,
		"chartRef":    map[string]any{"kind": "OCIRepository", "name": chartSource},
		// Helm skips crds/ on upgrade; the Health CRD's changes must land.
		"install": map[string]any{"crds": "CreateReplace"},
		"upgrade": map[string]any{"crds": "CreateReplace"},
		"valuesFrom": []any{map[string]any{
			"kind": "ConfigMap", "name": valuesConfigMap, "valuesKey": "values.yaml", "optional": true,
		}},
	}
	// The HelmRelease names the images it runs (as the chart's values do):
	// every release changes its spec, so its generation moves and
	// `kubectl wait --for=condition=Ready` waits for this release, not the
	// Ready of the one before.
	values := map[string]any{}
	for key, ref := range o.Images {
		component, field, _ := strings.Cut(key, ".")
		values[component] = map[string]any{field: ref}
	}
	if o.PullSecret != "" {
		values["image"] = o.pullSecretValues()["image"]
	}
	hrSpec["values"] = values
	docs := []doc{
		{
			comment: "The release namespace. The agent DaemonSet uses hostNetwork and hostPath,\nwhich Talos' default PodSecurity (baseline) refuses.",
			obj: map[string]any{
				"apiVersion": "v1", "kind": "Namespace",
				"metadata": map[string]any{"name": namespace, "labels": map[string]any{"pod-security.kubernetes.io/enforce": "privileged"}},
			},
		},
		{
			comment: "The chart, pushed as `helm push` does; the images in its values are pinned by digest.",
			obj:     o.ociRepository(chartSource, namespace, o.Chart, helmChartLayer),
		},
		{
			comment: "The release. Values of your own go into the ConfigMap " + valuesConfigMap + " (key values.yaml)\nin this namespace, read when it exists; spec.values names this release's images.",
			obj: map[string]any{
				"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
				"metadata": map[string]any{"name": releaseName, "namespace": namespace},
				"spec":     hrSpec,
			},
		},
	}
	return writeDocs(o.header("cozy-health with Flux: kubectl apply -f this file"), docs)
}

// packageFile is flux/cozystack-package.yaml: the package artifact's
// OCIRepository in cozy-system, the PackageSource cozystack.cozy-health
// (deploy/cozystack's, its source that OCIRepository) and the Package.
func (o objects) packageFile() (string, error) {
	raw, err := fs.ReadFile(deploy.Cozystack(), render.PackageSourceFile)
	if err != nil {
		return "", err
	}
	var ps map[string]any
	if err := yaml.Unmarshal(raw, &ps); err != nil {
		return "", fmt.Errorf("%s: %w", render.PackageSourceFile, err)
	}
	spec, ok := ps["spec"].(map[string]any)
	if !ok {
		return "", fmt.Errorf("%s has no spec", render.PackageSourceFile)
	}
	spec["sourceRef"] = map[string]any{"kind": "OCIRepository", "name": packageSource, "namespace": cozySystem, "path": "/"}
	name, _ := ps["metadata"].(map[string]any)["name"].(string)
	pkgSpec := map[string]any{"variant": "default"}
	if o.PullSecret != "" {
		// The wrapper chart carries the upstream chart as cozy-health.
		pkgSpec["components"] = map[string]any{"cozy-health": map[string]any{"values": map[string]any{"cozy-health": o.pullSecretValues()}}}
	}
	docs := []doc{
		{
			comment: "The package artifact (as `flux push artifact` writes it): system/cozy-health, the\nwrapper chart with the images pinned by digest, and library/cozy-health, the chart.",
			obj:     o.ociRepository(packageSource, cozySystem, o.Package, ""),
		},
		{
			comment: "cozy-health's PackageSource (deploy/cozystack), its source the artifact above.",
			obj:     ps,
		},
		{
			comment: "The Package: Cozystack's package operator installs release cozy-health in\nnamespace cozy-health, labelled privileged.",
			obj: map[string]any{
				"apiVersion": "cozystack.io/v1alpha1", "kind": "Package",
				"metadata": map[string]any{"name": name},
				"spec":     pkgSpec,
			},
		},
	}
	return writeDocs(o.header("cozy-health as a Cozystack package: kubectl apply -f this file on a Cozystack v1 cluster"), docs)
}

func (o objects) header(what string) string {
	h := what + "\nWritten by hack/release (make release REGISTRY=" + o.Registry + ")."
	if o.Insecure {
		h += "\nThe registry is on loopback: plain HTTP (insecure: true)."
	}
	if o.PullSecret != "" {
		h += "\nThe registry is private: the docker-registry Secret " + o.PullSecret + " must exist in the\nnamespace of each OCIRepository and in cozy-health (image pulls)."
	}
	return h
}

type doc struct {
	comment string
	obj     map[string]any
}

// writeDocs writes documents, each after its comment.
func writeDocs(header string, docs []doc) (string, error) {
	var b strings.Builder
	b.WriteString(comment(header))
	for _, d := range docs {
		y, err := yaml.Marshal(d.obj)
		if err != nil {
			return "", err
		}
		b.WriteString("---\n")
		b.WriteString(comment(d.comment))
		b.Write(y)
	}
	return b.String(), nil
}

func comment(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		b.WriteString("# " + l + "\n")
	}
	return b.String()
}
