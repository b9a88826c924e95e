package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/chart/loader"
	helmregistry "helm.sh/helm/v3/pkg/registry"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/cozy-health/deploy/render"
	"github.com/cozystack/cozy-health/hack/image/oci"
)

// startRegistry serves go-containerregistry's registry on 127.0.0.1 and
// returns its host:port.
func startRegistry(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// writeImages writes images.json and the archives in the shape `make image`
// writes them (hack/image/oci.WriteArchive), around small stand-in
// binaries, and returns the directory.
func writeImages(t *testing.T) string {
	t.Helper()
	dir, bins := t.TempDir(), t.TempDir()
	var results []oci.Result
	for _, p := range oci.Programs {
		binaries := map[string]string{}
		for _, arch := range oci.Platforms {
			path := filepath.Join(bins, p.Name+"-"+arch)
			require.NoError(t, os.WriteFile(path, []byte("#!"+p.Name+" "+arch), 0o755))
			binaries[arch] = path
		}
		r, err := oci.WriteArchive(filepath.Join(dir, p.Name+".oci.tar"), oci.DefaultRegistry+"/"+p.Name+":0.1.0", p, "test", binaries, time.Unix(0, 0))
		require.NoError(t, err)
		results = append(results, r)
	}
	b, err := json.Marshal(results)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "images.json"), b, 0o644))
	return dir
}

func release(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := runMain(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// untgz reads a gzipped tar into name -> header and contents.
func untgz(t *testing.T, data []byte) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(data))
	require.NoError(t, err)
	tr := tar.NewReader(zr)
	headers, files := map[string]*tar.Header{}, map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return headers, files
		}
		require.NoError(t, err)
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		headers[h.Name], files[h.Name] = h, b
	}
}

func TestRelease(t *testing.T) {
	reg := startRegistry(t)
	images := writeImages(t)
	out := t.TempDir()
	registryArg := reg + "/cozy"
	code, stdout, stderr := release(t, "-in", images, "-registry", registryArg, "-version", "v0.0.1-test", "-out", out)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)

	// release.json: what hack/sign reads.
	raw, err := os.ReadFile(filepath.Join(out, "release.json"))
	require.NoError(t, err)
	var generic map[string]any
	require.NoError(t, json.Unmarshal(raw, &generic))
	for _, k := range []string{"version", "registry", "images", "chart", "package"} {
		assert.Contains(t, generic, k)
	}
	var rel Release
	require.NoError(t, json.Unmarshal(raw, &rel))
	assert.Equal(t, "v0.0.1-test", rel.Version)
	assert.Equal(t, registryArg, rel.Registry)
	require.Len(t, rel.Images, 2)
	opts := []remote.Option{}
	refs := map[string]string{}
	for _, im := range rel.Images {
		assert.Equal(t, registryArg+"/"+im.Name+":v0.0.1-test@"+im.Digest, im.Ref)
		d, err := name.NewDigest(im.Ref)
		require.NoError(t, err)
		idx, err := remote.Index(d, opts...)
		require.NoError(t, err, "the registry serves %s", im.Ref)
		got, err := idx.Digest()
		require.NoError(t, err)
		assert.Equal(t, im.Digest, got.String())
		refs[im.Name] = im.Ref
	}
	assert.Equal(t, "0.0.1-test", rel.Chart.Version)
	assert.Equal(t, registryArg+"/cozy-health:0.0.1-test@"+rel.Chart.Digest, rel.Chart.Ref)
	assert.Equal(t, registryArg+"/cozy-health-package:v0.0.1-test@"+rel.Package.Digest, rel.Package.Ref)

	// The chart, as helm pulls it: Helm's media types, the images pinned by
	// digest in its values, its version and appVersion the release's.
	hc, err := helmregistry.NewClient(helmregistry.ClientOptPlainHTTP())
	require.NoError(t, err)
	pulled, err := hc.Pull(registryArg + "/cozy-health:0.0.1-test")
	require.NoError(t, err)
	assert.Equal(t, rel.Chart.Digest, pulled.Manifest.Digest)
	ch, err := loader.LoadArchive(bytes.NewReader(pulled.Chart.Data))
	require.NoError(t, err)
	assert.Equal(t, "0.0.1-test", ch.Metadata.Version)
	assert.Equal(t, "v0.0.1-test", ch.Metadata.AppVersion)
	assert.Equal(t, refs["cozy-health-agent"], ch.Values["agent"].(map[string]any)["image"])
	assert.Equal(t, refs["cozy-health-aggregator"], ch.Values["aggregator"].(map[string]any)["image"])
	cd, err := name.NewDigest(rel.Chart.Ref)
	require.NoError(t, err)
	cm, err := remote.Image(cd)
	require.NoError(t, err)
	m, err := cm.Manifest()
	require.NoError(t, err)
	assert.Equal(t, types.MediaType(helmregistry.ConfigMediaType), m.Config.MediaType)
	require.Len(t, m.Layers, 1)
	assert.Equal(t, types.MediaType(helmregistry.ChartLayerMediaType), m.Layers[0].MediaType)
	assert.Equal(t, "1970-01-01T00:00:00Z", m.Annotations["org.opencontainers.image.created"])
	// The archive written beside it is the pushed one, every entry at the
	// epoch (reproducible).
	tgz, err := os.ReadFile(filepath.Join(out, "cozy-health-0.0.1-test.tgz"))
	require.NoError(t, err)
	assert.Equal(t, pulled.Chart.Data, tgz)
	headers, _ := untgz(t, tgz)
	for n, h := range headers {
		assert.True(t, h.ModTime.Equal(time.Unix(0, 0)), "%s at %s", n, h.ModTime)
	}

	// The package: Flux's artifact format, the wrapper's values pinned.
	pd, err := name.NewDigest(rel.Package.Ref)
	require.NoError(t, err)
	art, err := remote.Image(pd)
	require.NoError(t, err)
	pm, err := art.Manifest()
	require.NoError(t, err)
	assert.Equal(t, types.OCIManifestSchema1, pm.MediaType)
	assert.Equal(t, types.MediaType("application/vnd.cncf.flux.config.v1+json"), pm.Config.MediaType)
	require.Len(t, pm.Layers, 1)
	assert.Equal(t, types.MediaType("application/vnd.cncf.flux.content.v1.tar+gzip"), pm.Layers[0].MediaType)
	assert.Equal(t, "https://github.com/cozystack/cozy-health", pm.Annotations["org.opencontainers.image.source"])
	assert.True(t, strings.HasPrefix(pm.Annotations["org.opencontainers.image.revision"], "v0.0.1-test"), pm.Annotations)
	assert.Equal(t, "1970-01-01T00:00:00Z", pm.Annotations["org.opencontainers.image.created"])
	layers, err := art.Layers()
	require.NoError(t, err)
	rc, err := layers[0].Compressed()
	require.NoError(t, err)
	layerData, err := io.ReadAll(rc)
	require.NoError(t, err)
	pheaders, pfiles := untgz(t, layerData)
	for _, n := range []string{".", "system/cozy-health/Chart.yaml", "system/cozy-health/values.yaml", "library/cozy-health/Chart.yaml", "library/cozy-health/templates"} {
		assert.Contains(t, pheaders, n)
	}
	// Every path the PackageSource reads from its source is there.
	ps, err := render.LoadPackageSource()
	require.NoError(t, err)
	for _, v := range ps.Spec.Variants {
		for _, c := range v.Components {
			assert.Contains(t, pfiles, c.Path+"/Chart.yaml", "component %s", c.Name)
		}
		for _, l := range v.Libraries {
			assert.Contains(t, pfiles, l.Path+"/Chart.yaml", "library %s", l.Name)
		}
	}
	for n, h := range pheaders {
		assert.Zero(t, h.Uid, n)
		assert.Empty(t, h.Uname, n)
		assert.True(t, h.ModTime.Equal(time.Unix(0, 0)), "%s at %s", n, h.ModTime)
	}
	var wrapper map[string]any
	require.NoError(t, yaml.Unmarshal(pfiles["system/cozy-health/values.yaml"], &wrapper))
	sub := wrapper["cozy-health"].(map[string]any)
	assert.Equal(t, refs["cozy-health-agent"], sub["agent"].(map[string]any)["image"])
	assert.Equal(t, refs["cozy-health-aggregator"], sub["aggregator"].(map[string]any)["image"])
	var library map[string]any
	require.NoError(t, yaml.Unmarshal(pfiles["library/cozy-health/values.yaml"], &library))
	assert.Equal(t, refs["cozy-health-agent"], library["agent"].(map[string]any)["image"])

	// The Flux objects name exactly what was pushed; plain HTTP on loopback.
	objs := readObjects(t, filepath.Join(out, "flux", "cozy-health.yaml"))
	require.Len(t, objs, 3)
	assert.Equal(t, "Namespace", objs[0]["kind"])
	repo := objs[1]
	assert.Equal(t, "OCIRepository", repo["kind"])
	spec := repo["spec"].(map[string]any)
	assert.Equal(t, "oci://"+registryArg+"/cozy-health", spec["url"])
	assert.Equal(t, map[string]any{"tag": "0.0.1-test", "digest": rel.Chart.Digest}, spec["ref"])
	assert.Equal(t, true, spec["insecure"])
	assert.Equal(t, helmregistry.ChartLayerMediaType, spec["layerSelector"].(map[string]any)["mediaType"])
	assert.NotContains(t, spec, "secretRef")
	hr := objs[2]
	assert.Equal(t, "HelmRelease", hr["kind"])
	assert.Equal(t, map[string]any{"kind": "OCIRepository", "name": "cozy-health"}, hr["spec"].(map[string]any)["chartRef"])
	assert.Equal(t, map[string]any{
		"agent":      map[string]any{"image": refs["cozy-health-agent"]},
		"aggregator": map[string]any{"image": refs["cozy-health-aggregator"]},
	}, hr["spec"].(map[string]any)["values"], "the HelmRelease names the release's images")
	pobjs := readObjects(t, filepath.Join(out, "flux", "cozystack-package.yaml"))
	require.Len(t, pobjs, 3)
	pspec := pobjs[0]["spec"].(map[string]any)
	assert.Equal(t, "oci://"+registryArg+"/cozy-health-package", pspec["url"])
	assert.Equal(t, rel.Package.Digest, pspec["ref"].(map[string]any)["digest"])
	assert.Equal(t, "PackageSource", pobjs[1]["kind"])
	assert.Equal(t, map[string]any{"kind": "OCIRepository", "name": "cozy-health-package", "namespace": "cozy-system", "path": "/"}, pobjs[1]["spec"].(map[string]any)["sourceRef"])
	assert.Equal(t, "Package", pobjs[2]["kind"])
	assert.Equal(t, "cozystack.cozy-health", pobjs[2]["metadata"].(map[string]any)["name"])

	// The two commands the user runs next.
	assert.Contains(t, stdout, "  kubectl apply --server-side -f "+filepath.Join(out, "flux", "cozy-health.yaml")+"\n")
	assert.Contains(t, stdout, "  kubectl -n cozy-health wait helmrelease/cozy-health --for=condition=Ready --timeout=10m\n")

	// The same sources give the same digests.
	out2 := t.TempDir()
	code, stdout, stderr = release(t, "-in", images, "-registry", registryArg, "-version", "v0.0.1-test", "-out", out2)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	raw2, err := os.ReadFile(filepath.Join(out2, "release.json"))
	require.NoError(t, err)
	assert.JSONEq(t, string(raw), string(raw2), "a second release of the same sources")
}

func readObjects(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []map[string]any
	for _, d := range strings.Split(string(b), "\n---\n") {
		var o map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(d), &o))
		if len(o) > 0 {
			out = append(out, o)
		}
	}
	return out
}

// A private registry: the Secret named by -pull-secret is the
// OCIRepositories' secretRef and the chart's image.pullSecrets, in both
// files; a registry off loopback is not insecure.
func TestPullSecret(t *testing.T) {
	o := objects{
		Registry: "registry.example.com/cozy", PullSecret: "regcred", Images: map[string]string{"agent.image": "a@sha256:cc"},
		Chart:   artifactRef{Repo: "registry.example.com/cozy/cozy-health", Tag: "1.0.0", Digest: "sha256:aa"},
		Package: artifactRef{Repo: "registry.example.com/cozy/cozy-health-package", Tag: "v1.0.0", Digest: "sha256:bb"},
	}
	dir := t.TempDir()
	hf, err := o.helmFile()
	require.NoError(t, err)
	pf, err := o.packageFile()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "h.yaml"), []byte(hf), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(pf), 0o644))
	h, p := readObjects(t, filepath.Join(dir, "h.yaml")), readObjects(t, filepath.Join(dir, "p.yaml"))
	secretValues := map[string]any{"image": map[string]any{"pullSecrets": []any{map[string]any{"name": "regcred"}}}}
	assert.Equal(t, map[string]any{"name": "regcred"}, h[1]["spec"].(map[string]any)["secretRef"])
	assert.NotContains(t, h[1]["spec"], "insecure")
	assert.Equal(t, map[string]any{"image": secretValues["image"], "agent": map[string]any{"image": "a@sha256:cc"}}, h[2]["spec"].(map[string]any)["values"])
	assert.Equal(t, map[string]any{"name": "regcred"}, p[0]["spec"].(map[string]any)["secretRef"])
	assert.Equal(t, map[string]any{"cozy-health": map[string]any{"values": map[string]any{"cozy-health": secretValues}}}, p[2]["spec"].(map[string]any)["components"])
}

// Bad input is refused before anything is pushed, with what to do.
func TestRefused(t *testing.T) {
	images := writeImages(t)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-registry", "127.0.0.1:1/x", "-version", "v1.0.0", "-bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"-registry", "127.0.0.1:1/x", "-version", "v1.0.0", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"-version", "v1.0.0"}, 2, "-registry and -version are required"},
		{[]string{"-registry", "127.0.0.1:1/x", "-version", "5c81e1c-dirty", "-in", images}, 1, `VERSION "5c81e1c-dirty" is not vMAJOR.MINOR.PATCH`},
		{[]string{"-registry", "127.0.0.1:1/UPPER", "-version", "v1.0.0", "-in", images}, 1, `REGISTRY "127.0.0.1:1/UPPER"`},
		{[]string{"-registry", "127.0.0.1:1/x", "-version", "v1.0.0", "-in", t.TempDir()}, 1, "read the images `make image` wrote"},
	} {
		code, _, stderr := release(t, append(c.args, "-out", t.TempDir())...)
		assert.Equal(t, c.code, code, "%v: %s", c.args, stderr)
		assert.Contains(t, stderr, c.want, "%v", c.args)
	}
}

func TestLoopback(t *testing.T) {
	for reg, want := range map[string]bool{
		"127.0.0.1:5000/cozy": true, "localhost:5000": true, "127.1.2.3/x": true, "[::1]:5000/x": true,
		"ghcr.io/cozystack/cozystack": false, "10.0.0.1:5000/cozy": false, "localhost.example.com/x": false,
	} {
		assert.Equal(t, want, loopback(reg), reg)
	}
}
