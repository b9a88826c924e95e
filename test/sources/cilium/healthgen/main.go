// Command healthgen writes the cilium-health fixtures of the
// ciliumnodes check (agent/internal/checks/ciliumnodes/testdata) from
// Cilium's own types, github.com/cilium/cilium/api/v1/health/models at the
// version Cozystack ships (go.mod), in the shapes cilium-health's prober
// serves on GET /v1beta/status (pkg/health/server/prober.go, getResults): a
// node the prober lists but has not probed yet carries a PathStatus with
// its IP and no icmp/http result (setNodes seeds results[ip] with the IP
// only). It is a module of its own so that the product's go.mod stays
// lean. Run it from this directory: go run . ../../../../agent/internal/checks/ciliumnodes/testdata
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/cilium/api/v1/health/models"
)

const cluster = "default"

func ok(latency int64) *models.ConnectivityStatus {
	return &models.ConnectivityStatus{Latency: latency, LastProbed: "2026-12-02T06:00:00Z"}
}

// node is a listed node; probed false leaves its paths without results.
func node(name, ip, healthIP string, probed bool) *models.NodeStatus {
	host := &models.PathStatus{IP: ip}
	ep := &models.PathStatus{IP: healthIP}
	if probed {
		host.Icmp, host.HTTP = ok(210000), ok(480000)
		ep.Icmp, ep.HTTP = ok(250000), ok(510000)
	}
	return &models.NodeStatus{
		Name:           cluster + "/" + name,
		Host:           &models.HostStatus{PrimaryAddress: host, SecondaryAddresses: []*models.PathStatus{}},
		Endpoint:       ep,
		HealthEndpoint: &models.EndpointStatus{PrimaryAddress: ep, SecondaryAddresses: []*models.PathStatus{}},
	}
}

func response(nodes ...*models.NodeStatus) *models.HealthStatusResponse {
	return &models.HealthStatusResponse{
		Local:         &models.SelfStatus{Name: cluster + "/node-1"},
		Nodes:         nodes,
		ProbeInterval: "1m0s",
		Timestamp:     "2026-12-02T06:00:00Z",
	}
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: healthgen <testdata dir>")
		os.Exit(2)
	}
	self := func(probed bool) *models.NodeStatus { return node("node-1", "10.0.0.11", "10.244.1.5", probed) }
	fixtures := map[string]*models.HealthStatusResponse{
		// cilium-agent just restarted: every node listed, none probed.
		"health-unprobed.json": response(self(false), node("node-2", "10.0.0.12", "10.244.2.7", false), node("node-3", "10.0.0.13", "10.244.3.9", false)),
		// node-3 just joined: node-2 probed, node-3 listed only.
		"health-partly-probed.json": response(self(true), node("node-2", "10.0.0.12", "10.244.2.7", true), node("node-3", "10.0.0.13", "10.244.3.9", false)),
		// A single-node cluster: only this node is listed.
		"health-alone.json": response(self(true)),
		// Every node probed and reachable.
		"health-all-probed.json": response(self(true), node("node-2", "10.0.0.12", "10.244.2.7", true), node("node-3", "10.0.0.13", "10.244.3.9", true)),
	}
	for name, r := range fixtures {
		if err := r.Validate(nil); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			os.Exit(1)
		}
		b, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			os.Exit(1)
		}
		if err := os.WriteFile(filepath.Join(os.Args[1], name), append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
