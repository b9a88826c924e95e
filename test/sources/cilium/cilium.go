// Package cilium serves Cilium's agent REST API on a unix socket (GET
// /v1/healthz answers a StatusResponse in Cilium's JSON shape whose overall
// and per-subsystem states can be set: the lab's cilium-fail fault), and
// cilium-health's API on its own socket (health.go: the node-to-node view,
// the lab's cilium-unreachable fault).
package cilium

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/cozystack/cozy-health/test/sources/fault"
)

// Server is a Cilium agent API stand-in.
type Server struct {
	// Socket is the unix socket path.
	Socket string
	// Fault switches misbehaviour.
	Fault fault.Switch

	srv *http.Server
	// mu guards states: component name -> {state, msg}.
	mu     sync.Mutex
	states map[string][2]string
}

// Start listens on socket (removing a stale file) and serves.
func Start(socket string) (*Server, error) {
	_ = os.Remove(socket)
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("cilium stand-in: listen: %w", err)
	}
	s := &Server{Socket: socket, states: map[string][2]string{
		"cilium":            {"Ok", "1.19.5 (v1.19.5-4b7d8d5b)"},
		"kvstore":           {"Disabled", ""},
		"container-runtime": {"Ok", ""},
		"kubernetes":        {"Ok", "1.37 (v1.37.2) [linux/amd64]"},
		"ciliumHealth":      {"Ok", "Health check ok"},
		"cni-file":          {"Ok", "/host/etc/cni/net.d/05-cilium.conflist"},
	}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/healthz", s.healthz)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// SetState sets a component's state (Ok, Warning, Failure, Disabled):
// "cilium" (the overall verdict), "kvstore", "container-runtime",
// "kubernetes", "ciliumHealth" or "cni-file".
func (s *Server) SetState(component, state, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.states[component] = [2]string{state, msg}
}

// Fail sets the overall state to Failure as Cilium does when its container
// runtime probe fails.
func (s *Server) Fail(msg string) {
	s.SetState("container-runtime", "Failure", msg)
	s.SetState("cilium", "Failure", "Container runtime is not ready: "+msg)
}

// Recover puts every component back to Ok.
func (s *Server) Recover() {
	s.SetState("container-runtime", "Ok", "")
	s.SetState("cilium", "Ok", "1.19.5 (v1.19.5-4b7d8d5b)")
}

// Close stops serving and removes the socket.
func (s *Server) Close() error {
	err := s.srv.Close()
	_ = os.Remove(s.Socket)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func (s *Server) status(name string) map[string]any {
	st := s.states[name]
	out := map[string]any{"state": st[0]}
	if st[1] != "" {
		out["msg"] = st[1]
	}
	return out
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	if s.Fault.Apply(w, r) {
		return
	}
	s.mu.Lock()
	k8s := s.status("kubernetes")
	k8s["k8s-api-versions"] = []string{"cilium/v2::CiliumNode", "core/v1::Namespace", "core/v1::Node", "core/v1::Pods", "discovery/v1::EndpointSlice", "networking.k8s.io/v1::NetworkPolicy"}
	body := map[string]any{
		"cilium":            s.status("cilium"),
		"kvstore":           s.status("kvstore"),
		"container-runtime": s.status("container-runtime"),
		"kubernetes":        k8s,
		"cni-file":          s.status("cni-file"),
		"cni-chaining":      map[string]any{"mode": "none"},
		"cluster": map[string]any{
			"ciliumHealth": s.status("ciliumHealth"),
			"self":         "default/node-0",
			"nodes": []map[string]any{{
				"name": "default/node-0", "primary-address": map[string]any{"ipv4": map[string]any{"ip": "10.0.0.10", "enabled": true}},
			}},
		},
		"ipam":                   map[string]any{"ipv4": []string{"10.244.0.0/24"}, "status": map[string]any{}},
		"controllers":            []map[string]any{{"name": "sync-host-ips", "status": map[string]any{"success-count": 42, "failure-count": 0, "consecutive-failure-count": 0, "last-success-timestamp": time.Now().UTC().Format(time.RFC3339Nano)}}},
		"proxy":                  map[string]any{"ip": "10.244.0.1", "port-range": "10000-20000", "total-redirects": 0},
		"encryption":             map[string]any{"mode": "Disabled"},
		"kube-proxy-replacement": map[string]any{"mode": "True", "devices": []map[string]any{{"name": "eth0", "ip": []string{"10.0.0.10"}}}},
		"masquerading":           map[string]any{"enabled": true, "mode": "BPF"},
		"routing":                map[string]any{"intra-host-routing-mode": "BPF", "inter-host-routing-mode": "Tunnel", "tunnel-protocol": "vxlan"},
		"host-firewall":          map[string]any{"mode": "Disabled"},
		"bandwidth-manager":      map[string]any{"enabled": false},
		"clock-source":           map[string]any{"mode": "ktime"},
		"client-id":              1,
		"stale":                  map[string]any{},
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}
