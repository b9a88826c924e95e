// Command krew writes the krew plugin of one release (`make release` runs
// it after hack/sign):
//
//   - kubectl-health built for every platform of -platforms (linux and darwin
//     on amd64 and arm64, windows on amd64), each in a reproducible
//     DIR/krew/kubectl-health_VERSION_OS_ARCH.tar.gz (entries dated
//     SOURCE_DATE_EPOCH, else HEAD's commit time; the repository's LICENSE
//     beside the binary when it has one), the release assets the manifest
//     points at;
//   - DIR/krew/health.yaml, the plugin manifest in krew-index's format
//     (krew.googlecontainertools.github.com/v1alpha2 Plugin "health"), its
//     uri the GitHub release asset of each archive, its sha256 the archive's;
//   - DIR/krew/sha256sums.txt.
//
// Then it validates the manifest as krew-index's CI does, with krew's own
// validate-krew-manifest (sigs.k8s.io/krew v0.4.3, hack/tooldir.sh krew), and
// installs every platform from its local archive with the kubectl-krew of
// the same version (what the validator's install step does after
// downloading uri), so a digest or path that does not match fails here.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// plugin is the krew plugin's name: `kubectl krew install health` installs
// kubectl-health.
const plugin = "health"

// defaultPlatforms are the platforms a release ships.
const defaultPlatforms = "linux/amd64,linux/arm64,darwin/amd64,darwin/arm64,windows/amd64"

// semverRe is the version krew accepts (its internal/installation/semver
// parses vMAJOR.MINOR.PATCH with an optional pre-release and build).
var semverRe = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

type options struct {
	Version, Out, Repo, Platforms, ToolDir string
	Validate                               bool
}

// Manifest is krew's index.Plugin, the fields a manifest of ours sets.
type Manifest struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Metadata   Metadata `json:"metadata"`
	Spec       Spec     `json:"spec"`
}

// Metadata is the manifest's metadata.
type Metadata struct {
	Name string `json:"name"`
}

// Spec is the plugin's spec.
type Spec struct {
	Version          string     `json:"version"`
	Homepage         string     `json:"homepage"`
	ShortDescription string     `json:"shortDescription"`
	Description      string     `json:"description"`
	Caveats          string     `json:"caveats,omitempty"`
	Platforms        []Platform `json:"platforms"`
}

// Platform is one archive and the <os, arch> it serves.
type Platform struct {
	Selector Selector `json:"selector"`
	URI      string   `json:"uri"`
	Sha256   string   `json:"sha256"`
	Files    []File   `json:"files"`
	Bin      string   `json:"bin"`
}

// Selector selects the platform by krew's os and arch labels.
type Selector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

// File copies a path of the archive into the plugin's directory.
type File struct {
	From string `json:"from"`
	To   string `json:"to"`
}

func main() {
	var o options
	flags := flag.NewFlagSet("krew", flag.ContinueOnError)
	flags.StringVar(&o.Version, "version", "", "the release's version, vMAJOR.MINOR.PATCH[-PRE] (krew's semver)")
	flags.StringVar(&o.Out, "out", "", "the release directory: the archives and health.yaml go to OUT/krew")
	flags.StringVar(&o.Repo, "repo", defaultRepo(), "the GitHub repository whose release assets the manifest points at (default $GITHUB_REPOSITORY, else cozystack/cozy-health)")
	flags.StringVar(&o.Platforms, "platforms", defaultPlatforms, "OS/ARCH list to build")
	flags.BoolVar(&o.Validate, "validate", true, "validate the manifest with validate-krew-manifest and install every platform with kubectl-krew")
	flags.StringVar(&o.ToolDir, "krew-tools", "", "directory of validate-krew-manifest and kubectl-krew (default $COZY_HEALTH_KREW, else hack/tooldir.sh krew)")
	if err := flags.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "krew:", err)
		os.Exit(1)
	}
}

func defaultRepo() string {
	if r := os.Getenv("GITHUB_REPOSITORY"); r != "" {
		return r
	}
	return "cozystack/cozy-health"
}

func (o options) validate() error {
	if !semverRe.MatchString(o.Version) {
		return fmt.Errorf("-version %q is not vMAJOR.MINOR.PATCH[-PRE]: krew's manifest needs a semantic version (make release VERSION=v0.1.0)", o.Version)
	}
	if o.Out == "" {
		return errors.New("-out is required")
	}
	if !regexp.MustCompile(`^[\w.-]+/[\w.-]+$`).MatchString(o.Repo) {
		return fmt.Errorf("-repo %q is not OWNER/NAME", o.Repo)
	}
	if _, err := parsePlatforms(o.Platforms); err != nil {
		return err
	}
	return nil
}

type platform struct{ OS, Arch string }

func parsePlatforms(s string) ([]platform, error) {
	var ps []platform
	for _, f := range strings.Split(s, ",") {
		os, arch, ok := strings.Cut(strings.TrimSpace(f), "/")
		if !ok || os == "" || arch == "" {
			return nil, fmt.Errorf("-platforms: %q is not OS/ARCH", f)
		}
		ps = append(ps, platform{os, arch})
	}
	return ps, nil
}

func run(o options) error {
	if err := o.validate(); err != nil {
		return err
	}
	start := time.Now()
	platforms, _ := parsePlatforms(o.Platforms)
	dir := filepath.Join(o.Out, "krew")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	epoch, err := sourceEpoch()
	if err != nil {
		return err
	}
	license, err := findLicense()
	if err != nil {
		return err
	}
	m := Manifest{
		APIVersion: "krew.googlecontainertools.github.com/v1alpha2",
		Kind:       "Plugin",
		Metadata:   Metadata{Name: plugin},
		Spec: Spec{
			Version:          o.Version,
			Homepage:         "https://github.com/" + o.Repo,
			ShortDescription: "Health of Cozystack nodes and components",
			Description: "Reads the Health objects cozy-health's aggregator writes (per node and per\n" +
				"component: etcd, kubelet, LINSTOR, Cilium, Flux releases...), explains\n" +
				"why a node or component is degraded, and asks the aggregator whether a\n" +
				"node can be drained now without breaking a quorum or a volume.\n",
			Caveats: "The cluster must run cozy-health (its aggregator serves drain-check and\n" +
				"budget); see https://github.com/" + o.Repo + "#readme\n",
		},
	}
	var sums strings.Builder
	for _, p := range platforms {
		archive, sum, err := buildArchive(dir, o.Version, p, epoch, license)
		if err != nil {
			return err
		}
		bin := "kubectl-health"
		if p.OS == "windows" {
			bin += ".exe"
		}
		files := []File{{From: bin, To: "."}}
		if license != "" {
			files = append(files, File{From: filepath.Base(license), To: "."})
		}
		m.Spec.Platforms = append(m.Spec.Platforms, Platform{
			Selector: Selector{MatchLabels: map[string]string{"os": p.OS, "arch": p.Arch}},
			URI:      fmt.Sprintf("https://github.com/%s/releases/download/%s/%s", o.Repo, o.Version, filepath.Base(archive)),
			Sha256:   sum,
			Files:    files,
			Bin:      bin,
		})
		fmt.Fprintf(&sums, "%s  %s\n", sum, filepath.Base(archive))
		fi, _ := os.Stat(archive)
		fmt.Printf("krew: %s %s/%s %d bytes sha256:%s\n", filepath.Base(archive), p.OS, p.Arch, fi.Size(), sum)
	}
	b, err := yaml.Marshal(m)
	if err != nil {
		return err
	}
	manifest := filepath.Join(dir, plugin+".yaml")
	if err := os.WriteFile(manifest, b, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "sha256sums.txt"), []byte(sums.String()), 0o644); err != nil {
		return err
	}
	if err := appendNotes(filepath.Join(o.Out, "release-notes.md"), sums.String()); err != nil {
		return err
	}
	fmt.Printf("krew: wrote %s (%d platforms) in %s\n", manifest, len(platforms), time.Since(start).Round(time.Millisecond))
	if !o.Validate {
		return nil
	}
	tools := o.ToolDir
	if tools == "" {
		if tools, err = toolDir("krew"); err != nil {
			return err
		}
	}
	vstart := time.Now()
	if err := Validate(tools, manifest, dir); err != nil {
		return err
	}
	fmt.Printf("krew: %s valid (validate-krew-manifest) and every platform installs from its archive (kubectl-krew install) in %s\n", manifest, time.Since(vstart).Round(time.Millisecond))
	return nil
}

// Validate runs krew's validate-krew-manifest on manifest (whose file name
// must be the plugin's), then installs each of its platforms with
// kubectl-krew from the archive in archives its uri names (krew checks the
// archive's sha256 and the bin), each into a fresh KREW_ROOT.
func Validate(tools, manifest, archives string) error {
	out, err := exec.Command(filepath.Join(tools, "validate-krew-manifest"), "-manifest", manifest, "-skip-install").CombinedOutput()
	if err != nil {
		return fmt.Errorf("validate-krew-manifest -manifest %s: %w\n%s", manifest, err, out)
	}
	b, err := os.ReadFile(manifest)
	if err != nil {
		return err
	}
	var m Manifest
	if err := yaml.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("read %s: %w", manifest, err)
	}
	for _, p := range m.Spec.Platforms {
		goos, arch := p.Selector.MatchLabels["os"], p.Selector.MatchLabels["arch"]
		archive := filepath.Join(archives, filepath.Base(p.URI))
		root, err := os.MkdirTemp("", "krew-install-")
		if err != nil {
			return err
		}
		cmd := exec.Command(filepath.Join(tools, "kubectl-krew"), "install", "--manifest", manifest, "--archive", archive)
		cmd.Env = append(os.Environ(), "KREW_ROOT="+root, "KREW_OS="+goos, "KREW_ARCH="+arch)
		out, err := cmd.CombinedOutput()
		if err == nil {
			// krew links bin/kubectl-health to the installed p.Bin.
			link := filepath.Join(root, "bin", "kubectl-"+plugin)
			if goos == "windows" {
				link += ".exe"
			}
			if _, serr := os.Stat(link); serr != nil {
				err = fmt.Errorf("installed, but %s is missing: %w", link, serr)
			}
		}
		_ = os.RemoveAll(root)
		if err != nil {
			return fmt.Errorf("kubectl krew install --manifest %s --archive %s (KREW_OS=%s KREW_ARCH=%s): %w\n%s", manifest, archive, goos, arch, err, out)
		}
	}
	return nil
}

// buildArchive builds kubectl-health for p and writes
// dir/kubectl-health_VERSION_OS_ARCH.tar.gz: the binary (and license), mode
// 0755/0644, owner 0, dated epoch, gzip without name or time: the same
// commit and Go give the same bytes.
func buildArchive(dir, version string, p platform, epoch time.Time, license string) (string, string, error) {
	bin := "kubectl-health"
	if p.OS == "windows" {
		bin += ".exe"
	}
	tmp, err := os.MkdirTemp("", "kubectl-health-")
	if err != nil {
		return "", "", err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	out := filepath.Join(tmp, bin)
	ldflags := "-s -w -X github.com/cozystack/cozy-health/pkg/version.Version=" + version
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, "./cmd/kubectl-health")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Arch)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", "", fmt.Errorf("build kubectl-health for %s/%s: %w", p.OS, p.Arch, err)
	}
	var buf bytes.Buffer
	gz, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(gz)
	add := func(path, name string, mode int64) error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: name, Mode: mode, Size: int64(len(b)), ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	}
	if err := add(out, bin, 0o755); err != nil {
		return "", "", err
	}
	if license != "" {
		if err := add(license, filepath.Base(license), 0o644); err != nil {
			return "", "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", "", err
	}
	if err := gz.Close(); err != nil {
		return "", "", err
	}
	name := filepath.Join(dir, fmt.Sprintf("kubectl-health_%s_%s_%s.tar.gz", version, p.OS, p.Arch))
	if err := os.WriteFile(name, buf.Bytes(), 0o644); err != nil {
		return "", "", err
	}
	sum := sha256.Sum256(buf.Bytes())
	return name, hex.EncodeToString(sum[:]), nil
}

// sourceEpoch is SOURCE_DATE_EPOCH, else HEAD's commit time, else 0.
func sourceEpoch() (time.Time, error) {
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
		}
		return time.Unix(n, 0).UTC(), nil
	}
	if out, err := exec.Command("git", "log", "-1", "--format=%ct").Output(); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil {
			return time.Unix(n, 0).UTC(), nil
		}
	}
	return time.Unix(0, 0).UTC(), nil
}

// findLicense returns the repository's license file (krew-index asks for
// one in every archive), or "" when there is none.
func findLicense() (string, error) {
	for _, n := range []string{"LICENSE", "LICENSE.txt", "LICENSE.md", "COPYING"} {
		if _, err := os.Stat(n); err == nil {
			return n, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
	}
	return "", nil
}

// toolDir is $COZY_HEALTH_<NAME>, else what hack/tooldir.sh NAME prints
// (building the tool on a miss).
func toolDir(name string) (string, error) {
	if d := os.Getenv("COZY_HEALTH_" + strings.ToUpper(name)); d != "" {
		return d, nil
	}
	cmd := exec.Command("bash", "hack/tooldir.sh", name)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("run hack/tooldir.sh %s: %w", name, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// notesHeading starts the krew section of release-notes.md.
const notesHeading = "## kubectl-health (krew)"

// appendNotes puts the archives' sha256 into the release notes hack/sign
// wrote (replacing the section of an earlier run); no notes, nothing.
func appendNotes(notes, sums string) error {
	b, err := os.ReadFile(notes)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	s, _, _ := strings.Cut(string(b), "\n"+notesHeading+"\n")
	s = strings.TrimRight(s, "\n") + "\n\n" + notesHeading + "\n\n" +
		"`kubectl krew install --manifest health.yaml` (krew/health.yaml) installs the archive of the platform it runs on; sha256:\n\n```\n" + sums + "```\n"
	return os.WriteFile(notes, []byte(s), 0o644)
}
