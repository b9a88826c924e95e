// Package push publishes the images `make image` built (the OCI archives and
// images.json in bin/images) to a registry and pins them in the values
// files, as Cozystack's `make image` does for its own packages: every
// image's whole multi-platform index is pushed as it is (its digest and its
// per-platform manifests' digests unchanged), then REGISTRY/NAME:TAG@DIGEST
// is written into each values file under the image's key. Nothing is written
// unless every push succeeded and the registry serves each index under the
// digest that was built.
package push

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Keys maps an image to its reference's key in the chart's values (under a
// values file's prefix): one string, REGISTRY/NAME:TAG@DIGEST.
var Keys = map[string]string{
	"cozy-health-agent":      "agent.image",
	"cozy-health-aggregator": "aggregator.image",
}

// ValuesFile is a values file and the prefix of the image keys in it: ""
// for the chart's own values.yaml, "cozy-health." for a wrapper chart that
// carries the chart under that name.
type ValuesFile struct {
	Path, Prefix string
}

// Options of one push.
type Options struct {
	// Images is the directory `make image` wrote (images.json and the
	// archives).
	Images string
	// Registry is REGISTRY[/NAMESPACE...]: images go to REGISTRY/NAME:TAG.
	Registry string
	Tag      string
	// Values are the files to pin the pushed references in.
	Values []ValuesFile
	// DryRun writes the values with the references the push would make,
	// without pushing (the digests do not depend on the registry).
	DryRun bool
	// Remote are options for every registry call (auth, transport).
	Remote []remote.Option
}

// Pushed is one pushed image.
type Pushed struct {
	Name string
	// Ref is REGISTRY/NAME:TAG@DIGEST, what the values now say.
	Ref string
	// Digest is the index's digest; Platforms its manifests' digests by
	// architecture, as the registry serves them.
	Digest    string
	Platforms map[string]string
}

// built is the part of an images.json entry (hack/image's Result) read here.
type built struct {
	Name    string `json:"name"`
	Digest  string `json:"digest"`
	Archive string `json:"archive"`
}

// Push pushes every image images.json lists, then writes the values files.
func Push(ctx context.Context, o Options) ([]Pushed, error) {
	if o.Registry == "" || o.Tag == "" {
		return nil, errors.New("push: a registry and a tag are required")
	}
	raw, err := os.ReadFile(filepath.Join(o.Images, "images.json"))
	if err != nil {
		return nil, fmt.Errorf("read the images `make image` wrote: %w", err)
	}
	var images []built
	if err := json.Unmarshal(raw, &images); err != nil {
		return nil, fmt.Errorf("decode %s: %w", filepath.Join(o.Images, "images.json"), err)
	}
	if len(images) == 0 {
		return nil, fmt.Errorf("%s lists no image", filepath.Join(o.Images, "images.json"))
	}
	var out []Pushed
	for _, b := range images {
		if _, ok := Keys[b.Name]; !ok {
			return nil, fmt.Errorf("%s: image %q has no values key", filepath.Join(o.Images, "images.json"), b.Name)
		}
		p, err := pushOne(ctx, o, b)
		if err != nil {
			return nil, fmt.Errorf("push %s: %w", b.Name, err)
		}
		out = append(out, p)
	}
	refs := map[string]string{}
	for _, p := range out {
		refs[Keys[p.Name]] = p.Ref
	}
	// Every file is edited in memory first: one that cannot take the
	// references leaves all of them as they were.
	edited := make([][]byte, len(o.Values))
	for i, vf := range o.Values {
		set := map[string]string{}
		for k, ref := range refs {
			set[vf.Prefix+k] = ref
		}
		src, err := os.ReadFile(vf.Path)
		if err != nil {
			return out, fmt.Errorf("read values: %w", err)
		}
		if edited[i], err = setValues(src, set); err != nil {
			return out, fmt.Errorf("values file %s: %w", vf.Path, err)
		}
	}
	for i, vf := range o.Values {
		if err := writeFile(vf.Path, edited[i]); err != nil {
			return out, err
		}
	}
	return out, nil
}

func pushOne(ctx context.Context, o Options, b built) (Pushed, error) {
	p := Pushed{Name: b.Name, Platforms: map[string]string{}}
	tag, err := name.NewTag(fmt.Sprintf("%s/%s:%s", o.Registry, b.Name, o.Tag), name.StrictValidation)
	if err != nil {
		return p, fmt.Errorf("image reference: %w", err)
	}
	idx, cleanup, err := loadIndex(filepath.Join(o.Images, filepath.Base(b.Archive)))
	if err != nil {
		return p, err
	}
	defer cleanup()
	d, err := idx.Digest()
	if err != nil {
		return p, err
	}
	if d.String() != b.Digest {
		return p, fmt.Errorf("the archive's index is %s, images.json says %s: run `make image` again", d, b.Digest)
	}
	p.Digest = d.String()
	p.Ref = tag.String() + "@" + p.Digest
	im, err := idx.IndexManifest()
	if err != nil {
		return p, err
	}
	for _, m := range im.Manifests {
		if m.Platform != nil {
			p.Platforms[m.Platform.Architecture] = m.Digest.String()
		}
	}
	if o.DryRun {
		return p, nil
	}
	opts := append([]remote.Option{remote.WithContext(ctx)}, o.Remote...)
	if err := remote.WriteIndex(tag, idx, opts...); err != nil {
		return p, fmt.Errorf("write index to %s: %w", tag, err)
	}
	// What the registry serves under the tag is what was built: the index
	// and every platform's manifest, byte for byte (digests preserved).
	got, err := remote.Index(tag, opts...)
	if err != nil {
		return p, fmt.Errorf("read back %s: %w", tag, err)
	}
	gd, err := got.Digest()
	if err != nil {
		return p, err
	}
	if gd != d {
		return p, fmt.Errorf("%s serves index %s, pushed %s", tag, gd, d)
	}
	gm, err := got.IndexManifest()
	if err != nil {
		return p, err
	}
	for _, m := range gm.Manifests {
		if m.Platform == nil || p.Platforms[m.Platform.Architecture] != m.Digest.String() {
			return p, fmt.Errorf("%s serves manifest %s for %v, not what was built", tag, m.Digest, m.Platform)
		}
	}
	if len(gm.Manifests) != len(p.Platforms) {
		return p, fmt.Errorf("%s serves %d manifests, pushed %d", tag, len(gm.Manifests), len(p.Platforms))
	}
	return p, nil
}

// LoadIndex is loadIndex for other tools (a test that rewrites the images
// `make image` wrote); cleanup removes the extracted layout.
func LoadIndex(archive string) (idx v1.ImageIndex, cleanup func(), err error) {
	return loadIndex(archive)
}

// loadIndex reads the multi-platform index out of an OCI layout archive
// that hack/image wrote (the layout's index.json names exactly that index).
func loadIndex(archive string) (v1.ImageIndex, func(), error) {
	dir, err := os.MkdirTemp("", "cozy-health-push-")
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	if err := untar(archive, dir); err != nil {
		cleanup()
		return nil, nil, err
	}
	lp, err := layout.FromPath(dir)
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("%s is not an OCI layout: %w", archive, err)
	}
	outer, err := lp.ImageIndex()
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("%s: %w", archive, err)
	}
	om, err := outer.IndexManifest()
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("%s: %w", archive, err)
	}
	if len(om.Manifests) != 1 || (om.Manifests[0].MediaType != types.OCIImageIndex && om.Manifests[0].MediaType != types.DockerManifestList) {
		cleanup()
		return nil, nil, fmt.Errorf("%s: want one multi-platform index in the layout, found %d entries", archive, len(om.Manifests))
	}
	idx, err := outer.ImageIndex(om.Manifests[0].Digest)
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("%s: %w", archive, err)
	}
	return idx, cleanup, nil
}

// untar extracts the regular files and directories of archive into dir.
func untar(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return fmt.Errorf("open image archive: %w", err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", archive, err)
		}
		rel := filepath.Clean(h.Name)
		if filepath.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
			return fmt.Errorf("read %s: entry %q leaves the archive", archive, h.Name)
		}
		p := filepath.Join(dir, rel)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			out, err := os.Create(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("extract %s: %w", h.Name, err)
			}
		default:
			return fmt.Errorf("read %s: entry %q is neither a file nor a directory", archive, h.Name)
		}
	}
}
