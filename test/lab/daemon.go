package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cozystack/cozy-health/test/harness"
)

// The lab daemon hosts the in-process source servers of every simulated
// node (Talos MachineService shim, Cilium and cilium-health sockets,
// kube-ovn's OVS/OVN sockets and ovn-central members, LINSTOR controller
// REST, the etcd metrics proxy) and a control socket the
// fault subcommand talks to. `up` runs it as its own process (`serve`) so
// the lab outlives `up`; tests run it in-process.

// daemon is the running set of source servers.
type daemon struct {
	mu    sync.Mutex // serialises faults
	nodes map[string]*nodeSources
	close []func()
}

// Serve runs the lab daemon for the lab in dir until ctx ends. The lab's
// addresses are read from dir/lab.json (written by up before it starts the
// daemon); the daemon writes the talosconfigs.
func Serve(ctx context.Context, dir string) error {
	s, err := LoadState(dir)
	if err != nil {
		return err
	}
	d, err := startSources(ctx, s)
	if err != nil {
		return err
	}
	defer d.stop()
	return d.serveControl(ctx, s.ControlSocket)
}

func (d *daemon) stop() {
	for i := len(d.close) - 1; i >= 0; i-- {
		d.close[i]()
	}
}

// serveControl answers POST /v1/fault?node=&fault=&arg= on a unix socket.
func (d *daemon) serveControl(ctx context.Context, socket string) error {
	_ = os.Remove(socket)
	l, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("listen on control socket %s: %w", socket, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/fault", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		msg, err := d.fault(q.Get("node"), q.Get("fault"), q.Get("arg"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintln(w, msg)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("control socket: %w", err)
	}
	return nil
}

func (d *daemon) fault(node, fault, arg string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ns, ok := d.nodes[node]
	if !ok {
		return "", fmt.Errorf("lab has no node %q", node)
	}
	return ns.fault(fault, arg)
}

// startDaemon picks the source addresses, records them in lab.json and runs
// the daemon: as a detached `cozy-health-lab serve` process, or in-process.
func (l *Lab) startDaemon(ctx context.Context) error {
	s := l.State
	s.ControlSocket = filepath.Join(s.Dir, "lab.sock")
	linstorAddr, err := harness.FreeAddr()
	if err != nil {
		return err
	}
	for i := range s.Nodes {
		n := &s.Nodes[i]
		nd := filepath.Join(s.Dir, "nodes", n.Name)
		if err := os.MkdirAll(nd, 0o700); err != nil {
			return fmt.Errorf("lab: %w", err)
		}
		if n.Talos, err = harness.FreeAddr(); err != nil {
			return err
		}
		n.Talosconfig = filepath.Join(nd, "talosconfig")
		metrics, err := harness.FreeAddr()
		if err != nil {
			return err
		}
		n.EtcdMetrics = "http://" + metrics + "/metrics"
		n.CiliumSocket = filepath.Join(nd, "cilium.sock")
		n.CiliumHealth = filepath.Join(nd, "health.sock")
		n.OVSRun, n.OVNRun, n.OVNDBDir = filepath.Join(nd, "ovs"), filepath.Join(nd, "ovn"), filepath.Join(nd, "ovn-db")
		for _, d := range []string{n.OVSRun, n.OVNRun, n.OVNDBDir} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				return fmt.Errorf("lab: %w", err)
			}
		}
		n.OVNCentral = i < ovnCentralMembers
		n.LinstorURL = "http://" + linstorAddr
	}
	if err := s.save(); err != nil {
		return err
	}
	if l.opts.Detach {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("lab: find own binary: %w", err)
		}
		if filepath.Base(self) != "cozy-health-lab" {
			self = filepath.Join(l.opts.BinDir, "cozy-health-lab")
		}
		p, err := startProc(s.Dir, "lab-daemon", []string{self, "serve", "--dir", s.Dir}, true)
		if err != nil {
			return err
		}
		s.DaemonPid = p.Pid
		if err := s.save(); err != nil {
			return err
		}
	} else {
		dctx, cancel := context.WithCancel(context.Background())
		d, err := startSources(dctx, s)
		if err != nil {
			cancel()
			return err
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = d.serveControl(dctx, s.ControlSocket)
		}()
		l.stopDaemon = func() {
			cancel()
			<-done
			d.stop()
		}
	}
	return waitControl(ctx, s.ControlSocket, s.DaemonPid)
}

// waitControl waits until the daemon answers on its control socket.
func waitControl(ctx context.Context, socket string, pid int) error {
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}, Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := client.Get("http://lab/healthz")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		if pid != 0 && !alive(pid) {
			return fmt.Errorf("lab daemon (pid %d) exited; see its log", pid)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("lab daemon did not answer on %s", socket)
}
