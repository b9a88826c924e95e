// Package oci builds the OCI images of cozy-health without a Docker engine
// or a registry: static Go binaries on an empty ("scratch") base, assembled
// with go-containerregistry and written as OCI image-layout archives that
// `ctr images import`, `skopeo copy oci-archive:` and `crane push` read.
// Builds are reproducible: every timestamp is fixed, the binaries are built
// with -trimpath and an empty build ID, and tar entries are sorted, so the
// same sources give the same digests.
//
// It is the one image builder: `make image` (hack/image) builds the shipped
// amd64+arm64 images with Build; the lab and the real-node harness write
// their images (the agent and aggregator from bin/, the sandbox's pause, a
// test workload) with WriteArchive.
package oci

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Program is one image: a binary built from Package, run as User.
type Program struct {
	// Name is the binary's and the image repository's name.
	Name string
	// Package is the Go package of the binary.
	Package string
	// User is the image's default user (uid:gid). The chart sets the same
	// in the pod's securityContext; the image says it for other runtimes.
	User string
}

// Programs are the images `make image` builds.
//
// The aggregator needs no privilege and runs as 65532 (nonroot). The agent
// runs as root with every capability dropped: it connects to Cilium's
// root-owned API socket (connect needs write permission on it), writes its
// fsync probe into a root-owned host directory on the etcd disk, and reads
// the host's /proc. It runs no other program: DRBD state comes from
// the LINSTOR controller's view (read by the aggregator), so the image
// carries no drbdsetup.
var Programs = []Program{
	{Name: "cozy-health-agent", Package: "./agent", User: "0:0"},
	{Name: "cozy-health-aggregator", Package: "./aggregator", User: "65532:65532"},
}

// DefaultRegistry is where Cozystack keeps the images of its packages
// (its hack/common-envs.mk REGISTRY): REGISTRY/NAME:TAG@DIGEST.
const DefaultRegistry = "ghcr.io/cozystack/cozystack"

// Platforms are the architectures built.
var Platforms = []string{"amd64", "arm64"}

// passwd and group name the two users for tools that print names.
const (
	passwd = "root:x:0:0:root:/:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/:/sbin/nologin\n"
	group  = "root:x:0:\nnonroot:x:65532:\n"
)

// Options of one build.
type Options struct {
	// Out is where the archives and images.json go.
	Out string
	// Registry and Tag make the reference ctr records (REGISTRY/NAME:TAG).
	Registry, Tag string
	// Version is linked into the binaries (pkg/version).
	Version string
	// Epoch is every timestamp in the images.
	Epoch time.Time
	// Programs and Platforms to build (default: all).
	Programs  []Program
	Platforms []string
	// Source is the repository root the packages are built in.
	Source string
}

// Result describes one built image.
type Result struct {
	Name string `json:"name"`
	// Ref is the reference recorded in the archive (io.containerd.image.name).
	Ref string `json:"ref"`
	// Digest is the multi-platform index's digest: what REPO@DIGEST pins.
	Digest string `json:"digest"`
	// Archive is the OCI layout tar and ArchiveBytes its size.
	Archive      string `json:"archive"`
	ArchiveBytes int64  `json:"archiveBytes"`
	// Platforms maps an architecture to its image.
	Platforms map[string]PlatformImage `json:"platforms"`
}

// PlatformImage is one architecture's image.
type PlatformImage struct {
	Digest string `json:"digest"`
	// CompressedBytes is what a pull transfers (config + layer); BinaryBytes
	// the binary alone.
	CompressedBytes int64 `json:"compressedBytes"`
	BinaryBytes     int64 `json:"binaryBytes"`
}

// Build builds every program for every platform and writes one archive per
// program plus images.json.
func Build(o Options) ([]Result, error) {
	if o.Programs == nil {
		o.Programs = Programs
	}
	if o.Platforms == nil {
		o.Platforms = Platforms
	}
	if o.Source == "" {
		o.Source = "."
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", o.Out, err)
	}
	var results []Result
	for _, p := range o.Programs {
		r, err := buildProgram(o, p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		results = append(results, r)
	}
	b, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(o.Out, "images.json"), append(b, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("write images.json: %w", err)
	}
	return results, nil
}

func buildProgram(o Options, p Program) (Result, error) {
	tmp, err := os.MkdirTemp("", "cozy-health-image-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(tmp)
	binaries := map[string]string{}
	for _, arch := range o.Platforms {
		bin := filepath.Join(tmp, arch, p.Name)
		if err := goBuild(o, p, arch, bin); err != nil {
			return Result{}, err
		}
		binaries[arch] = bin
	}
	ref := fmt.Sprintf("%s/%s:%s", o.Registry, p.Name, o.Tag)
	return WriteArchive(filepath.Join(o.Out, p.Name+".oci.tar"), ref, p, o.Version, binaries, o.Epoch)
}

// WriteArchive writes the image of p, one per architecture around the
// binaries (architecture -> path of a static linux binary), as an OCI
// image-layout archive at out holding one multi-platform index named ref
// (io.containerd.image.name, the name `ctr images import` gives it; its tag
// as org.opencontainers.image.ref.name). Every timestamp is epoch.
func WriteArchive(out, ref string, p Program, version string, binaries map[string]string, epoch time.Time) (Result, error) {
	res := Result{Name: p.Name, Ref: ref, Platforms: map[string]PlatformImage{}}
	tag, err := name.NewTag(ref)
	if err != nil {
		return res, fmt.Errorf("image reference %q: %w", ref, err)
	}
	archs := make([]string, 0, len(binaries))
	for arch := range binaries {
		archs = append(archs, arch)
	}
	sort.Strings(archs)
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range archs {
		data, err := os.ReadFile(binaries[arch])
		if err != nil {
			return res, err
		}
		img, err := Image(p, arch, version, data, epoch)
		if err != nil {
			return res, err
		}
		d, err := img.Digest()
		if err != nil {
			return res, err
		}
		m, err := img.Manifest()
		if err != nil {
			return res, err
		}
		size := m.Config.Size
		for _, l := range m.Layers {
			size += l.Size
		}
		res.Platforms[arch] = PlatformImage{Digest: d.String(), CompressedBytes: size, BinaryBytes: int64(len(data))}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	d, err := idx.Digest()
	if err != nil {
		return res, err
	}
	res.Digest = d.String()

	tmp, err := os.MkdirTemp("", "cozy-health-layout-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(tmp)
	lp, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return res, fmt.Errorf("write OCI layout: %w", err)
	}
	// containerd's import names the image after io.containerd.image.name;
	// other tools read org.opencontainers.image.ref.name (the tag).
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          ref,
		"org.opencontainers.image.ref.name": tag.TagStr(),
	})); err != nil {
		return res, fmt.Errorf("write OCI layout: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return res, err
	}
	res.Archive = out
	if res.ArchiveBytes, err = tarDir(tmp, out, epoch); err != nil {
		return res, err
	}
	return res, nil
}

// goBuild builds a static, reproducible binary of p for linux/arch.
func goBuild(o Options, p Program, arch, out string) error {
	ldflags := "-s -w -buildid= -X github.com/cozystack/cozy-health/pkg/version.Version=" + o.Version
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", out, p.Package)
	cmd.Dir = o.Source
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=")
	if arch == "amd64" {
		cmd.Env = append(cmd.Env, "GOAMD64=v1")
	}
	if arch == "arm64" {
		cmd.Env = append(cmd.Env, "GOARM64=v8.0")
	}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s for linux/%s: %w", p.Package, arch, err)
	}
	return nil
}

// Image assembles the image of p for linux/arch around binary: one layer
// holding /usr/bin/NAME, /etc/passwd and /etc/group, every timestamp epoch.
func Image(p Program, arch, version string, binary []byte, epoch time.Time) (v1.Image, error) {
	layerTar, err := rootfs(p.Name, binary, epoch)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: epoch}, CreatedBy: "hack/image: /usr/bin/" + p.Name + ", /etc/passwd, /etc/group",
	}})
	if err != nil {
		return nil, fmt.Errorf("append layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Entrypoint = []string{"/usr/bin/" + p.Name}
	cf.Config.User = p.User
	cf.Config.WorkingDir = "/"
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":    p.Name,
		"org.opencontainers.image.source":   "https://github.com/cozystack/cozy-health",
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return img, nil
}

// rootfs is the layer's tar: directories, the binary, passwd and group.
func rootfs(name string, binary []byte, epoch time.Time) ([]byte, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	dir := func(n string) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: n, Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX})
	}
	file := func(n string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: mode, Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	for _, step := range []func() error{
		func() error { return dir("etc/") },
		func() error { return file("etc/group", 0o644, []byte(group)) },
		func() error { return file("etc/passwd", 0o644, []byte(passwd)) },
		func() error { return dir("tmp/") },
		func() error { return dir("usr/") },
		func() error { return dir("usr/bin/") },
		func() error { return file("usr/bin/"+name, 0o755, binary) },
	} {
		if err := step(); err != nil {
			return nil, fmt.Errorf("layer tar: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("layer tar: %w", err)
	}
	return b.Bytes(), nil
}

// tarDir writes dir as a tar at out: entries sorted, owned by 0:0, every
// time epoch. It returns the archive's size.
func tarDir(dir, out string, epoch time.Time) (int64, error) {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	sort.Strings(paths)
	f, err := os.Create(out + ".tmp")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for _, p := range paths {
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		fi, err := os.Stat(p)
		if err != nil {
			return 0, err
		}
		h := &tar.Header{Name: rel, ModTime: epoch, Mode: 0o644, Format: tar.FormatPAX}
		if fi.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, rel+"/", 0o755
			if err := tw.WriteHeader(h); err != nil {
				return 0, err
			}
			continue
		}
		h.Typeflag, h.Size = tar.TypeReg, fi.Size()
		if err := tw.WriteHeader(h); err != nil {
			return 0, err
		}
		src, err := os.Open(p)
		if err != nil {
			return 0, err
		}
		_, err = io.Copy(tw, src)
		src.Close()
		if err != nil {
			return 0, err
		}
	}
	if err := tw.Close(); err != nil {
		return 0, err
	}
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	return st.Size(), os.Rename(out+".tmp", out)
}
