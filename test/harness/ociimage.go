package harness

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"
)

// ImageFile is one file of an image built by WriteImage.
type ImageFile struct {
	// Path inside the image, without a leading slash ("pause", "etc/passwd").
	Path string
	// Mode is the file mode (0o755 for a binary).
	Mode int64
	// Source is a file on the host to copy; Data is used when Source is empty.
	Source string
	Data   []byte
}

// WriteImage writes an OCI image layout archive (the format `ctr images
// import` reads) holding one uncompressed layer with files, run as
// entrypoint. The index entry carries the annotation
// io.containerd.image.name=ref, which names the image in containerd.
func WriteImage(path, ref string, files []ImageFile, entrypoint []string) error {
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	epoch := time.Unix(0, 0)
	dirs := map[string]bool{}
	for _, f := range files {
		data := f.Data
		if f.Source != "" {
			b, err := os.ReadFile(f.Source)
			if err != nil {
				return fmt.Errorf("image %s: read %s: %w", ref, f.Source, err)
			}
			data = b
		}
		for d := filepath.Dir(f.Path); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
			if err := lw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch}); err != nil {
				return fmt.Errorf("image %s: %w", ref, err)
			}
		}
		if err := lw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.Path, Mode: f.Mode, Size: int64(len(data)), ModTime: epoch}); err != nil {
			return fmt.Errorf("image %s: %w", ref, err)
		}
		if _, err := lw.Write(data); err != nil {
			return fmt.Errorf("image %s: %w", ref, err)
		}
	}
	if err := lw.Close(); err != nil {
		return fmt.Errorf("image %s: %w", ref, err)
	}
	layerDigest := digest(layer.Bytes())

	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": entrypoint, "Env": []string{"PATH=/"}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(config), "size": len(config)},
		"layers":        []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layerDigest, "size": layer.Len()}},
	})
	if err != nil {
		return err
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests": []any{map[string]any{
			"mediaType":   "application/vnd.oci.image.manifest.v1+json",
			"digest":      digest(manifest),
			"size":        len(manifest),
			"platform":    map[string]any{"architecture": runtime.GOARCH, "os": "linux"},
			"annotations": map[string]string{"io.containerd.image.name": ref},
		}},
	})
	if err != nil {
		return err
	}

	out, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("image %s: %w", ref, err)
	}
	defer out.Close()
	tw := tar.NewWriter(out)
	entries := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(config), config},
		{blobPath(manifest), manifest},
		{blobPath(layer.Bytes()), layer.Bytes()},
	}
	for _, e := range entries {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: e.name, Mode: 0o644, Size: int64(len(e.data)), ModTime: epoch}); err != nil {
			return fmt.Errorf("image %s: %w", ref, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return fmt.Errorf("image %s: %w", ref, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("image %s: %w", ref, err)
	}
	return out.Close()
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func blobPath(b []byte) string {
	sum := sha256.Sum256(b)
	return "blobs/sha256/" + hex.EncodeToString(sum[:])
}
