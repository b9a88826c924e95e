package harness

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EtcdMember is one member of an EtcdCluster.
type EtcdMember struct {
	// Name is the member name (also its Talos hostname in the shims).
	Name string
	// ClientURL is the plain-HTTP client URL.
	ClientURL string
	// PeerURL is the plain-HTTP peer URL.
	PeerURL string
	// MetricsURL is the --listen-metrics-urls URL plus /metrics.
	MetricsURL string
	// DataDir is the member's data directory (kept across Stop/Start).
	DataDir string

	args []string
	proc *process
}

// EtcdCluster is a real multi-member etcd cluster of the testbin etcd binary
// on loopback, for tests that need quorum behaviour (the Talos shim serves
// each member's view the way Talos' machined does).
type EtcdCluster struct {
	Dir     string
	Members []*EtcdMember

	bin    string
	detach bool
	mu     sync.Mutex // guards the members' proc fields
}

// EtcdClusterOptions configure StartEtcdCluster.
type EtcdClusterOptions struct {
	// Dir holds the data dirs and logs; required.
	Dir string
	// Members is the cluster size (default 3).
	Members int
	// Detach starts the members in their own session so they outlive the
	// caller (the local lab); otherwise they die with it.
	Detach bool
}

// StartEtcdClusterT starts an n-member cluster stopped at the test's end.
func StartEtcdClusterT(t testing.TB, n int) *EtcdCluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := StartEtcdCluster(ctx, EtcdClusterOptions{Dir: t.TempDir(), Members: n})
	if err != nil {
		t.Fatalf("start etcd cluster: %v", err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

// StartEtcdCluster starts the cluster and waits until every member is healthy.
func StartEtcdCluster(ctx context.Context, o EtcdClusterOptions) (*EtcdCluster, error) {
	if o.Members == 0 {
		o.Members = 3
	}
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	c := &EtcdCluster{Dir: o.Dir, bin: filepath.Join(bin, "etcd"), detach: o.Detach}
	var initial []string
	for i := range o.Members {
		var ports [3]int
		for j := range ports {
			if ports[j], err = freePort(); err != nil {
				return nil, err
			}
		}
		m := &EtcdMember{
			Name:       "etcd-" + strconv.Itoa(i),
			ClientURL:  "http://127.0.0.1:" + strconv.Itoa(ports[0]),
			PeerURL:    "http://127.0.0.1:" + strconv.Itoa(ports[1]),
			MetricsURL: "http://127.0.0.1:" + strconv.Itoa(ports[2]) + "/metrics",
			DataDir:    filepath.Join(o.Dir, "etcd-"+strconv.Itoa(i)),
		}
		c.Members = append(c.Members, m)
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	for _, m := range c.Members {
		m.args = []string{
			"--name=" + m.Name,
			"--data-dir=" + m.DataDir,
			"--listen-client-urls=" + m.ClientURL,
			"--advertise-client-urls=" + m.ClientURL,
			"--listen-peer-urls=" + m.PeerURL,
			"--initial-advertise-peer-urls=" + m.PeerURL,
			"--listen-metrics-urls=" + strings.TrimSuffix(m.MetricsURL, "/metrics"),
			"--initial-cluster=" + strings.Join(initial, ","),
			"--initial-cluster-state=new",
			"--initial-cluster-token=cozy-health-test",
			"--log-level=warn",
		}
		if err := c.spawn(m); err != nil {
			_ = c.Stop()
			return nil, err
		}
	}
	for i := range c.Members {
		if err := c.WaitHealthy(ctx, i); err != nil {
			_ = c.Stop()
			return nil, err
		}
	}
	return c, nil
}

func (c *EtcdCluster) spawn(m *EtcdMember) error {
	logPath := filepath.Join(c.Dir, m.Name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open %s log: %w", m.Name, err)
	}
	cmd := exec.Command(c.bin, m.args...)
	cmd.Stdout, cmd.Stderr = f, f
	if c.detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", m.Name, err)
	}
	p := &process{name: m.Name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	c.mu.Lock()
	m.proc = p
	c.mu.Unlock()
	return nil
}

// WaitHealthy waits until member i answers /health with 200 (it has a leader).
func (c *EtcdCluster) WaitHealthy(ctx context.Context, i int) error {
	m := c.Members[i]
	c.mu.Lock()
	p := m.proc
	c.mu.Unlock()
	if p == nil {
		return fmt.Errorf("etcd member %s is stopped", m.Name)
	}
	if err := waitFor(ctx, p, func() error {
		resp, err := http.Get(m.ClientURL + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("etcd /health: %s", resp.Status)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("wait for %s: %w", m.Name, err)
	}
	return nil
}

// StopMember stops member i (SIGTERM), keeping its data.
func (c *EtcdCluster) StopMember(i int) error {
	c.mu.Lock()
	p := c.Members[i].proc
	c.Members[i].proc = nil
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.stop()
}

// StartMember restarts a stopped member i from its data and waits until it
// is healthy.
func (c *EtcdCluster) StartMember(ctx context.Context, i int) error {
	c.mu.Lock()
	running := c.Members[i].proc != nil
	c.mu.Unlock()
	if running {
		return nil
	}
	if err := c.spawn(c.Members[i]); err != nil {
		return err
	}
	return c.WaitHealthy(ctx, i)
}

// Pid returns member i's process id, or 0 when it is stopped.
func (c *EtcdCluster) Pid(i int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.Members[i].proc; p != nil {
		return p.cmd.Process.Pid
	}
	return 0
}

// Stop stops every member.
func (c *EtcdCluster) Stop() error {
	var first error
	for i := range c.Members {
		if err := c.StopMember(i); err != nil && first == nil {
			first = err
		}
	}
	return first
}
