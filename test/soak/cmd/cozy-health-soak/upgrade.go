package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/cozystack/cozy-health/test/lab"
	"github.com/cozystack/cozy-health/test/soak"
)

// baselineFile names the previous release when --from is not given (the
// file `buf breaking` reads too): a git ref, one line.
const baselineFile = "hack/release-baseline"

// previousRelease resolves the ref of the release to upgrade from: from,
// else the newest v* tag, else hack/release-baseline.
func previousRelease(ctx context.Context, repo, from string) (string, error) {
	ref := from
	if ref == "" {
		out, err := exec.CommandContext(ctx, "git", "-C", repo, "describe", "--tags", "--abbrev=0", "--match", "v*").Output()
		if err == nil {
			ref = strings.TrimSpace(string(out))
		}
	}
	if ref == "" {
		b, err := os.ReadFile(filepath.Join(repo, baselineFile))
		if err != nil {
			return "", fmt.Errorf("no --from, no v* tag and no %s: %w", baselineFile, err)
		}
		ref = strings.TrimSpace(string(b))
	}
	out, err := exec.CommandContext(ctx, "git", "-C", repo, "rev-parse", "--verify", ref+"^{commit}").Output()
	if err != nil {
		return "", fmt.Errorf("git ref %q: %w", ref, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// buildRelease builds cozy-health-agent and cozy-health-aggregator of
// commit into the cache (${COZY_HEALTH_CACHE:-~/.cache/cozy-health}/
// release/COMMIT), once: a hit costs a stat.
func buildRelease(ctx context.Context, repo, commit string, logf func(string, ...any)) (string, error) {
	cache := os.Getenv("COZY_HEALTH_CACHE")
	if cache == "" {
		c, err := os.UserCacheDir()
		if err != nil {
			return "", err
		}
		cache = filepath.Join(c, "cozy-health")
	}
	dir := filepath.Join(cache, "release", commit)
	bins := []string{"cozy-health-agent", "cozy-health-aggregator"}
	complete := func() bool {
		for _, b := range bins {
			if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
				return false
			}
		}
		return true
	}
	if complete() {
		return dir, nil
	}
	src, err := os.MkdirTemp("", "cozy-health-release-src.")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(src)
	logf("building the previous release %s from git into %s", commit[:12], dir)
	archive := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", repo, commit, src)
	if out, err := archive.CombinedOutput(); err != nil {
		return "", fmt.Errorf("git archive %s: %w: %s", commit, err, out)
	}
	tmp := dir + ".tmp"
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", err
	}
	for _, b := range bins {
		pkg := "./" + strings.TrimPrefix(b, "cozy-health-")
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags",
			"-s -w -X github.com/cozystack/cozy-health/pkg/version.Version="+commit[:12], "-o", filepath.Join(tmp, b), pkg)
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("build %s at %s: %w: %s", b, commit, err, out)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	return dir, nil
}

// mixedBin is a directory with the old release's agent and aggregator and
// this tree's cozy-health-lab (the lab that drives them): where the lab
// starts from.
func mixedBin(old, cur string) (string, error) {
	dir, err := os.MkdirTemp("", "cozy-health-upgrade-bin.")
	if err != nil {
		return "", err
	}
	for name, from := range map[string]string{
		"cozy-health-agent": old, "cozy-health-aggregator": old, "cozy-health-lab": cur,
	} {
		if err := os.Symlink(filepath.Join(from, name), filepath.Join(dir, name)); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// upgrade runs the upgrade scenario on a lab started from the previous
// release's binaries.
func upgrade(ctx context.Context, lo lab.Options, from string, seed int64, logf func(string, ...any)) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "cozy-health-soak: upgrade:", err)
		return 2
	}
	repo, err := exec.CommandContext(ctx, "git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return fail(fmt.Errorf("run it inside the repository: %w", err))
	}
	commit, err := previousRelease(ctx, strings.TrimSpace(string(repo)), from)
	if err != nil {
		return fail(err)
	}
	old, err := buildRelease(ctx, strings.TrimSpace(string(repo)), commit, logf)
	if err != nil {
		return fail(err)
	}
	cur := os.Getenv("COZY_HEALTH_BIN")
	if cur == "" {
		return fail(fmt.Errorf("COZY_HEALTH_BIN names no directory of this tree's binaries (make build)"))
	}
	mixed, err := mixedBin(old, cur)
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(mixed)
	lo.BinDir = mixed
	logf("upgrade: from %s (%s) to this tree (%s)", commit[:12], old, cur)
	l, err := lab.Up(ctx, lo)
	if err != nil {
		return fail(fmt.Errorf("lab: %w", err))
	}
	defer func() {
		if err := l.Down(); err != nil {
			fmt.Fprintln(os.Stderr, "cozy-health-soak: lab down:", err)
		}
	}()
	rep, err := soak.RunUpgrade(ctx, l.State.Dir, soak.UpgradeOptions{Options: soak.Options{Seed: seed, Log: logf}, Old: old, New: cur})
	if rep != nil {
		rep.Print(os.Stdout)
	}
	fmt.Printf("lab logs: %s/logs\n", l.State.Dir)
	if err != nil {
		return fail(err)
	}
	if len(rep.Failures()) > 0 {
		return 1
	}
	return 0
}
