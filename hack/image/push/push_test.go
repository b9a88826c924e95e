package push

import (
	"archive/tar"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	yaml "go.yaml.in/yaml/v3"

	"github.com/cozystack/cozy-health/deploy/render"
	"github.com/cozystack/cozy-health/test/harness"
)

// writeImages writes images.json and one OCI layout archive per image in
// the shape hack/image writes them (the layout's index.json names one
// amd64+arm64 index, annotated with its reference), and returns each
// image's index.
func writeImages(t *testing.T, dir string) map[string]v1.ImageIndex {
	t.Helper()
	out := map[string]v1.ImageIndex{}
	var list []built
	for _, n := range []string{"cozy-health-agent", "cozy-health-aggregator"} {
		idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
		for _, arch := range []string{"amd64", "arm64"} {
			img, err := random.Image(512, 1)
			require.NoError(t, err)
			idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
		}
		lp, err := layout.Write(filepath.Join(t.TempDir(), n), empty.Index)
		require.NoError(t, err)
		require.NoError(t, lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{"io.containerd.image.name": "ghcr.io/cozystack/cozystack/" + n + ":0.1.0"})))
		archive := filepath.Join(dir, n+".oci.tar")
		tarDir(t, string(lp), archive)
		d, err := idx.Digest()
		require.NoError(t, err)
		list = append(list, built{Name: n, Digest: d.String(), Archive: "bin/images/" + n + ".oci.tar"})
		out[n] = idx
	}
	b, err := json.Marshal(list)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "images.json"), b, 0o644))
	return out
}

func tarDir(t *testing.T, dir, archive string) {
	t.Helper()
	f, err := os.Create(archive)
	require.NoError(t, err)
	defer f.Close()
	tw := tar.NewWriter(f)
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: rel + "/", Mode: 0o755})
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: 0o644, Size: int64(len(b))}); err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	}))
	require.NoError(t, tw.Close())
}

// loopbackRegistry serves go-containerregistry's registry on 127.0.0.1 and
// counts the requests it gets.
func loopbackRegistry(t *testing.T) (host string, requests func() []string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path)
		mu.Unlock()
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// valuesCopies copies the chart's and the Cozystack package's values files.
func valuesCopies(t *testing.T) (chart, pkg string) {
	t.Helper()
	dir := t.TempDir()
	chart, pkg = filepath.Join(dir, "chart-values.yaml"), filepath.Join(dir, "package-values.yaml")
	for src, dst := range map[string]string{
		filepath.Join(harness.RepoRoot(), "deploy/charts/cozy-health/values.yaml"):                    chart,
		filepath.Join(harness.RepoRoot(), "deploy/cozystack/packages/system/cozy-health/values.yaml"): pkg,
	} {
		b, err := os.ReadFile(src)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(dst, b, 0o644))
	}
	return chart, pkg
}

func readValues(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var v map[string]any
	require.NoError(t, yaml.Unmarshal(b, &v))
	return v
}

// changedLines are the lines of b that differ from a (same line count).
func changedLines(t *testing.T, a, b string) []string {
	t.Helper()
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	require.Equal(t, len(al), len(bl), "line count kept")
	var out []string
	for i := range al {
		if al[i] != bl[i] {
			out = append(out, strings.TrimSpace(bl[i]))
		}
	}
	return out
}

// `make push` pushes each image's whole index to a registry on loopback
// (go-containerregistry's registry, the one crane tests against): the
// registry serves the index and both platforms' manifests under the digests
// that were built, and REGISTRY/NAME:TAG@DIGEST lands in the chart's and the
// package's values, nothing else in them changing; the chart renders it.
func TestPushWholeIndexAndPinValues(t *testing.T) {
	images := t.TempDir()
	built := writeImages(t, images)
	host, requests := loopbackRegistry(t)
	chartValues, pkgValues := valuesCopies(t)
	chartBefore, _ := os.ReadFile(chartValues)
	pkgBefore, _ := os.ReadFile(pkgValues)

	reg := host + "/cozystack/cozystack"
	pushed, err := Push(context.Background(), Options{Images: images, Registry: reg, Tag: "0.1.0",
		Values: []ValuesFile{{Path: chartValues}, {Path: pkgValues, Prefix: "cozy-health."}}})
	require.NoError(t, err)
	require.Len(t, pushed, 2)
	for _, p := range pushed {
		want, err := built[p.Name].Digest()
		require.NoError(t, err)
		assert.Equal(t, reg+"/"+p.Name+":0.1.0@"+want.String(), p.Ref)

		// Pulled by digest, as a node does: the index and both platforms.
		ref, err := name.ParseReference(p.Ref)
		require.NoError(t, err)
		got, err := remote.Index(ref)
		require.NoError(t, err)
		gd, err := got.Digest()
		require.NoError(t, err)
		assert.Equal(t, want, gd)
		wm, err := built[p.Name].IndexManifest()
		require.NoError(t, err)
		gm, err := got.IndexManifest()
		require.NoError(t, err)
		require.Len(t, gm.Manifests, 2)
		for i, m := range gm.Manifests {
			assert.Equal(t, wm.Manifests[i].Digest, m.Digest)
			assert.Equal(t, wm.Manifests[i].Platform.Architecture, m.Platform.Architecture)
			img, err := got.Image(m.Digest)
			require.NoError(t, err)
			ls, err := img.Layers()
			require.NoError(t, err)
			rc, err := ls[0].Compressed()
			require.NoError(t, err, "the layer blob is in the registry")
			_, err = io.Copy(io.Discard, rc)
			require.NoError(t, err)
			rc.Close()
		}
	}

	chartAfter, _ := os.ReadFile(chartValues)
	pkgAfter, _ := os.ReadFile(pkgValues)
	agentRef, aggRef := pushed[0].Ref, pushed[1].Ref
	assert.ElementsMatch(t, []string{"image: " + agentRef, "image: " + aggRef}, changedLines(t, string(chartBefore), string(chartAfter)))
	assert.ElementsMatch(t, []string{"image: " + agentRef, "image: " + aggRef}, changedLines(t, string(pkgBefore), string(pkgAfter)))
	pv := readValues(t, pkgValues)["cozy-health"].(map[string]any)
	assert.Equal(t, agentRef, pv["agent"].(map[string]any)["image"])

	// The chart with the written values runs exactly those references.
	r, err := render.Render(render.Options{Values: readValues(t, chartValues)})
	require.NoError(t, err)
	ds, err := r.Object("DaemonSet", "cozy-health-agent")
	require.NoError(t, err)
	assert.Equal(t, agentRef, ds.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["image"])
	dep, err := r.Object("Deployment", "cozy-health-aggregator")
	require.NoError(t, err)
	assert.Equal(t, aggRef, dep.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["image"])

	// A dry run writes the same references and asks no registry.
	n := len(requests())
	chart2, pkg2 := valuesCopies(t)
	dry, err := Push(context.Background(), Options{Images: images, Registry: reg, Tag: "0.1.0", DryRun: true,
		Values: []ValuesFile{{Path: chart2}, {Path: pkg2, Prefix: "cozy-health."}}})
	require.NoError(t, err)
	assert.Equal(t, pushed[0].Ref, dry[0].Ref)
	assert.Len(t, requests(), n, "a dry run sends nothing")
	b, _ := os.ReadFile(chart2)
	assert.Equal(t, string(chartAfter), string(b))
}

// Bad input changes no values file: a registry that does not answer, an
// archive that is not what images.json says, a values file without the key.
func TestPushRefusesAndChangesNothing(t *testing.T) {
	images := t.TempDir()
	writeImages(t, images)
	host, _ := loopbackRegistry(t)

	unchanged := func(t *testing.T, files ...string) func() {
		before := map[string]string{}
		for _, f := range files {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			before[f] = string(b)
		}
		return func() {
			for _, f := range files {
				b, err := os.ReadFile(f)
				require.NoError(t, err)
				assert.Equal(t, before[f], string(b), "%s unchanged", f)
			}
		}
	}

	t.Run("registry not listening", func(t *testing.T) {
		chart, pkg := valuesCopies(t)
		check := unchanged(t, chart, pkg)
		l := httptest.NewServer(http.NotFoundHandler())
		closed := strings.TrimPrefix(l.URL, "http://")
		l.Close()
		_, err := Push(context.Background(), Options{Images: images, Registry: closed + "/x", Tag: "0.1.0", Values: []ValuesFile{{Path: chart}, {Path: pkg, Prefix: "cozy-health."}}})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "push cozy-health-agent")
		check()
	})
	t.Run("images.json digest differs from the archive", func(t *testing.T) {
		chart, _ := valuesCopies(t)
		check := unchanged(t, chart)
		var list []built
		b, _ := os.ReadFile(filepath.Join(images, "images.json"))
		require.NoError(t, json.Unmarshal(b, &list))
		list[1].Digest = "sha256:" + strings.Repeat("0", 64)
		stale := t.TempDir()
		for _, l := range list {
			a, _ := os.ReadFile(filepath.Join(images, filepath.Base(l.Archive)))
			require.NoError(t, os.WriteFile(filepath.Join(stale, filepath.Base(l.Archive)), a, 0o644))
		}
		b, _ = json.Marshal(list)
		require.NoError(t, os.WriteFile(filepath.Join(stale, "images.json"), b, 0o644))
		_, err := Push(context.Background(), Options{Images: stale, Registry: host + "/x", Tag: "0.1.0", Values: []ValuesFile{{Path: chart}}})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "run `make image` again")
		check()
	})
	t.Run("values file without the key: no file written", func(t *testing.T) {
		chart, pkg := valuesCopies(t)
		check := unchanged(t, chart, pkg)
		_, err := Push(context.Background(), Options{Images: images, Registry: host + "/x", Tag: "0.1.0", Values: []ValuesFile{{Path: chart}, {Path: pkg, Prefix: "wrong."}}})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "no key wrong")
		check()
	})
	t.Run("key holds a mapping", func(t *testing.T) {
		_, err := setValues([]byte("agent:\n  image:\n    digest: x\n"), map[string]string{"agent.image": "r/n:t"})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "agent.image is not a single-line string")
	})
}

// The in-place edit keeps quotes' content out, comments and flow mappings.
func TestSetValuesInPlace(t *testing.T) {
	src := "# head\nagent:\n  image: \"old:1\" # the agent\n  other: 1\n\nx: {image: 'a:b', y: 2}\n"
	out, err := setValues([]byte(src), map[string]string{"agent.image": "r.example/n:2@sha256:" + strings.Repeat("a", 64), "x.image": "r/n:3"})
	require.NoError(t, err)
	assert.Equal(t, "# head\nagent:\n  image: r.example/n:2@sha256:"+strings.Repeat("a", 64)+" # the agent\n  other: 1\n\nx: {image: r/n:3, y: 2}\n", string(out))
}
