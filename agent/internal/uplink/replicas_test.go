package uplink

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cozystack/cozy-health/pkg/tlsutil"
	"github.com/cozystack/cozy-health/test/harness"
)

// The aggregator replicas of these tests are real ingest servers, each its
// own process (aggregator/internal/ingest/cmd/ingest-test-server), so they
// can be killed, frozen with SIGSTOP and restarted on the same port.

var (
	serverBinOnce sync.Once
	serverBin     string
	serverBinErr  error
)

func ingestServerBinary(t *testing.T) string {
	t.Helper()
	serverBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cozy-health-uplink-test")
		if err != nil {
			serverBinErr = err
			return
		}
		serverBin = filepath.Join(dir, "ingest-test-server")
		out, err := exec.Command("go", "build", "-o", serverBin, "github.com/cozystack/cozy-health/aggregator/internal/ingest/cmd/ingest-test-server").CombinedOutput()
		if err != nil {
			serverBinErr = fmt.Errorf("build ingest-test-server: %w: %s", err, out)
		}
	})
	require.NoError(t, serverBinErr)
	return serverBin
}

// accepted is one report a replica accepted.
type accepted struct {
	Node       string `json:"node"`
	Instance   string `json:"instance"`
	Sequence   uint64 `json:"sequence"`
	ReceivedAt int64  `json:"receivedAtUnixNano"`
}

// replicaProc is one ingest server process.
type replicaProc struct {
	t    *testing.T
	addr string
	args []string
	cmd  *exec.Cmd
	// exited is closed once the process has exited and its output is read.
	exited <-chan struct{}

	mu       sync.Mutex
	accepted []accepted
}

// freeAddr returns a free loopback address a replica can bind again after
// it was killed (see harness.RebindablePort).
func freeAddr(t *testing.T) string {
	t.Helper()
	p, err := harness.RebindablePort()
	require.NoError(t, err)
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
}

// startReplica starts an ingest server on a free loopback port with the given
// TLS files and extra flags.
func startReplica(t *testing.T, files tlsutil.Files, extra ...string) *replicaProc {
	t.Helper()
	return startReplicaAt(t, files, freeAddr(t), extra...)
}

// startReplicaAt is startReplica on addr.
func startReplicaAt(t *testing.T, files tlsutil.Files, addr string, extra ...string) *replicaProc {
	t.Helper()
	r := &replicaProc{t: t, addr: addr}
	r.args = append([]string{"--listen", r.addr, "--tls-cert", files.CertFile, "--tls-key", files.KeyFile}, extra...)
	r.start()
	t.Cleanup(r.kill)
	return r
}

func (r *replicaProc) start() {
	r.t.Helper()
	cmd := exec.Command(ingestServerBinary(r.t), r.args...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(r.t, err)
	logf, err := os.Create(filepath.Join(r.t.TempDir(), "replica.log"))
	require.NoError(r.t, err)
	cmd.Stderr = logf
	require.NoError(r.t, cmd.Start())
	r.cmd = cmd
	exited := make(chan struct{})
	r.exited = exited
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var a accepted
			if json.Unmarshal(sc.Bytes(), &a) == nil {
				r.mu.Lock()
				r.accepted = append(r.accepted, a)
				r.mu.Unlock()
			}
		}
		_ = cmd.Wait() // after every read of stdout, as os/exec asks
	}()
	// Wait until it listens. A process that exited (its port taken) fails
	// here with its log, rather than the probe being answered by whoever
	// holds the port.
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-exited:
			log, _ := os.ReadFile(logf.Name())
			r.t.Fatalf("replica %s exited before listening: %s", r.addr, log)
		default:
		}
		if c, err := net.DialTimeout("tcp", r.addr, 200*time.Millisecond); err == nil {
			_ = c.Close()
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("replica %s did not start listening (log %s)", r.addr, logf.Name())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill SIGKILLs the process: its sockets are reset by the kernel.
func (r *replicaProc) kill() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGCONT)
	_ = r.cmd.Process.Kill()
	<-r.exited
	r.cmd = nil
}

// freeze SIGSTOPs the process: connections stay open and silent.
func (r *replicaProc) freeze() { require.NoError(r.t, r.cmd.Process.Signal(syscall.SIGSTOP)) }

// thaw SIGCONTs the process.
func (r *replicaProc) thaw() { require.NoError(r.t, r.cmd.Process.Signal(syscall.SIGCONT)) }

// reports returns what the replica accepted so far.
func (r *replicaProc) reports() []accepted {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]accepted(nil), r.accepted...)
}

// has reports whether the replica accepted seq.
func (r *replicaProc) has(seq uint64) (accepted, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.accepted {
		if a.Sequence == seq {
			return a, true
		}
	}
	return accepted{}, false
}

func (r *replicaProc) maxSeq() uint64 {
	var m uint64
	for _, a := range r.reports() {
		m = max(m, a.Sequence)
	}
	return m
}
