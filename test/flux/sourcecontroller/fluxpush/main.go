// Command fluxpush is test/release's oracle for the Flux OCI artifact
// format: `fluxpush SRC DST` reads the artifact at SRC (hack/release's
// Cozystack package), unpacks its files with their modes, and pushes that
// directory to DST with fluxcd/pkg/oci's Client.Push, which `flux push
// artifact` calls, at the version source-controller v1.7.3 uses (this
// module's go.mod), with SRC's created, source and revision annotations. It
// prints the digest Flux's code pushed: equal to SRC's, the two artifacts
// are the same bytes. Plain HTTP: the registries here are on loopback.
package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/fluxcd/pkg/oci"
	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: fluxpush SRC-REF DST-REF")
		os.Exit(2)
	}
	digest, err := run(os.Args[1], os.Args[2])
	if err != nil {
		fmt.Fprintf(os.Stderr, "fluxpush: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(digest)
}

func run(src, dst string) (string, error) {
	ref, err := name.ParseReference(src, name.Insecure)
	if err != nil {
		return "", err
	}
	img, err := remote.Image(ref)
	if err != nil {
		return "", err
	}
	m, err := img.Manifest()
	if err != nil {
		return "", err
	}
	layers, err := img.Layers()
	if err != nil {
		return "", err
	}
	if len(layers) != 1 {
		return "", fmt.Errorf("%s has %d layers, a Flux artifact one", src, len(layers))
	}
	dir, err := os.MkdirTemp("", "fluxpush-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	root := filepath.Join(dir, "artifact")
	if err := unpack(layers[0].Compressed, root); err != nil {
		return "", err
	}
	got, err := oci.NewClient([]crane.Option{crane.Insecure}).Push(context.Background(), dst, root, oci.WithPushMetadata(oci.Metadata{
		Created:  m.Annotations[oci.CreatedAnnotation],
		Source:   m.Annotations[oci.SourceAnnotation],
		Revision: m.Annotations[oci.RevisionAnnotation],
	}))
	if err != nil {
		return "", err
	}
	_, d, _ := strings.Cut(got, "@")
	return d, nil
}

// unpack writes the layer's directories and files into root with their
// modes.
func unpack(open func() (io.ReadCloser, error), root string) error {
	rc, err := open()
	if err != nil {
		return err
	}
	defer rc.Close()
	zr, err := gzip.NewReader(rc)
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(root, filepath.Clean(h.Name))
		if !strings.HasPrefix(p, root) {
			return fmt.Errorf("entry %q leaves the artifact", h.Name)
		}
		mode := os.FileMode(h.Mode) & os.ModePerm
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
			if err := os.Chmod(p, mode); err != nil {
				return err
			}
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				return err
			}
			if err := os.WriteFile(p, b, mode); err != nil {
				return err
			}
			if err := os.Chmod(p, mode); err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %q is neither a file nor a directory", h.Name)
		}
	}
}
