package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
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
	// kubelets renews the nodes' Leases (kubelet.go).
	kubelets *kubelets
}

// Serve runs the lab daemon for the lab in dir until ctx ends. The lab's
// addresses are read from dir/lab.json (written by up before it starts the
// daemon); listeners are the sockets up bound for them and handed over
// (InheritedListeners), matched by address; an address without one is
// bound here. The daemon writes the talosconfigs.
func Serve(ctx context.Context, dir string, listeners []net.Listener) error {
	bound := make(map[string]net.Listener, len(listeners))
	for _, l := range listeners {
		bound[l.Addr().String()] = l
	}
	s, err := LoadState(dir)
	if err != nil {
		for _, l := range listeners {
			_ = l.Close()
		}
		return err
	}
	d, err := startSources(s, bound)
	if err != nil {
		return err
	}
	defer d.stop()
	return d.serveControl(ctx, s.ControlSocket)
}

// InheritedListeners turns the n descriptors after stderr (3, 4, ...), the
// listeners up hands to `cozy-health-lab serve --listen-fds n`, into
// listeners.
func InheritedListeners(n int) ([]net.Listener, error) {
	out := make([]net.Listener, 0, n)
	for i := range n {
		f := os.NewFile(uintptr(3+i), fmt.Sprintf("listener-%d", i))
		if f == nil {
			return nil, fmt.Errorf("inherited listener %d: no descriptor %d", i, 3+i)
		}
		l, err := net.FileListener(f)
		_ = f.Close()
		if err != nil {
			return nil, fmt.Errorf("inherited listener %d: %w", i, err)
		}
		out = append(out, l)
	}
	return out, nil
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
	if fault == "kubelet-stop" || fault == "kubelet-start" {
		return d.kubelets.fault(node, fault)
	}
	return ns.fault(fault, arg)
}

// startDaemon binds the source addresses, records them in lab.json and runs
// the daemon: as a detached `cozy-health-lab serve` process, or in-process.
// The listeners are handed to the daemon, never closed and bound again, so
// no other process can take a port between its choice and its use.
func (l *Lab) startDaemon(ctx context.Context) (err error) {
	s := l.State
	s.ControlSocket = filepath.Join(s.Dir, "lab.sock")
	var listeners []net.Listener
	defer func() {
		for _, ln := range listeners {
			_ = ln.Close()
		}
	}()
	bind := func() (string, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", fmt.Errorf("lab: bind a source address: %w", err)
		}
		listeners = append(listeners, ln)
		return ln.Addr().String(), nil
	}
	linstorAddr, err := bind()
	if err != nil {
		return err
	}
	realOVN, err := useRealOVN()
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	for i := range s.Nodes {
		n := &s.Nodes[i]
		nd := filepath.Join(s.Dir, "nodes", n.Name)
		if err := os.MkdirAll(nd, 0o700); err != nil {
			return fmt.Errorf("lab: %w", err)
		}
		if n.Talos, err = bind(); err != nil {
			return err
		}
		n.Talosconfig = filepath.Join(nd, "talosconfig")
		metrics, err := bind()
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
		n.RealOVS = realOVN && i == 0
		n.Uplinks = nil
		for range Aggregators {
			a, err := bind()
			if err != nil {
				return err
			}
			n.Uplinks = append(n.Uplinks, a)
		}
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
		files := make([]*os.File, 0, len(listeners))
		defer func() {
			for _, f := range files {
				_ = f.Close()
			}
		}()
		for _, ln := range listeners {
			f, err := ln.(*net.TCPListener).File()
			if err != nil {
				return fmt.Errorf("lab: hand a listener to the daemon: %w", err)
			}
			files = append(files, f)
		}
		args := []string{self, "serve", "--dir", s.Dir, "--listen-fds", strconv.Itoa(len(files))}
		p, err := startProc(s.Dir, "lab-daemon", args, true, files...)
		if err != nil {
			return err
		}
		s.DaemonPid = p.Pid
		if err := s.save(); err != nil {
			return err
		}
	} else {
		bound := make(map[string]net.Listener, len(listeners))
		for _, ln := range listeners {
			bound[ln.Addr().String()] = ln
		}
		listeners = nil // startSources owns them now
		d, err := startSources(s, bound)
		if err != nil {
			return err
		}
		dctx, cancel := context.WithCancel(context.Background())
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
	return waitControl(ctx, s.ControlSocket, s.DaemonPid, filepath.Join(s.Dir, "logs", "lab-daemon.log"))
}

// waitControl waits until the daemon answers on its control socket. A
// daemon process that exits first is reported with the last line of its
// log (its error).
func waitControl(ctx context.Context, socket string, pid int, log string) error {
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
			return fmt.Errorf("lab daemon (pid %d) exited: %s (log: %s)", pid, lastLine(log), log)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("lab daemon did not answer on %s", socket)
}

// lastLine is the last non-empty line of the file at path, or a note that
// it has none.
func lastLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "no log"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if last := strings.TrimSpace(lines[len(lines)-1]); last != "" {
		return last
	}
	return "empty log"
}
