// Package signing tests a release's signatures, SBOMs and krew manifest on
// the real tools (issue 38 item 3): hack/sign signs an image index, a chart
// and a package artifact in a go-containerregistry registry on loopback with
// a local cosign key and attaches each platform's syft SPDX SBOM; upstream
// cosign v3.1.3 then verifies every signature and attestation with that key
// (--insecure-ignore-tlog: no Rekor here) and refuses another key and an
// unsigned digest; the SBOM lists the Go modules of the binary in the image.
// hack/krew's manifest passes krew v0.4.3's validate-krew-manifest and
// installs with kubectl-krew; broken ones fail both.
package signing

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/cozy-health/test/harness"
)

const version = "v0.0.1-test"

// platforms of the test image: the two a release ships.
var platforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

// startRegistry serves go-containerregistry's registry on loopback and
// returns its host:port. Its referrers API is off, as in the registry the
// docs/release.md starts (cmd/registry) and on ghcr.io: cosign falls back to the
// sha256-<digest> tag index, whose entries carry no annotations.
func startRegistry(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{
		Handler:           registry.New(registry.Logger(log.New(io.Discard, "", 0))),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}

// buildBinary builds kubectl-health for linux/ARCH, as a release image holds
// a Go binary.
func buildBinary(t *testing.T, arch, out string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, "./cmd/kubectl-health")
	cmd.Dir = harness.RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", b)
}

// binaryIndex is a two-platform image index, each image one layer holding
// /usr/local/bin/kubectl-health built for its platform.
func binaryIndex(t *testing.T, dir string) v1.ImageIndex {
	t.Helper()
	idx := v1.ImageIndex(empty.Index)
	idx = mutate.IndexMediaType(idx, types.OCIImageIndex)
	for _, p := range platforms {
		bin := filepath.Join(dir, "kubectl-health-"+p.Architecture)
		buildBinary(t, p.Architecture, bin)
		b, err := os.ReadFile(bin)
		require.NoError(t, err)
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: "usr/local/bin/kubectl-health", Mode: 0o755, Size: int64(len(b)), Typeflag: tar.TypeReg}))
		_, err = tw.Write(b)
		require.NoError(t, err)
		require.NoError(t, tw.Close())
		layer, err := tarball.LayerFromReader(bytes.NewReader(buf.Bytes()))
		require.NoError(t, err)
		img, err := mutate.AppendLayers(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON), layer)
		require.NoError(t, err)
		cf, err := img.ConfigFile()
		require.NoError(t, err)
		cf.OS, cf.Architecture = p.OS, p.Architecture
		cf.Config.Entrypoint = []string{"/usr/local/bin/kubectl-health"}
		img, err = mutate.ConfigFile(img, cf)
		require.NoError(t, err)
		pl := p
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &pl}})
	}
	return idx
}

// push writes an index or image to reg/repo:tag and returns repo@digest.
func push(t *testing.T, ref string, w remote.Taggable) string {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	require.NoError(t, err)
	switch v := w.(type) {
	case v1.ImageIndex:
		require.NoError(t, remote.WriteIndex(r, v))
	case v1.Image:
		require.NoError(t, remote.Write(r, v))
	}
	d, err := w.(interface{ Digest() (v1.Hash, error) }).Digest()
	require.NoError(t, err)
	return d.String()
}

// cosign runs the cosign binary; it returns its stdout and an error with
// its stderr.
func cosign(t *testing.T, bin string, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("cosign %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

func toolBin(t *testing.T, tool harness.Tool, bin string) string {
	t.Helper()
	d, err := tool.Dir()
	require.NoError(t, err, "build %s (hack/tooldir.sh %s)", tool, tool)
	p := filepath.Join(d, bin)
	_, err = os.Stat(p)
	require.NoError(t, err)
	return p
}

func TestSignVerifyAndSBOM(t *testing.T) {
	cosignBin := toolBin(t, harness.Cosign, "cosign")
	toolBin(t, harness.Syft, "syft")
	root := harness.RepoRoot()
	dir := t.TempDir()
	reg := startRegistry(t)

	// The release: an image index of a Go binary, a chart-like and a
	// package-like artifact.
	idx := binaryIndex(t, dir)
	imageRef := reg + "/cozy/cozy-health-agent:" + version
	imageDigest := push(t, imageRef, idx)
	chart, err := random.Image(512, 1)
	require.NoError(t, err)
	chartRef := reg + "/cozy/cozy-health:0.0.1-test"
	chartDigest := push(t, chartRef, chart)
	pkg, err := random.Image(512, 1)
	require.NoError(t, err)
	pkgRef := reg + "/cozy/cozy-health-package:" + version
	pkgDigest := push(t, pkgRef, pkg)
	rel := map[string]any{
		"version":  version,
		"registry": reg + "/cozy",
		"images":   []map[string]string{{"name": "cozy-health-agent", "ref": imageRef, "digest": imageDigest}},
		"chart":    map[string]string{"ref": chartRef, "version": "0.0.1-test", "digest": chartDigest},
		"package":  map[string]string{"ref": pkgRef, "digest": pkgDigest},
	}
	b, err := json.Marshal(rel)
	require.NoError(t, err)
	relFile := filepath.Join(dir, "release", "release.json")
	require.NoError(t, os.MkdirAll(filepath.Dir(relFile), 0o755))
	require.NoError(t, os.WriteFile(relFile, b, 0o644))

	// A fresh local key, with a password, and another.
	pw := []string{"COSIGN_PASSWORD=signing-test"}
	for _, k := range []string{"key", "other"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, k), 0o755))
		_, err := cosign(t, cosignBin, pw, "generate-key-pair", "--output-key-prefix", filepath.Join(dir, k, "cosign"))
		require.NoError(t, err)
	}
	key, pub, otherPub := filepath.Join(dir, "key", "cosign.key"), filepath.Join(dir, "key", "cosign.pub"), filepath.Join(dir, "other", "cosign.pub")

	signBin := filepath.Join(dir, "sign")
	build := exec.Command("go", "build", "-o", signBin, "./hack/sign")
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	start := time.Now()
	sign := exec.Command(signBin, "-release", relFile, "-key", key)
	sign.Dir = root
	sign.Env = append(os.Environ(), pw...)
	out, err = sign.CombinedOutput()
	require.NoError(t, err, "hack/sign: %s", out)
	t.Logf("hack/sign (sign 5 subjects, 2 SBOMs, verify) in %s:\n%s", time.Since(start).Round(time.Millisecond), out)

	// Every subject verifies with the key, not with another.
	repo := func(ref string) string { r, _ := name.ParseReference(ref); return r.Context().String() }
	subjects := map[string]string{
		"index":   repo(imageRef) + "@" + imageDigest,
		"chart":   repo(chartRef) + "@" + chartDigest,
		"package": repo(pkgRef) + "@" + pkgDigest,
	}
	im, err := idx.IndexManifest()
	require.NoError(t, err)
	for _, m := range im.Manifests {
		subjects[m.Platform.String()] = repo(imageRef) + "@" + m.Digest.String()
	}
	verify := []string{"--insecure-ignore-tlog", "--allow-http-registry"}
	for what, s := range subjects {
		start := time.Now()
		out, err := cosign(t, cosignBin, nil, append([]string{"verify", "--key", pub}, append(verify, s)...)...)
		require.NoError(t, err, what)
		t.Logf("cosign verify %s in %s", what, time.Since(start).Round(time.Millisecond))
		assert.Contains(t, out, strings.TrimPrefix(s, repo(s)+"@"), what)
		_, err = cosign(t, cosignBin, nil, append([]string{"verify", "--key", otherPub}, append(verify, s)...)...)
		require.Error(t, err, "%s verified with another key", what)
		assert.Contains(t, err.Error(), "accepted signatures do not match threshold, Found: 0", what)
	}
	// The tag's index once replaced by an unsigned one fails.
	other, err := random.Index(256, 1, 1)
	require.NoError(t, err)
	unsigned := push(t, imageRef, other)
	_, err = cosign(t, cosignBin, nil, append([]string{"verify", "--key", pub}, append(verify, repo(imageRef)+"@"+unsigned)...)...)
	require.Error(t, err, "an unsigned index verified")
	assert.Contains(t, err.Error(), "no signatures found")

	// The SBOM attestations: on the index (both platforms) and on each
	// platform, signed by the key; they list the binary's Go modules.
	info, err := buildinfo.ReadFile(filepath.Join(dir, "kubectl-health-amd64"))
	require.NoError(t, err)
	require.NotEmpty(t, info.Deps)
	for _, what := range []string{"index", "linux/amd64", "linux/arm64"} {
		start := time.Now()
		out, err := cosign(t, cosignBin, nil, append([]string{"verify-attestation", "--type", "spdxjson", "--key", pub}, append(verify, subjects[what])...)...)
		require.NoError(t, err, what)
		t.Logf("cosign verify-attestation %s in %s", what, time.Since(start).Round(time.Millisecond))
		docs := spdxDocs(t, out, subjects[what])
		want := 1
		if what == "index" {
			want = 2
		}
		require.Len(t, docs, want, what)
		for _, doc := range docs {
			pkgs := map[string]string{}
			for _, p := range doc.Packages {
				pkgs[p.Name] = p.VersionInfo
			}
			for _, d := range info.Deps {
				if assert.Contains(t, pkgs, d.Path, "%s: the SBOM lacks module %s", what, d.Path) {
					assert.Equal(t, d.Version, pkgs[d.Path], "%s: module %s", what, d.Path)
				}
			}
			assert.Contains(t, pkgs, "github.com/cozystack/cozy-health", what)
		}
		_, err = cosign(t, cosignBin, nil, append([]string{"verify-attestation", "--type", "spdxjson", "--key", otherPub}, append(verify, subjects[what])...)...)
		require.Error(t, err, "%s's attestation verified with another key", what)
	}

	// The notes carry every subject's digest and the signatures' digests
	// the registry holds; the SBOM files are beside them.
	notes, err := os.ReadFile(filepath.Join(dir, "release", "release-notes.md"))
	require.NoError(t, err)
	for what, s := range subjects {
		_, d, _ := strings.Cut(s, "@")
		assert.Contains(t, string(notes), d, what)
		r, err := name.NewDigest(s, name.Insecure)
		require.NoError(t, err)
		refs, err := remote.Referrers(r)
		require.NoError(t, err)
		rm, err := refs.IndexManifest()
		require.NoError(t, err)
		require.NotEmpty(t, rm.Manifests, "%s has no referrers", what)
		for _, m := range rm.Manifests {
			assert.Contains(t, string(notes), m.Digest.String(), "%s's referrer %s (%s)", what, m.Digest, m.ArtifactType)
		}
	}
	sboms, err := filepath.Glob(filepath.Join(dir, "release", "sbom", "*.spdx.json"))
	require.NoError(t, err)
	assert.Len(t, sboms, 2)
	for _, f := range sboms {
		fi, err := os.Stat(f)
		require.NoError(t, err)
		t.Logf("SBOM %s: %d bytes", filepath.Base(f), fi.Size())
	}
	assert.FileExists(t, filepath.Join(dir, "release", "cosign.pub"))
}

// spdxDoc is what the test reads of an SPDX JSON document.
type spdxDoc struct {
	SPDXVersion string `json:"spdxVersion"`
	Packages    []struct {
		Name        string `json:"name"`
		VersionInfo string `json:"versionInfo"`
	} `json:"packages"`
}

// spdxDocs decodes cosign verify-attestation's output (one DSSE envelope a
// line) into the SPDX predicates of statements about subject.
func spdxDocs(t *testing.T, out, subject string) []spdxDoc {
	t.Helper()
	_, digest, _ := strings.Cut(subject, "@sha256:")
	var docs []spdxDoc
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var env struct {
			PayloadType string `json:"payloadType"`
			Payload     string `json:"payload"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &env), line)
		require.Equal(t, "application/vnd.in-toto+json", env.PayloadType)
		p, err := base64.StdEncoding.DecodeString(env.Payload)
		require.NoError(t, err)
		var st struct {
			PredicateType string `json:"predicateType"`
			Subject       []struct {
				Digest map[string]string `json:"digest"`
			} `json:"subject"`
			Predicate spdxDoc `json:"predicate"`
		}
		require.NoError(t, json.Unmarshal(p, &st))
		require.Equal(t, "https://spdx.dev/Document", st.PredicateType)
		require.Len(t, st.Subject, 1)
		require.Equal(t, digest, st.Subject[0].Digest["sha256"])
		require.True(t, strings.HasPrefix(st.Predicate.SPDXVersion, "SPDX-2."), st.Predicate.SPDXVersion)
		docs = append(docs, st.Predicate)
	}
	return docs
}

// TestSignRefusals: bad input is refused before anything is signed.
func TestSignRefusals(t *testing.T) {
	root := harness.RepoRoot()
	dir := t.TempDir()
	signBin := filepath.Join(dir, "sign")
	build := exec.Command("go", "build", "-o", signBin, "./hack/sign")
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	d := "sha256:" + strings.Repeat("a", 64)
	good := func() map[string]any {
		return map[string]any{
			"version": version, "registry": "127.0.0.1:1/cozy",
			"images":  []map[string]string{{"name": "a", "ref": "127.0.0.1:1/cozy/a:" + version, "digest": d}},
			"chart":   map[string]string{"ref": "127.0.0.1:1/cozy/cozy-health:0.0.1", "digest": d},
			"package": map[string]string{"ref": "127.0.0.1:1/cozy/cozy-health-package:" + version, "digest": d},
		}
	}
	for name, c := range map[string]struct {
		edit func(map[string]any)
		args []string
		env  []string
		want string
	}{
		"no images": {edit: func(r map[string]any) { r["images"] = []any{} }, want: "no images"},
		"bad digest": {edit: func(r map[string]any) {
			r["chart"] = map[string]string{"ref": "127.0.0.1:1/c:1", "digest": "sha256:xyz"}
		}, want: "is not sha256:<64 hex>"},
		"ref mismatch": {edit: func(r map[string]any) {
			r["package"] = map[string]string{"ref": "127.0.0.1:1/p@sha256:" + strings.Repeat("b", 64), "digest": d}
		}, want: "release.json says"},
		"ci, no token": {edit: func(map[string]any) {}, env: []string{"GITHUB_ACTIONS=true", "ACTIONS_ID_TOKEN_REQUEST_URL=", "ACTIONS_ID_TOKEN_REQUEST_TOKEN="}, want: "id-token: write"},
		"missing key":  {edit: func(map[string]any) {}, args: []string{"-key", filepath.Join(dir, "absent.key")}, want: "-key"},
	} {
		t.Run(name, func(t *testing.T) {
			r := good()
			c.edit(r)
			b, err := json.Marshal(r)
			require.NoError(t, err)
			f := filepath.Join(t.TempDir(), "release.json")
			require.NoError(t, os.WriteFile(f, b, 0o644))
			args := append([]string{"-release", f, "-cosign", "/bin/false", "-syft", "/bin/false"}, c.args...)
			cmd := exec.Command(signBin, args...)
			cmd.Env = append(os.Environ(), c.env...)
			out, err := cmd.CombinedOutput()
			require.Error(t, err, "%s", out)
			assert.Contains(t, string(out), c.want)
		})
	}
}

// TestKrewManifest: hack/krew's manifest passes krew's own validator and
// every platform installs from its archive; broken manifests fail.
func TestKrewManifest(t *testing.T) {
	validator := toolBin(t, harness.Krew, "validate-krew-manifest")
	krew := toolBin(t, harness.Krew, "kubectl-krew")
	root := harness.RepoRoot()
	out := t.TempDir()
	start := time.Now()
	cmd := exec.Command("go", "run", "./hack/krew", "-version", version, "-out", out, "-platforms", "linux/amd64,linux/arm64")
	cmd.Dir = root
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "hack/krew: %s", b)
	t.Logf("hack/krew (2 platforms, validated) in %s:\n%s", time.Since(start).Round(time.Millisecond), b)
	manifest := filepath.Join(out, "krew", "health.yaml")

	validate := func(path string) error {
		out, err := exec.Command(validator, "-manifest", path, "-skip-install").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}
	install := func(path, archive, goos, arch string) (string, error) {
		r := t.TempDir()
		cmd := exec.Command(krew, "install", "--manifest", path, "--archive", archive)
		cmd.Env = append(os.Environ(), "KREW_ROOT="+r, "KREW_OS="+goos, "KREW_ARCH="+arch)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("%w: %s", err, out)
		}
		return r, nil
	}
	require.NoError(t, validate(manifest))
	var m struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Version   string           `json:"version"`
			Platforms []map[string]any `json:"platforms"`
		} `json:"spec"`
	}
	raw, err := os.ReadFile(manifest)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, &m))
	assert.Equal(t, "health", m.Metadata.Name)
	assert.Equal(t, version, m.Spec.Version)
	require.Len(t, m.Spec.Platforms, 2)
	for _, p := range m.Spec.Platforms {
		uri := p["uri"].(string)
		assert.True(t, strings.HasPrefix(uri, "https://github.com/cozystack/cozy-health/releases/download/"+version+"/"), uri)
		sel := p["selector"].(map[string]any)["matchLabels"].(map[string]any)
		r, err := install(manifest, filepath.Join(out, "krew", filepath.Base(uri)), sel["os"].(string), sel["arch"].(string))
		require.NoError(t, err, uri)
		if sel["arch"] == "amd64" {
			// The installed plugin is the release's kubectl-health.
			v, err := exec.Command(filepath.Join(r, "bin", "kubectl-health"), "--version").CombinedOutput()
			require.NoError(t, err, "%s", v)
			assert.Contains(t, string(v), version)
		}
	}

	// Broken manifests: each fails the validator or krew's install.
	broken := func(edit func(s string) string) string {
		d := t.TempDir()
		p := filepath.Join(d, "health.yaml")
		require.NoError(t, os.WriteFile(p, []byte(edit(string(raw))), 0o644))
		return p
	}
	for name, edit := range map[string]func(string) string{
		"other name": func(s string) string { return strings.Replace(s, "name: health", "name: healthz", 1) },
		"not semver": func(s string) string { return strings.Replace(s, "version: "+version, "version: latest", 1) },
		"no selector": func(s string) string {
			return strings.Replace(s, "matchLabels:\n        arch: amd64\n        os: linux", "matchLabels: {}", 1)
		},
		"bad sha256": func(s string) string { return strings.Replace(s, "sha256: ", "sha256: x", 1) },
	} {
		err := validate(broken(edit))
		assert.Error(t, err, "validate-krew-manifest accepted a manifest with %s", name)
	}
	// Structurally valid, but the archive is not the one its sha256 names.
	first := m.Spec.Platforms[0]
	wrong := broken(func(s string) string {
		return strings.Replace(s, first["sha256"].(string), strings.Repeat("f", 64), 1)
	})
	require.NoError(t, validate(wrong))
	sel := first["selector"].(map[string]any)["matchLabels"].(map[string]any)
	_, err = install(wrong, filepath.Join(out, "krew", filepath.Base(first["uri"].(string))), sel["os"].(string), sel["arch"].(string))
	require.Error(t, err, "kubectl krew installed an archive whose sha256 the manifest does not name")
	assert.Contains(t, err.Error(), "checksum")
}
