package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The Flux OCI artifact format, as `flux push artifact` writes it: Flux
// CLI's push calls github.com/fluxcd/pkg/oci's Client.Push. Read from
// fluxcd/pkg/oci v0.57.0 (the version source-controller v1.7.3, the one the
// tests run, depends on): globals.go (the media types), constants.go and
// meta.go (the annotations), push.go (Push, createLayer) and build.go (the
// tarball).
const (
	// FluxConfigMediaType is fluxcd/pkg/oci's CanonicalConfigMediaType.
	FluxConfigMediaType types.MediaType = "application/vnd.cncf.flux.config.v1+json"
	// FluxContentMediaType is its CanonicalContentMediaType (the
	// CanonicalMediaTypePrefix and ".tar+gzip").
	FluxContentMediaType types.MediaType = "application/vnd.cncf.flux.content.v1.tar+gzip"

	annotationCreated  = "org.opencontainers.image.created"
	annotationSource   = "org.opencontainers.image.source"
	annotationRevision = "org.opencontainers.image.revision"
)

// fluxArtifact is one Flux OCI artifact: the gzipped tarball of a
// directory as fluxcd/pkg/oci's build writes it, in a one-layer OCI image
// whose config is empty.Image's with the layer appended and Flux's config
// media type, annotated with the source, revision and creation time
// (fluxcd/pkg/oci's Metadata). test/release's TestPackageArtifactIsFluxs
// checks that fluxcd/pkg/oci's Push gives the same digest.
func fluxArtifact(dir, source, revision string, created time.Time) (v1.Image, error) {
	tgz, err := os.CreateTemp("", "cozy-health-artifact-*.tgz")
	if err != nil {
		return nil, err
	}
	path := tgz.Name()
	tgz.Close()
	if err := fluxTarball(path, dir); err != nil {
		os.Remove(path)
		return nil, err
	}
	// The layer is read into memory: the temporary file goes at once.
	data, err := os.ReadFile(path)
	os.Remove(path)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(FluxContentMediaType), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("artifact layer: %w", err)
	}
	// fluxcd/pkg/oci sets the config media type before appending the layer;
	// with go-containerregistry v0.20.6 (what it and source-controller
	// v1.7.3 build with) the appended layer's diff ID and an empty history
	// entry go into the config all the same. v0.22 (this module's) leaves
	// them out of a config that is not an image's, so the media type is set
	// last here: the same config, byte for byte, and the same digests.
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.Annotations(img, map[string]string{
		annotationCreated:  created.UTC().Format(time.RFC3339),
		annotationSource:   source,
		annotationRevision: revision,
	}).(v1.Image)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer})
	if err != nil {
		return nil, fmt.Errorf("artifact: %w", err)
	}
	img = mutate.ConfigMediaType(img, FluxConfigMediaType)
	return img, nil
}

// fluxTarball writes dir as fluxcd/pkg/oci's build does: filepath.Walk
// order, regular files and directories only (the root itself as "."),
// tar.FileInfoHeader with the name relative to dir, owner, group and every
// time cleared; gzip at its default level.
func fluxTarball(out, dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	gw := gzip.NewWriter(f)
	tw := tar.NewWriter(gw)
	err = filepath.Walk(abs, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if m := fi.Mode(); !m.IsRegular() && !m.IsDir() {
			return nil
		}
		h, err := tar.FileInfoHeader(fi, p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(abs, p)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		h.Gid, h.Uid, h.Uname, h.Gname = 0, 0, "", ""
		h.ModTime, h.AccessTime, h.ChangeTime = time.Time{}, time.Time{}, time.Time{}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err != nil {
		return fmt.Errorf("artifact tarball of %s: %w", dir, err)
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := gw.Close(); err != nil {
		return err
	}
	return f.Close()
}

// pushImage writes img under ref and returns its digest, after reading
// back that the registry serves exactly that manifest under the tag.
func pushImage(ctx context.Context, ref name.Tag, img v1.Image, opts []remote.Option) (v1.Hash, error) {
	opts = append([]remote.Option{remote.WithContext(ctx)}, opts...)
	d, err := img.Digest()
	if err != nil {
		return d, err
	}
	if err := remote.Write(ref, img, opts...); err != nil {
		return d, fmt.Errorf("write %s: %w", ref, err)
	}
	got, err := remote.Head(ref, opts...)
	if err != nil {
		return d, fmt.Errorf("read back %s: %w", ref, err)
	}
	if got.Digest != d {
		return d, fmt.Errorf("%s serves %s, pushed %s", ref, got.Digest, d)
	}
	return d, nil
}
