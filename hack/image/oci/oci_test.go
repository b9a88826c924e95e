package oci

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// untar extracts archive into dir.
func untar(t *testing.T, archive, dir string) {
	t.Helper()
	f, err := os.Open(archive)
	require.NoError(t, err)
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		require.NoError(t, err)
		p := filepath.Join(dir, h.Name)
		if h.Typeflag == tar.TypeDir {
			require.NoError(t, os.MkdirAll(p, 0o755))
			continue
		}
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(p, b, 0o644))
	}
}

// The same sources give the same image, byte for byte, wherever they are
// built; the archive is an OCI layout that containerd imports under the
// chart's reference; the image is a static binary on an empty base.
func TestImageIsReproducibleAndImportable(t *testing.T) {
	src, err := filepath.Abs("../../..")
	require.NoError(t, err)
	agent := []Program{Programs[0]}
	build := func() Result {
		o := Options{Out: t.TempDir(), Registry: DefaultRegistry, Tag: "0.1.0", Version: "test", Epoch: time.Unix(0, 0).UTC(),
			Programs: agent, Platforms: []string{"amd64"}, Source: src}
		rs, err := Build(o)
		require.NoError(t, err)
		require.Len(t, rs, 1)
		return rs[0]
	}
	a, b := build(), build()
	assert.Equal(t, a.Digest, b.Digest, "same sources, same digest")
	assert.Equal(t, a.Platforms, b.Platforms)
	ab, err := os.ReadFile(a.Archive)
	require.NoError(t, err)
	bb, err := os.ReadFile(b.Archive)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(ab, bb), "same archive bytes")

	dir := t.TempDir()
	untar(t, a.Archive, dir)
	var top v1.IndexManifest
	raw, err := os.ReadFile(filepath.Join(dir, "index.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &top))
	require.Len(t, top.Manifests, 1)
	assert.Equal(t, "ghcr.io/cozystack/cozystack/cozy-health-agent:0.1.0", top.Manifests[0].Annotations["io.containerd.image.name"])
	assert.Equal(t, a.Digest, top.Manifests[0].Digest.String())
	_, err = os.Stat(filepath.Join(dir, "oci-layout"))
	require.NoError(t, err)

	lp, err := layout.FromPath(dir)
	require.NoError(t, err)
	ii, err := lp.ImageIndex()
	require.NoError(t, err)
	outer, err := ii.IndexManifest()
	require.NoError(t, err)
	idx, err := ii.ImageIndex(outer.Manifests[0].Digest)
	require.NoError(t, err)
	im, err := idx.IndexManifest()
	require.NoError(t, err)
	require.Len(t, im.Manifests, 1)
	assert.Equal(t, "amd64", im.Manifests[0].Platform.Architecture)
	img, err := idx.Image(im.Manifests[0].Digest)
	require.NoError(t, err)
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, []string{"/usr/bin/cozy-health-agent"}, cf.Config.Entrypoint)
	assert.Equal(t, "0:0", cf.Config.User)
	assert.True(t, cf.Created.Time.Equal(time.Unix(0, 0)), "fixed creation time: %s", cf.Created)

	layers, err := img.Layers()
	require.NoError(t, err)
	require.Len(t, layers, 1)
	rc, err := layers[0].Uncompressed()
	require.NoError(t, err)
	defer rc.Close()
	tr := tar.NewReader(rc)
	files := map[string]*tar.Header{}
	var bin []byte
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		files[h.Name] = h
		assert.True(t, h.ModTime.Equal(time.Unix(0, 0)), "%s mtime %s", h.Name, h.ModTime)
		if h.Name == "usr/bin/cozy-health-agent" {
			bin, err = io.ReadAll(tr)
			require.NoError(t, err)
		}
	}
	require.Contains(t, files, "usr/bin/cozy-health-agent")
	assert.EqualValues(t, 0o755, files["usr/bin/cozy-health-agent"].Mode)
	assert.Contains(t, files, "etc/passwd")
	e, err := elf.NewFile(bytes.NewReader(bin))
	require.NoError(t, err)
	assert.Equal(t, elf.EM_X86_64, e.Machine)
	for _, p := range e.Progs {
		assert.NotEqual(t, elf.PT_INTERP, p.Type, "a static binary: nothing to load it in a scratch image")
	}
	libs, err := e.ImportedLibraries()
	require.NoError(t, err)
	assert.Empty(t, libs)
}
