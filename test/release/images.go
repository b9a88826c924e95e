// Package release proves `make release` end to end: hack/release publishes
// into a registry on loopback, the real source-controller and
// helm-controller reconcile the Flux objects it wrote on a real kubelet
// node's apiserver, the node's containerd pulls the images by digest from
// that registry, the agent runs and Health objects appear; a second
// release upgrades through the same path.
package release

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cozystack/cozy-health/hack/image/oci"
	"github.com/cozystack/cozy-health/hack/image/push"
)

// Relabel writes into out the images of the images.json directory in as
// `make image` would write them for version: the same binaries (read back
// out of each platform's layer), the image's org.opencontainers.image.version
// label version, so every image and index has a new digest. It stands for a
// second `make image` (the binaries' linked-in version stays the first's),
// which would rebuild four binaries for minutes on this machine.
func Relabel(in, out, version string) error {
	raw, err := os.ReadFile(filepath.Join(in, "images.json"))
	if err != nil {
		return err
	}
	var built []oci.Result
	if err := json.Unmarshal(raw, &built); err != nil {
		return fmt.Errorf("%s/images.json: %w", in, err)
	}
	programs := map[string]oci.Program{}
	for _, p := range oci.Programs {
		programs[p.Name] = p
	}
	var results []oci.Result
	for _, b := range built {
		p, ok := programs[b.Name]
		if !ok {
			return fmt.Errorf("%s: unknown image %q", in, b.Name)
		}
		bins, err := os.MkdirTemp("", "cozy-health-relabel-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(bins)
		binaries, err := extractBinaries(filepath.Join(in, filepath.Base(b.Archive)), p.Name, bins)
		if err != nil {
			return fmt.Errorf("%s: %w", b.Name, err)
		}
		r, err := oci.WriteArchive(filepath.Join(out, p.Name+".oci.tar"), b.Ref, p, version, binaries, time.Unix(0, 0).UTC())
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	b, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "images.json"), b, 0o644)
}

// extractBinaries writes /usr/bin/NAME of every platform's image in the OCI
// layout archive into dir and returns architecture -> path.
func extractBinaries(archive, name, dir string) (map[string]string, error) {
	idx, cleanup, err := push.LoadIndex(archive)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, m := range im.Manifests {
		img, err := idx.Image(m.Digest)
		if err != nil {
			return nil, err
		}
		path := filepath.Join(dir, m.Platform.Architecture, name)
		if err := fileFromImage(img, "usr/bin/"+name, path); err != nil {
			return nil, fmt.Errorf("linux/%s: %w", m.Platform.Architecture, err)
		}
		out[m.Platform.Architecture] = path
	}
	return out, nil
}

func fileFromImage(img v1.Image, name, path string) error {
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			return err
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				rc.Close()
				return err
			}
			if h.Name == name {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					rc.Close()
					return err
				}
				data, err := io.ReadAll(tr)
				rc.Close()
				if err != nil {
					return err
				}
				return os.WriteFile(path, data, 0o755)
			}
		}
		rc.Close()
	}
	return fmt.Errorf("no %s in the image", name)
}
