// Command image builds the OCI images of cozy-health-agent and
// cozy-health-aggregator for linux/amd64 and linux/arm64 without a Docker
// engine or a registry, with the one image builder (package hack/image/oci):
// static Go binaries (CGO_ENABLED=0) on an empty ("scratch") base, written
// as OCI image-layout archives (bin/images/NAME.oci.tar) that `ctr images
// import`, `skopeo copy oci-archive:` and `crane push` read. Builds are
// reproducible: every timestamp is fixed (SOURCE_DATE_EPOCH, default 0), so
// the same sources give the same digests.
//
//	go run ./hack/image [-out bin/images] [-registry ghcr.io/cozystack/cozystack] [-tag 0.1.0] [-version v0.1.0]
//
// `push` (make push) publishes what it built: the whole multi-platform index
// of each image to REGISTRY/NAME:TAG, digests preserved, and pins
// REGISTRY/NAME:TAG@DIGEST in the chart's and the Cozystack package's values
// (package hack/image/push).
//
//	go run ./hack/image push -registry REGISTRY [-tag 0.1.0] [-in bin/images] [-values FILE[=PREFIX]]... [-dry-run]
package main

import (
	"flag"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/cozystack/cozy-health/deploy"
	"github.com/cozystack/cozy-health/hack/image/oci"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "push" {
		os.Exit(pushMain(os.Args[2:]))
	}
	var o oci.Options
	flag.StringVar(&o.Out, "out", "bin/images", "output directory")
	flag.StringVar(&o.Registry, "registry", oci.DefaultRegistry, "registry/namespace of the image references")
	flag.StringVar(&o.Tag, "tag", "", "image tag (default: the chart's appVersion, which the chart uses by default)")
	flag.StringVar(&o.Version, "version", "dev", "version linked into the binaries")
	flag.Parse()
	if o.Tag == "" {
		tag, err := chartAppVersion()
		if err != nil {
			fmt.Fprintf(os.Stderr, "image: %v\n", err)
			os.Exit(1)
		}
		o.Tag = tag
	}
	o.Epoch = time.Unix(0, 0).UTC()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "image: SOURCE_DATE_EPOCH %q: %v\n", s, err)
			os.Exit(1)
		}
		o.Epoch = time.Unix(sec, 0).UTC()
	}
	results, err := oci.Build(o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
	for _, r := range results {
		fmt.Printf("%s\n  ref     %s\n  digest  %s\n  archive %s (%s)\n", r.Name, r.Ref, r.Digest, r.Archive, mib(r.ArchiveBytes))
		for _, p := range sortedKeys(r.Platforms) {
			pi := r.Platforms[p]
			fmt.Printf("  linux/%-6s %s  pull %s, binary %s\n", p, pi.Digest, mib(pi.CompressedBytes), mib(pi.BinaryBytes))
		}
	}
	fmt.Printf("\npublish and pin: make push REGISTRY=%s (pushes both platforms, writes NAME:%s@DIGEST into the values)\n", o.Registry, o.Tag)
}

// chartAppVersion is the chart's appVersion: the tag the chart uses unless
// told otherwise.
func chartAppVersion() (string, error) {
	raw, err := fs.ReadFile(deploy.Chart(), "Chart.yaml")
	if err != nil {
		return "", fmt.Errorf("read Chart.yaml: %w", err)
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(raw, &c); err != nil || c.AppVersion == "" {
		return "", fmt.Errorf("Chart.yaml has no appVersion: %v", err)
	}
	return c.AppVersion, nil
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func sortedKeys(m map[string]oci.PlatformImage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
