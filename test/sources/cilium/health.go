package cilium

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/cozystack/cozy-health/test/sources/fault"
)

// Health serves cilium-health's API on its unix socket
// (/var/run/cilium/health.sock, base path /v1beta): GET /v1beta/status
// answers a HealthStatusResponse in the JSON shape of Cilium's
// api/v1/health/models (timestamp, local{name}, nodes[]{name,
// host{primary-address{ip, icmp{latency,status}, http{...}}},
// health-endpoint{primary-address{...}}}), as the prober last saw every node.
// Node names are cilium's full names, "<cluster>/<node>"; a probe's status
// is empty on success and a human-readable error otherwise, with latencies
// in nanoseconds.
type Health struct {
	// Socket is the unix socket path.
	Socket string
	// Fault switches misbehaviour.
	Fault fault.Switch

	self string
	srv  *http.Server
	// mu guards nodes and unreachable.
	mu          sync.Mutex
	nodes       map[string]string // node -> IP
	unreachable map[string]bool
	endpointBad map[string]bool
}

// HealthCluster is the cluster name cilium prefixes node names with.
const HealthCluster = "default"

// StartHealth serves cilium-health for node self, probing nodes (name ->
// node IP, self included).
func StartHealth(socket, self string, nodes map[string]string) (*Health, error) {
	_ = os.Remove(socket)
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("cilium-health stand-in: listen: %w", err)
	}
	h := &Health{Socket: socket, self: self, nodes: map[string]string{}, unreachable: map[string]bool{}, endpointBad: map[string]bool{}}
	for n, ip := range nodes {
		h.nodes[n] = ip
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1beta/status", h.status)
	h.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = h.srv.Serve(ln) }()
	return h, nil
}

// SetUnreachable makes node's address (ICMP and HTTP) and health endpoint
// unreachable from this node, or reachable again.
func (h *Health) SetUnreachable(node string, unreachable bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unreachable[node] = unreachable
}

// SetEndpointUnreachable makes only node's health endpoint (on the pod
// network) unreachable, or reachable again.
func (h *Health) SetEndpointUnreachable(node string, unreachable bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.endpointBad[node] = unreachable
}

// Close stops serving and removes the socket.
func (h *Health) Close() error {
	err := h.srv.Close()
	_ = os.Remove(h.Socket)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func probe(ok bool, latency int64, ip string, port int) map[string]any {
	if ok {
		return map[string]any{"latency": latency}
	}
	if port == 0 {
		return map[string]any{"status": "Connection timed out"}
	}
	return map[string]any{"status": fmt.Sprintf("Get \"http://%s:%d/hello\": dial tcp %s:%d: connect: no route to host", ip, port, ip, port)}
}

func path(ip string, ok bool, latency int64) map[string]any {
	return map[string]any{"ip": ip, "icmp": probe(ok, latency, ip, 0), "http": probe(ok, latency*3, ip, 4240)}
}

func (h *Health) status(w http.ResponseWriter, r *http.Request) {
	if h.Fault.Apply(w, r) {
		return
	}
	h.mu.Lock()
	names := make([]string, 0, len(h.nodes))
	for n := range h.nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	nodes := make([]map[string]any, 0, len(names))
	for i, n := range names {
		ip := h.nodes[n]
		hostOK := !h.unreachable[n]
		epOK := hostOK && !h.endpointBad[n]
		epIP := fmt.Sprintf("10.244.%d.%d", i, 100+i)
		nodes = append(nodes, map[string]any{
			"name":            HealthCluster + "/" + n,
			"host":            map[string]any{"primary-address": path(ip, hostOK, int64(180000+i*7000))},
			"health-endpoint": map[string]any{"primary-address": path(epIP, epOK, int64(240000+i*9000))},
		})
	}
	h.mu.Unlock()
	body := map[string]any{
		"timestamp": time.Now().UTC().Format(time.RFC3339),
		"local":     map[string]any{"name": HealthCluster + "/" + h.self},
		"nodes":     nodes,
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}
