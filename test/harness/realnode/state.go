package realnode

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cozystack/cozy-health/test/harness"
)

// State is what the node started and what it changed on the host, saved
// as Dir/node/node.json so that another process can stop it.
type State struct {
	Dir              string      `json:"dir"`
	Name             string      `json:"name"`
	Detached         bool        `json:"detached"`
	Bridge           string      `json:"bridge"`
	BridgeCreated    bool        `json:"bridgeCreated"`
	Address          string      `json:"address"`
	PodCIDR          string      `json:"podCIDR"`
	ContainerdSocket string      `json:"containerdSocket"`
	KubeletPort      int         `json:"kubeletPort"`
	Procs            []Proc      `json:"procs"`
	Host             *HostRecord `json:"host"`
	ControlPlanePids []int       `json:"controlPlanePids,omitempty"`
}

// Proc is one process the node started.
type Proc struct {
	Name string `json:"name"`
	Pid  int    `json:"pid"`
	Log  string `json:"log"`
}

func statePath(dir string) string { return filepath.Join(dir, "node", "node.json") }

// newState records the host and saves the state of a node about to start in
// o.Dir.
func newState(o Options, nodeDir string) (*State, error) {
	host, err := recordHost()
	if err != nil {
		return nil, err
	}
	st := &State{
		Dir: o.Dir, Name: o.NodeName, Detached: o.Detach, Bridge: Bridge, Address: Address,
		PodCIDR: PodCIDR, Host: host,
		ContainerdSocket: filepath.Join(nodeDir, "containerd", "containerd.sock"),
	}
	if len(st.ContainerdSocket) > 100 {
		return nil, fmt.Errorf("start cluster: %s is too long for a unix socket path; use a shorter Dir", st.ContainerdSocket)
	}
	return st, st.save()
}

// LoadState reads the state of the cluster whose directory is dir.
func LoadState(dir string) (*State, error) {
	b, err := os.ReadFile(statePath(dir))
	if err != nil {
		return nil, fmt.Errorf("read node state: %w", err)
	}
	s := &State{}
	if err := json.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("decode %s: %w", statePath(dir), err)
	}
	return s, nil
}

func (s *State) save() error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := statePath(s.Dir) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write node state: %w", err)
	}
	return os.Rename(tmp, statePath(s.Dir))
}

// recordControlPlane saves the pids of kube-apiserver and etcd, which a
// stop from another process ends too.
func (s *State) recordControlPlane(cp *harness.ControlPlane) error {
	etcdPid, apiPid := cp.Pids()
	s.ControlPlanePids = []int{apiPid, etcdPid}
	return s.save()
}

func (s *State) anyAlive() bool {
	for _, p := range s.Procs {
		if pidAlive(p.Pid) {
			return true
		}
	}
	for _, pid := range s.ControlPlanePids {
		if pidAlive(pid) {
			return true
		}
	}
	return false
}

// Pid returns the pid of the named process (kubelet, containerd,
// kube-proxy, coredns, kube-controller-manager, kube-scheduler), 0 if none.
func (s *State) Pid(name string) int {
	for _, p := range s.Procs {
		if p.Name == name {
			return p.Pid
		}
	}
	return 0
}

// stopProcs stops the node's processes in reverse start order, then every
// container process left in the kubepods cgroups, then containerd's shims.
func (s *State) stopProcs() error {
	var errs []error
	for i := len(s.Procs) - 1; i >= 0; i-- {
		p := s.Procs[i]
		if p.Name == "containerd" {
			// Containers first: the kubelet is gone, nothing restarts them.
			killCgroupProcs(s.Host, 5*time.Second)
		}
		if err := stopPid(p.Pid, 15*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", p.Name, err))
		}
	}
	killCgroupProcs(s.Host, 5*time.Second)
	for _, pid := range shimPids(s.ContainerdSocket) {
		if err := stopPid(pid, 5*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("stop containerd shim %d: %w", pid, err))
		}
	}
	return errors.Join(errs...)
}

// teardown stops everything recorded in the state (the control plane's
// processes too), restores the host and gives it up. Idempotent.
func (s *State) teardown() error {
	err := s.teardownLocked()
	releaseHost(s.Dir)
	return err
}

// teardownLocked is teardown without giving the host up (the caller holds
// the host lock).
func (s *State) teardownLocked() error {
	var errs []error
	if err := s.stopProcs(); err != nil {
		errs = append(errs, err)
	}
	for _, pid := range s.ControlPlanePids {
		if err := stopPid(pid, 15*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if s.Host != nil {
		if err := s.Host.restore(s.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	if s.BridgeCreated {
		if _, err := net.InterfaceByName(s.Bridge); err == nil {
			if err := run("ip", "link", "del", s.Bridge); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// killCgroupProcs terminates every process in the kubepods cgroups the node
// created (the pods' containers and sandboxes), SIGTERM then SIGKILL.
func killCgroupProcs(h *HostRecord, grace time.Duration) {
	if h == nil {
		return
	}
	pids := func() []int {
		var out []int
		for _, cg := range h.CreatedCgroups {
			_ = filepath.WalkDir(cg, func(p string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
					return nil
				}
				b, _ := os.ReadFile(p)
				for _, f := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
						out = append(out, pid)
					}
				}
				return nil
			})
		}
		return out
	}
	ps := pids()
	if len(ps) == 0 {
		return
	}
	for _, pid := range ps {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) && len(pids()) > 0 {
		time.Sleep(100 * time.Millisecond)
	}
	for _, pid := range pids() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for i := 0; i < 50 && len(pids()) > 0; i++ {
		time.Sleep(100 * time.Millisecond)
	}
}

// shimPids finds the containerd-shim-runc-v2 processes serving the node's
// containerd (their -address is its socket).
func shimPids(socket string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) == 0 || filepath.Base(args[0]) != "containerd-shim-runc-v2" {
			continue
		}
		for i, a := range args {
			if a == "-address" && i+1 < len(args) && args[i+1] == socket {
				out = append(out, pid)
			}
		}
	}
	return out
}

func pidAlive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	st := harness.ProcState(pid)
	return st != 0 && st != 'Z'
}

// stopPid sends SIGTERM, waits up to grace, then SIGKILL. A pid not running
// is not an error.
func stopPid(pid int, grace time.Duration) error {
	if !pidAlive(pid) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %d: %w", pid, err)
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !pidAlive(pid) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for i := 0; i < 100 && pidAlive(pid); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	if pidAlive(pid) {
		return fmt.Errorf("pid %d survived SIGKILL", pid)
	}
	return nil
}
