package harness

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
)

// RouteClusterEgress restarts kube-apiserver with an egress selector that
// sends its "cluster" traffic (the service, pod and node proxy
// subresources) through an HTTP CONNECT proxy on a unix socket in Dir. The
// proxy hands every tunnel to dial with the address the apiserver asked for
// (an EndpointSlice address, which the apiserver requires to be
// non-loopback); dial decides where it really goes, e.g. to a test server
// on 127.0.0.1. Nothing is ever sent to the requested address itself.
// The returned stop closes the proxy. Written for the drain check's
// kubectl-health service-proxy test (not part of the lead's harness files).
func (c *ControlPlane) RouteClusterEgress(ctx context.Context, dial func(ctx context.Context, target string) (net.Conn, error)) (stop func(), err error) {
	sock := filepath.Join(c.Dir, "egress.sock")
	_ = os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("listen egress proxy socket: %w", err)
	}
	var wg sync.WaitGroup
	pctx, cancel := context.WithCancel(context.Background())
	stop = func() {
		cancel()
		_ = ln.Close()
		wg.Wait()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				serveConnect(pctx, conn, dial)
			}()
		}
	}()

	cfgPath := filepath.Join(c.Dir, "egress-selector.yaml")
	cfg := fmt.Sprintf(`apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: %s
`, sock)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		stop()
		return nil, fmt.Errorf("write egress selector config: %w", err)
	}
	if err := c.StopAPIServer(); err != nil {
		stop()
		return nil, err
	}
	c.mu.Lock()
	c.apiArgs = append(c.apiArgs, "--egress-selector-config-file="+cfgPath)
	c.mu.Unlock()
	if err := c.StartAPIServer(ctx); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// serveConnect answers one HTTP CONNECT and pipes the tunnel.
func serveConnect(ctx context.Context, conn net.Conn, dial func(ctx context.Context, target string) (net.Conn, error)) {
	defer conn.Close()
	br := bufio.NewReader(conn)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	if req.Method != http.MethodConnect {
		_, _ = io.WriteString(conn, "HTTP/1.1 405 Method Not Allowed\r\n\r\n")
		return
	}
	up, err := dial(ctx, req.URL.Host)
	if err != nil {
		_, _ = fmt.Fprintf(conn, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	defer up.Close()
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, br); done <- struct{}{} }()
	go func() { _, _ = io.Copy(conn, up); done <- struct{}{} }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
