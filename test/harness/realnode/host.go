package realnode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// What a kubelet, containerd, kube-proxy and the CNI plugins change on the
// host outside the node's own directory. The node records the host as it was
// before it started (HostRecord, saved in node.json) and puts it back when it
// stops, also from another process (`cozy-health-lab down`).
var (
	// hostSysctls are the kernel parameters the node's processes may write:
	// the kubelet sets the first three (it cannot be told not to, only to
	// fail instead: protectKernelDefaults); the others are read back to prove
	// nothing else moved.
	hostSysctls = []string{
		"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops",
		"net/ipv4/ip_forward", "net/ipv4/conf/all/route_localnet",
		"net/bridge/bridge-nf-call-iptables", "net/netfilter/nf_conntrack_max",
	}
	// hostPaths are the fixed paths the kubelet, containerd's shims and the
	// CNI plugins create whatever their configured directories are.
	hostPaths = []string{
		"/var/lib/kubelet", "/var/log/pods", "/var/log/containers",
		"/run/containerd", "/run/netns", "/var/lib/cni", "/etc/cni",
		"/usr/libexec/kubernetes",
	}
	// hostCgroups are the cgroups the kubelet and containerd create at the
	// top of every hierarchy.
	hostCgroups = []string{"kubepods", "k8s.io"}
	// hostNFTables are the nftables tables kube-proxy (nftables mode)
	// creates.
	hostNFTables = []string{"ip kube-proxy", "ip6 kube-proxy"}
)

// HostRecord is the host's state before a node started.
type HostRecord struct {
	// Sysctls maps a /proc/sys path (relative) to its value before the start.
	Sysctls map[string]string `json:"sysctls"`
	// CreatedPaths are fixed paths that did not exist before the start.
	CreatedPaths []string `json:"createdPaths"`
	// CreatedCgroups are cgroup directories that did not exist before.
	CreatedCgroups []string `json:"createdCgroups"`
	// CreatedTables are nftables tables that did not exist before.
	CreatedTables []string `json:"createdTables"`
	// NetNS are the entries of /run/netns before the start.
	NetNS []string `json:"netns"`
}

// recordHost snapshots what the node may change.
func recordHost() (*HostRecord, error) {
	r := &HostRecord{Sysctls: map[string]string{}}
	for _, k := range hostSysctls {
		b, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			continue // not on this kernel
		}
		r.Sysctls[k] = strings.TrimSpace(string(b))
	}
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			r.CreatedPaths = append(r.CreatedPaths, p)
		}
	}
	for _, h := range cgroupHierarchies() {
		for _, cg := range hostCgroups {
			p := filepath.Join(h, cg)
			if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
				r.CreatedCgroups = append(r.CreatedCgroups, p)
			}
		}
	}
	tables, err := nftTables()
	if err != nil {
		return nil, err
	}
	for _, t := range hostNFTables {
		if !slices.Contains(tables, t) {
			r.CreatedTables = append(r.CreatedTables, t)
		}
	}
	r.NetNS = listDir("/run/netns")
	return r, nil
}

// restore puts the host back as recorded; it is called after every process
// of the node stopped. Mounts under dir are unmounted first.
func (r *HostRecord) restore(dir string) error {
	var errs []error
	if err := unmountUnder(dir); err != nil {
		errs = append(errs, err)
	}
	// Network namespaces the CNI runs left behind (a sandbox the CRI could
	// not remove): unmount and remove.
	for _, ns := range listDir("/run/netns") {
		if !slices.Contains(r.NetNS, ns) && strings.HasPrefix(ns, "cni-") {
			p := filepath.Join("/run/netns", ns)
			_ = syscall.Unmount(p, syscall.MNT_DETACH)
			if err := os.Remove(p); err != nil {
				errs = append(errs, fmt.Errorf("remove netns %s: %w", p, err))
			}
		}
	}
	for _, t := range r.CreatedTables {
		if tables, err := nftTables(); err == nil && slices.Contains(tables, t) {
			if out, err := exec.Command("nft", append([]string{"delete", "table"}, strings.Fields(t)...)...).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("nft delete table %s: %w: %s", t, err, out))
			}
		}
	}
	for _, cg := range r.CreatedCgroups {
		if err := removeCgroup(cg); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range r.CreatedPaths {
		_ = unmountUnder(p)
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", p, err))
		}
	}
	keys := make([]string, 0, len(r.Sysctls))
	for k := range r.Sysctls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p := filepath.Join("/proc/sys", k)
		b, err := os.ReadFile(p)
		if err != nil || strings.TrimSpace(string(b)) == r.Sysctls[k] {
			continue
		}
		if err := os.WriteFile(p, []byte(r.Sysctls[k]), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore sysctl %s=%s: %w", k, r.Sysctls[k], err))
		}
	}
	return errors.Join(errs...)
}

// cgroupHierarchies lists the mounted cgroup hierarchies (v1 controllers,
// named hierarchies and the v2 unified one).
func cgroupHierarchies() []string {
	var out []string
	for _, m := range mounts() {
		if m.fsType == "cgroup" || m.fsType == "cgroup2" {
			out = append(out, m.point)
		}
	}
	return out
}

// mount is one line of /proc/self/mountinfo.
type mount struct{ point, fsType string }

// mounts lists this process's mounts from /proc/self/mountinfo.
func mounts() []mount {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []mount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		// The mount point is field 5; the filesystem type follows the " - ".
		m := mount{point: unescapeMount(fields[4])}
		if sep := slices.Index(fields, "-"); sep >= 0 && sep+1 < len(fields) {
			m.fsType = fields[sep+1]
		}
		out = append(out, m)
	}
	return out
}

// removeCgroup removes a cgroup directory tree, deepest first (a cgroup
// directory is removed with rmdir, never by deleting its files).
func removeCgroup(root string) error {
	if _, err := os.Stat(root); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var dirs []string
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	var last error
	for attempt := 0; attempt < 50; attempt++ {
		last = nil
		for _, d := range dirs {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				last = fmt.Errorf("remove cgroup %s: %w", d, err)
			}
		}
		if last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond) // processes still leaving it
	}
	return last
}

// unmountUnder unmounts every mount point at or under dir, deepest first.
func unmountUnder(dir string) error {
	dir = filepath.Clean(dir)
	var errs []error
	for attempt := 0; attempt < 3; attempt++ {
		mps := mountsUnder(dir)
		if len(mps) == 0 {
			return nil
		}
		errs = errs[:0]
		for _, mp := range mps {
			if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err))
			}
		}
	}
	if len(mountsUnder(dir)) > 0 {
		return errors.Join(append(errs, fmt.Errorf("mounts left under %s: %v", dir, mountsUnder(dir)))...)
	}
	return nil
}

// mountsUnder lists mount points at or under dir, deepest first.
func mountsUnder(dir string) []string {
	var out []string
	for _, m := range mounts() {
		if m.point == dir || strings.HasPrefix(m.point, dir+"/") {
			out = append(out, m.point)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return slices.Compact(out)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// nftTables lists the host's nftables tables as "family name".
func nftTables() ([]string, error) {
	out, err := exec.Command("nft", "list", "tables").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("nft list tables: %w: %s", err, out)
	}
	var tables []string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "table" {
			tables = append(tables, f[1]+" "+f[2])
		}
	}
	return tables, nil
}

func listDir(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// hostLockPath is the lock that lets one harness node at a time use this
// host: the kubelet's fixed paths, the top-level kubepods cgroups and the
// sysctls are host-wide.
const hostLockPath = "/run/cozy-health-node.lock"

// hostOwnerPath names the directory of the node that owns the host.
const hostOwnerPath = "/run/cozy-health-node.owner"

// acquireHost waits until no other harness node runs on this host and marks
// dir as the owner. A previous owner whose node.json shows no live process is
// torn down (a killed test) before the host is taken.
func acquireHost(ctx context.Context, dir string, logf func(string, ...any)) error {
	warned := false
	for {
		owner, err := tryAcquireHost(dir)
		if err != nil {
			return err
		}
		if owner == "" {
			return nil
		}
		if !warned {
			logf("waiting for the harness node in %s to stop (one real node per host)", owner)
			warned = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("another harness node runs on this host (%s; stop it with `cozy-health-lab down --dir %s`): %w", owner, owner, ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
}

// tryAcquireHost takes the host for dir and returns "", or returns the
// directory of the live node that holds it. The owner file names the owner's
// directory and the pid of the process that started it: a node whose
// starting process is gone (a killed test) is stale, whatever state it got
// to, and is torn down from its node.json before the host is taken.
func tryAcquireHost(dir string) (string, error) {
	lf, err := os.OpenFile(hostLockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", fmt.Errorf("open host lock: %w", err)
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock host: %w", err)
	}
	defer func() { _ = syscall.Flock(int(lf.Fd()), syscall.LOCK_UN) }()
	if b, err := os.ReadFile(hostOwnerPath); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 1 && f[0] != dir {
			owner, pid := f[0], 0
			if len(f) >= 2 {
				pid, _ = strconv.Atoi(f[1])
			}
			st, lerr := LoadState(owner)
			if pidAlive(pid) || (lerr == nil && st.anyAlive()) {
				return owner, nil
			}
			if lerr == nil {
				_ = st.teardownLocked() // the lock is held here: no releaseHost
			}
		}
	}
	if err := os.WriteFile(hostOwnerPath, []byte(dir+" "+strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write host owner: %w", err)
	}
	return "", nil
}

// releaseHost clears the owner mark when dir holds it.
func releaseHost(dir string) {
	lf, err := os.OpenFile(hostLockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return
	}
	defer lf.Close()
	if syscall.Flock(int(lf.Fd()), syscall.LOCK_EX) != nil {
		return
	}
	defer func() { _ = syscall.Flock(int(lf.Fd()), syscall.LOCK_UN) }()
	if b, err := os.ReadFile(hostOwnerPath); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 1 && f[0] == dir {
			_ = os.Remove(hostOwnerPath)
		}
	}
}
