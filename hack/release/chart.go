package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/registry"

	"github.com/cozystack/cozy-health/deploy/render"
)

// chartVersion is the chart's version for a release VERSION: SemVer 2 as
// Helm requires of a chart pushed to an OCI registry, without the "v" of a
// git tag (v0.0.1-test -> 0.0.1-test).
func chartVersion(version string) (string, error) {
	v, err := semver.StrictNewVersion(strings.TrimPrefix(version, "v"))
	if err != nil {
		return "", fmt.Errorf("VERSION %q is not vMAJOR.MINOR.PATCH[-PRE][+BUILD] (Helm needs SemVer for the chart): %w", version, err)
	}
	return v.String(), nil
}

// packageChart packages the chart in dir (a copy whose values carry the
// pinned images) at version, appVersion the release VERSION (the images'
// tag), as `helm package` does (chartutil.Save), with every entry's time set
// to epoch so the same sources give the same archive.
func packageChart(dir, version, appVersion string, epoch time.Time) ([]byte, error) {
	ch, err := render.LoadChartFS(os.DirFS(dir))
	if err != nil {
		return nil, err
	}
	ch.Metadata.Version, ch.Metadata.AppVersion = version, appVersion
	tmp, err := os.MkdirTemp("", "cozy-health-chart-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	path, err := chartutil.Save(ch, tmp)
	if err != nil {
		return nil, fmt.Errorf("package chart: %w", err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return retime(raw, epoch)
}

// retime rewrites a gzipped tar with every entry's modification time at
// epoch (chartutil.Save stamps the time of packaging); the gzip header
// (Helm's extra field and comment) and the entries stay as they were.
func retime(tgz []byte, epoch time.Time) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, fmt.Errorf("chart archive: %w", err)
	}
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	zw.Header = zr.Header
	tr, tw := tar.NewReader(zr), tar.NewWriter(zw)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("chart archive: %w", err)
		}
		h.ModTime = epoch
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// pushChart pushes a packaged chart as `helm push CHART.tgz oci://REPO`
// does (Helm's registry client: its config and chart media types, the
// org.opencontainers.image.* annotations from Chart.yaml) to
// REPO/NAME:VERSION and returns the manifest's digest. Credentials are
// Helm's registry config with Docker's as fallback, as for helm push.
func pushChart(data []byte, repo, chartName, version string, plainHTTP bool, created time.Time) (string, error) {
	opts := []registry.ClientOption{registry.ClientOptWriter(io.Discard)}
	if plainHTTP {
		opts = append(opts, registry.ClientOptPlainHTTP())
	}
	c, err := registry.NewClient(opts...)
	if err != nil {
		return "", fmt.Errorf("helm registry client: %w", err)
	}
	ref := fmt.Sprintf("%s/%s:%s", repo, chartName, version)
	res, err := c.Push(data, ref, registry.PushOptStrictMode(true), registry.PushOptCreationTime(created.UTC().Format(time.RFC3339)))
	if err != nil {
		return "", fmt.Errorf("helm push %s: %w", ref, err)
	}
	return res.Manifest.Digest, nil
}
