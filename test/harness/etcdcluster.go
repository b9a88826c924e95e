package harness

import (
	"context"
	"fmt"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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
	// Learner is true for a member that joined as a non-voting learner.
	Learner bool

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
	extra  []string   // ExtraArgs
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
	// Names names the members (default etcd-0, etcd-1, ...); when set, its
	// length is the cluster size.
	Names []string
	// Voters is how many members form the initial voting cluster (default
	// all). The others are added one at a time afterwards, as learners
	// unless LearnersAsVoters.
	Voters           int
	LearnersAsVoters bool
	// ExtraArgs are added to every member's command line (e.g.
	// --quota-backend-bytes=16777216).
	ExtraArgs []string
	// Logf, when set, is told when the cluster is started again.
	Logf func(format string, args ...any)
}

// Args returns the member's full command line, binary first, so that
// another process (the lab's fault command) can start it again.
func (m *EtcdMember) Args(c *EtcdCluster) []string {
	return append([]string{c.bin}, m.args...)
}

// StartEtcdClusterT starts an n-member cluster stopped at the test's end.
func StartEtcdClusterT(t testing.TB, n int) *EtcdCluster {
	t.Helper()
	SkipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := StartEtcdCluster(ctx, EtcdClusterOptions{Dir: t.TempDir(), Members: n})
	if err != nil {
		t.Fatalf("start etcd cluster: %v", err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

// StartEtcdCluster starts the cluster and waits until every member is
// healthy. The members bind ports picked just before they start; if one was
// taken in between (the member exits), the cluster is started again on
// fresh ports, up to three times.
func StartEtcdCluster(ctx context.Context, o EtcdClusterOptions) (*EtcdCluster, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		c, err := startEtcdCluster(ctx, o)
		if err == nil {
			return c, nil
		}
		lastErr = err
		if o.Logf != nil && attempt < 2 && ctx.Err() == nil {
			o.Logf("etcd cluster did not start (%v); starting it again on fresh ports", firstLine(err))
		}
		if c != nil {
			// A member that started holds data naming the old peer URLs.
			for _, m := range c.Members {
				_ = os.RemoveAll(m.DataDir)
			}
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

// startEtcdCluster is one attempt of StartEtcdCluster; on failure it stops
// what it started and returns the cluster (for its data dirs) with the error.
func startEtcdCluster(ctx context.Context, o EtcdClusterOptions) (*EtcdCluster, error) {
	if len(o.Names) > 0 {
		o.Members = len(o.Names)
	}
	if o.Members == 0 {
		o.Members = 3
	}
	if o.Voters <= 0 || o.Voters > o.Members {
		o.Voters = o.Members
	}
	bin, err := TestBin.Dir()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", o.Dir, err)
	}
	c := &EtcdCluster{Dir: o.Dir, bin: filepath.Join(bin, "etcd"), detach: o.Detach, extra: o.ExtraArgs}
	var initial []string
	for i := range o.Members {
		var ports [3]int
		for j := range ports {
			if ports[j], err = RebindablePort(); err != nil {
				return nil, err
			}
		}
		name := "etcd-" + strconv.Itoa(i)
		if len(o.Names) > 0 {
			name = o.Names[i]
		}
		m := &EtcdMember{
			Name:       name,
			ClientURL:  "http://127.0.0.1:" + strconv.Itoa(ports[0]),
			PeerURL:    "http://127.0.0.1:" + strconv.Itoa(ports[1]),
			MetricsURL: "http://127.0.0.1:" + strconv.Itoa(ports[2]) + "/metrics",
			DataDir:    filepath.Join(o.Dir, name),
			Learner:    i >= o.Voters && !o.LearnersAsVoters,
		}
		c.Members = append(c.Members, m)
		if i < o.Voters {
			initial = append(initial, m.Name+"="+m.PeerURL)
		}
	}
	for _, m := range c.Members[:o.Voters] {
		m.args = append(memberArgs(m, initial, "new"), o.ExtraArgs...)
		if err := c.spawn(m); err != nil {
			_ = c.Stop()
			return c, err
		}
	}
	// A voter that exits (its port was taken) leaves the others without a
	// quorum: stop waiting at once, with its error, rather than at ctx's end.
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	for _, m := range c.Members[:o.Voters] {
		go func(p *process) {
			select {
			case <-p.done:
				cancel(fmt.Errorf("%s exited (%v); log tail:\n%s", p.name, p.err, p.tail()))
			case <-wctx.Done():
			}
		}(m.proc)
	}
	for i := range c.Members[:o.Voters] {
		if err := c.WaitHealthy(wctx, i); err != nil {
			if cause := context.Cause(wctx); ctx.Err() == nil && cause != nil {
				err = cause
			}
			_ = c.Stop()
			return c, err
		}
	}
	cancel(nil)
	if err := c.addMembers(ctx, o.Voters, initial, o.ExtraArgs); err != nil {
		_ = c.Stop()
		return c, err
	}
	return c, nil
}

// addMembers adds the members from index first on, one at a time: each is
// announced to the cluster (as a learner or a voter), then started with
// initial-cluster-state=existing.
func (c *EtcdCluster) addMembers(ctx context.Context, first int, initial, extra []string) error {
	if first >= len(c.Members) {
		return nil
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.Members[0].ClientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	defer cli.Close()
	known := append([]string(nil), initial...)
	for i := first; i < len(c.Members); i++ {
		m := c.Members[i]
		// A freshly started cluster refuses reconfiguration ("unhealthy
		// cluster") until its members have been connected for a while.
		deadline := time.Now().Add(30 * time.Second)
		for {
			actx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if m.Learner {
				_, err = cli.MemberAddAsLearner(actx, []string{m.PeerURL})
			} else {
				_, err = cli.MemberAdd(actx, []string{m.PeerURL})
			}
			cancel()
			if err == nil || !strings.Contains(err.Error(), "unhealthy cluster") || time.Now().After(deadline) {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(500 * time.Millisecond):
			}
		}
		if err != nil {
			return fmt.Errorf("add etcd member %s: %w", m.Name, err)
		}
		known = append(known, m.Name+"="+m.PeerURL)
		m.args = append(memberArgs(m, known, "existing"), extra...)
		if err := c.spawn(m); err != nil {
			return err
		}
		if err := c.WaitHealthy(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// memberArgs is a member's command line (without the binary).
func memberArgs(m *EtcdMember, initialCluster []string, state string) []string {
	return []string{
		"--name=" + m.Name,
		"--data-dir=" + m.DataDir,
		"--listen-client-urls=" + m.ClientURL,
		"--advertise-client-urls=" + m.ClientURL,
		"--listen-peer-urls=" + m.PeerURL,
		"--initial-advertise-peer-urls=" + m.PeerURL,
		"--listen-metrics-urls=" + strings.TrimSuffix(m.MetricsURL, "/metrics"),
		"--initial-cluster=" + strings.Join(initialCluster, ","),
		"--initial-cluster-state=" + state,
		"--initial-cluster-token=cozy-health-test",
		"--heartbeat-interval=100",
		"--election-timeout=1000",
		"--log-level=warn",
	}
}

func (c *EtcdCluster) spawn(m *EtcdMember) error {
	p, err := spawnProcess(filepath.Join(c.Dir, m.Name+".log"), m.Name, c.bin, m.args, c.detach)
	if err != nil {
		return err
	}
	c.mu.Lock()
	m.proc = p
	c.mu.Unlock()
	return nil
}

// WaitHealthy waits until member i answers /health with 200 (it has a
// leader). A NOSPACE alarm is excluded: a member that replays a log past its
// quota (a re-added one) raises it and still serves.
func (c *EtcdCluster) WaitHealthy(ctx context.Context, i int) error {
	m := c.Members[i]
	c.mu.Lock()
	p := m.proc
	c.mu.Unlock()
	if p == nil {
		return fmt.Errorf("etcd member %s is stopped", m.Name)
	}
	if err := waitFor(ctx, p, httpOK(http.DefaultClient, m.ClientURL+"/health?exclude=NOSPACE")); err != nil {
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

// firstLine is the first line of err's message.
func firstLine(err error) string {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return msg
}
