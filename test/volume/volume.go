// Package volume writes a directory the way the kubelet writes a Secret,
// ConfigMap or projected volume (pkg/volume/util/atomic_writer.go): the
// files of one version live in a hidden timestamped directory, `..data` is a
// symlink to it, each key is a symlink `key -> ..data/key`, and an update
// writes a new timestamped directory and swaps `..data` with a rename. Code
// that reloads mounted certificates is tested against exactly this layout:
// the file a process opened never changes in place, the path resolves to a
// new inode after each update.
package volume

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

const dataDir = "..data"

// Write makes dir hold exactly files (key -> content) as the kubelet's
// atomic writer would, creating dir if needed. Keys are plain file names.
func Write(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create volume dir: %w", err)
	}
	old, err := os.Readlink(filepath.Join(dir, dataDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read %s: %w", dataDir, err)
	}
	ts, err := os.MkdirTemp(dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		return fmt.Errorf("create version dir: %w", err)
	}
	for k, b := range files {
		if strings.ContainsRune(k, '/') || strings.HasPrefix(k, "..") {
			return fmt.Errorf("volume key %q: want a plain file name", k)
		}
		if err := os.WriteFile(filepath.Join(ts, k), b, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", k, err)
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		return fmt.Errorf("link %s: %w", dataDir, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, dataDir)); err != nil {
		return fmt.Errorf("swap %s: %w", dataDir, err)
	}
	for k := range files {
		link := filepath.Join(dir, k)
		if _, err := os.Lstat(link); errors.Is(err, fs.ErrNotExist) {
			if err := os.Symlink(filepath.Join(dataDir, k), link); err != nil {
				return fmt.Errorf("link %s: %w", k, err)
			}
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list volume dir: %w", err)
	}
	for _, e := range entries {
		if n := e.Name(); !strings.HasPrefix(n, "..") {
			if _, ok := files[n]; !ok {
				_ = os.Remove(filepath.Join(dir, n))
			}
		}
	}
	if old != "" {
		_ = os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}
