// Command release publishes one cozy-health release into a registry (`make
// release REGISTRY=... VERSION=...`) and writes what a user applies:
//
//   - both multi-arch images `make image` wrote (bin/images), pushed whole as
//     `make push` does (hack/image/push: digests kept), to
//     REGISTRY/cozy-health-{agent,aggregator}:VERSION;
//   - the chart (deploy/charts/cozy-health), its values pinning those
//     images by digest, packaged and pushed as `helm push` does to
//     REGISTRY/cozy-health:CHART-VERSION (VERSION without its "v");
//   - the Cozystack package as a Flux OCI artifact (as `flux push artifact`
//     writes it) at REGISTRY/cozy-health-package:VERSION: every path the
//     PackageSource reads, laid out as Cozystack's packages tree (the
//     wrapper chart system/cozy-health and the other components from
//     deploy/cozystack, the chart as the library library/cozy-health), the
//     images pinned likewise;
//   - in -out: flux/cozy-health.yaml (Namespace, OCIRepository of the
//     chart, HelmRelease), flux/cozystack-package.yaml (OCIRepository of the
//     package, PackageSource, Package), the chart's .tgz and release.json
//     (what hack/sign signs).
//
// Tracked files are never changed: the chart and the package are copies.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cozystack/cozy-health/deploy"
	"github.com/cozystack/cozy-health/deploy/render"
	"github.com/cozystack/cozy-health/hack/image/push"
)

// Names in the registry, under REGISTRY.
const (
	chartName   = "cozy-health"
	packageRepo = "cozy-health-package"
	// source is org.opencontainers.image.source of the package artifact.
	source = "https://github.com/cozystack/cozy-health"
)

// Release is release.json. hack/sign reads it: keep the field names.
// Every ref is REPOSITORY:TAG@DIGEST; digest is the manifest's (an image's
// multi-platform index).
type Release struct {
	Version  string  `json:"version"`
	Registry string  `json:"registry"`
	Images   []Image `json:"images"`
	Chart    Chart   `json:"chart"`
	Package  Package `json:"package"`
}

// Image is one pushed image.
type Image struct {
	Name   string `json:"name"`
	Ref    string `json:"ref"`
	Digest string `json:"digest"`
}

// Chart is the pushed chart.
type Chart struct {
	Ref     string `json:"ref"`
	Version string `json:"version"`
	Digest  string `json:"digest"`
}

// Package is the pushed Cozystack package artifact.
type Package struct {
	Ref    string `json:"ref"`
	Digest string `json:"digest"`
}

// options of one release.
type options struct {
	In, Registry, Version, Out, PullSecret string
	// Epoch is every timestamp the release writes (the artifacts' created
	// annotations, the chart archive's entries).
	Epoch time.Time
	// Revision is the package artifact's org.opencontainers.image.revision.
	Revision string
	Remote   []remote.Option
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(runMain(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// runMain is the command: it returns the exit code.
func runMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("release", flag.ContinueOnError)
	flags.SetOutput(stderr)
	var o options
	flags.StringVar(&o.In, "in", "bin/images", "the directory make image wrote (images.json and the archives)")
	flags.StringVar(&o.Registry, "registry", "", "REGISTRY[/NAMESPACE] to publish into (required)")
	flags.StringVar(&o.Version, "version", "", "the release, vMAJOR.MINOR.PATCH[-PRE] (required): the images' and the package's tag; the chart's version without the v")
	flags.StringVar(&o.Out, "out", "", "where the Flux objects, the chart archive and release.json go (default bin/release/VERSION)")
	flags.StringVar(&o.PullSecret, "pull-secret", "", "name of a docker-registry Secret for a private registry: the OCIRepositories' secretRef and the chart's image.pullSecrets")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	if flags.NArg() > 0 {
		fmt.Fprintf(stderr, "release: unexpected argument %q (every input is a flag)\n", flags.Arg(0))
		return 2
	}
	if o.Registry == "" || o.Version == "" {
		fmt.Fprintln(stderr, "release: -registry and -version are required (make release REGISTRY=host[:port]/path VERSION=vX.Y.Z)")
		return 2
	}
	if o.Out == "" {
		o.Out = filepath.Join("bin", "release", o.Version)
	}
	epoch, err := sourceDateEpoch()
	if err != nil {
		fmt.Fprintf(stderr, "release: %v\n", err)
		return 2
	}
	o.Epoch = epoch
	o.Revision = o.Version
	if commit, err := exec.CommandContext(ctx, "git", "rev-parse", "HEAD").Output(); err == nil {
		o.Revision += "@sha1:" + strings.TrimSpace(string(commit))
	}
	// Credentials as docker, crane and helm keep them (~/.docker/config.json).
	o.Remote = []remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	start := time.Now()
	rel, err := run(ctx, o, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "release: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "\nreleased %s into %s in %s; %s\n", rel.Version, rel.Registry, time.Since(start).Round(time.Millisecond), filepath.Join(o.Out, "release.json"))
	helmFile := filepath.Join(o.Out, "flux", "cozy-health.yaml")
	fmt.Fprintf(stdout, "\nNext, on a cluster with Flux (source-controller, helm-controller):\n")
	fmt.Fprintf(stdout, "  kubectl apply --server-side -f %s\n", helmFile)
	fmt.Fprintf(stdout, "  kubectl -n %s wait helmrelease/%s --for=condition=Ready --timeout=10m\n", namespace, releaseName)
	fmt.Fprintf(stdout, "On Cozystack v1 apply %s instead of the first.\n", filepath.Join(o.Out, "flux", "cozystack-package.yaml"))
	return 0
}

// sourceDateEpoch is SOURCE_DATE_EPOCH, or the Unix epoch as `make image`.
func sourceDateEpoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
	}
	return time.Unix(sec, 0).UTC(), nil
}

// loopback reports whether registry (host[:port][/path]) is on this
// machine: such a registry is spoken to over plain HTTP (as
// go-containerregistry does for it by itself), and the OCIRepositories say
// insecure: true.
func loopback(registry string) bool {
	host, _, _ := strings.Cut(registry, "/")
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// run publishes the release and writes -out.
func run(ctx context.Context, o options, stdout io.Writer) (*Release, error) {
	cv, err := chartVersion(o.Version)
	if err != nil {
		return nil, err
	}
	if _, err := name.NewRepository(o.Registry+"/"+chartName, name.StrictValidation); err != nil {
		return nil, fmt.Errorf("REGISTRY %q: %w", o.Registry, err)
	}
	// OCI tags have no "+": Helm writes a chart's build metadata with "_"
	// in the tag, the images and the package follow it.
	tag := strings.ReplaceAll(o.Version, "+", "_")
	plain := loopback(o.Registry)

	work, err := os.MkdirTemp("", "cozy-health-release-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	chartDir := filepath.Join(work, "chart")
	pkgDir := filepath.Join(work, "package")
	if err := copyFS(chartDir, deploy.Chart()); err != nil {
		return nil, fmt.Errorf("copy the chart: %w", err)
	}
	if err := packageTree(pkgDir); err != nil {
		return nil, err
	}

	// The images, pinned by digest in the copies' values.
	pushed, err := push.Push(ctx, push.Options{
		Images: o.In, Registry: o.Registry, Tag: tag, Remote: o.Remote,
		Values: []push.ValuesFile{
			{Path: filepath.Join(chartDir, "values.yaml")},
			{Path: filepath.Join(pkgDir, filepath.FromSlash(render.LibraryPath), "values.yaml")},
			{Path: filepath.Join(pkgDir, "system", "cozy-health", "values.yaml"), Prefix: "cozy-health."},
		},
	})
	if err != nil {
		return nil, err
	}
	rel := &Release{Version: o.Version, Registry: o.Registry}
	imageKeys := map[string]string{}
	for _, p := range pushed {
		rel.Images = append(rel.Images, Image{Name: p.Name, Ref: p.Ref, Digest: p.Digest})
		imageKeys[push.Keys[p.Name]] = p.Ref
		fmt.Fprintf(stdout, "image   %s\n", p.Ref)
	}

	// The chart.
	tgz, err := packageChart(chartDir, cv, o.Version, o.Epoch)
	if err != nil {
		return nil, err
	}
	chartDigest, err := pushChart(tgz, o.Registry, chartName, cv, plain, o.Epoch)
	if err != nil {
		return nil, err
	}
	chartTag := strings.ReplaceAll(cv, "+", "_")
	rel.Chart = Chart{Ref: fmt.Sprintf("%s/%s:%s@%s", o.Registry, chartName, chartTag, chartDigest), Version: cv, Digest: chartDigest}
	fmt.Fprintf(stdout, "chart   %s (%d bytes)\n", rel.Chart.Ref, len(tgz))

	// The package artifact.
	art, err := fluxArtifact(pkgDir, source, o.Revision, o.Epoch)
	if err != nil {
		return nil, err
	}
	var nameOpts []name.Option
	if plain {
		nameOpts = append(nameOpts, name.Insecure)
	}
	pkgTag, err := name.NewTag(fmt.Sprintf("%s/%s:%s", o.Registry, packageRepo, tag), nameOpts...)
	if err != nil {
		return nil, fmt.Errorf("package reference: %w", err)
	}
	pkgDigest, err := pushImage(ctx, pkgTag, art, o.Remote)
	if err != nil {
		return nil, fmt.Errorf("push the package artifact: %w", err)
	}
	layers, err := art.Layers()
	if err != nil {
		return nil, err
	}
	layerSize, err := layers[0].Size()
	if err != nil {
		return nil, err
	}
	rel.Package = Package{Ref: pkgTag.String() + "@" + pkgDigest.String(), Digest: pkgDigest.String()}
	fmt.Fprintf(stdout, "package %s (%d bytes)\n", rel.Package.Ref, layerSize)

	// What the user applies, and release.json.
	objs := objects{
		Registry: o.Registry, Insecure: plain, PullSecret: o.PullSecret, Images: imageKeys,
		Chart:   artifactRef{Repo: o.Registry + "/" + chartName, Tag: chartTag, Digest: chartDigest},
		Package: artifactRef{Repo: o.Registry + "/" + packageRepo, Tag: tag, Digest: pkgDigest.String()},
	}
	helmFile, err := objs.helmFile()
	if err != nil {
		return nil, err
	}
	pkgFile, err := objs.packageFile()
	if err != nil {
		return nil, err
	}
	relJSON, err := json.MarshalIndent(rel, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(o.Out, "flux"), 0o755); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		path string
		data []byte
	}{
		{filepath.Join(o.Out, "flux", "cozy-health.yaml"), []byte(helmFile)},
		{filepath.Join(o.Out, "flux", "cozystack-package.yaml"), []byte(pkgFile)},
		{filepath.Join(o.Out, fmt.Sprintf("%s-%s.tgz", chartName, cv)), tgz},
		{filepath.Join(o.Out, "release.json"), append(relJSON, '\n')},
	} {
		if err := os.WriteFile(f.path, f.data, 0o644); err != nil {
			return nil, fmt.Errorf("write %s: %w", f.path, err)
		}
	}
	return rel, nil
}

// packageTree lays out in dir what the PackageSource (deploy/cozystack)
// reads from its source, as Cozystack's packages tree: every component's
// path and every library's, each from deploy/cozystack/packages, except the
// library render.LibraryPath, which is this repository's chart.
func packageTree(dir string) error {
	ps, err := render.LoadPackageSource()
	if err != nil {
		return err
	}
	paths := map[string]bool{}
	for _, v := range ps.Spec.Variants {
		for _, l := range v.Libraries {
			paths[l.Path] = true
		}
		for _, c := range v.Components {
			paths[c.Path] = true
		}
	}
	for p := range paths {
		clean := path.Clean(p)
		if clean == "." || path.IsAbs(clean) || strings.HasPrefix(clean, "../") {
			return fmt.Errorf("%s: path %q is not inside the packages tree", render.PackageSourceFile, p)
		}
		src := deploy.Chart()
		if clean != render.LibraryPath {
			if src, err = fs.Sub(deploy.Cozystack(), "packages/"+clean); err != nil {
				return err
			}
			if _, err := fs.Stat(src, "Chart.yaml"); err != nil {
				return fmt.Errorf("%s names %s, which deploy/cozystack/packages does not carry as a chart: %w", render.PackageSourceFile, p, err)
			}
		}
		if err := copyFS(filepath.Join(dir, filepath.FromSlash(clean)), src); err != nil {
			return fmt.Errorf("copy %s: %w", p, err)
		}
	}
	return nil
}

// copyFS copies src into dst: directories 0755, files 0644.
func copyFS(dst string, src fs.FS) error {
	return fs.WalkDir(src, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(dst, filepath.FromSlash(p))
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return errors.New(p + ": not a regular file")
		}
		data, err := fs.ReadFile(src, p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}
