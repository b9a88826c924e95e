// Package linstor reads the LINSTOR controller's REST API (plain HTTP or
// mutual TLS, the real JSON shapes of /v1/nodes and /v1/view/resources) and
// judges this node's satellite as the controller sees it.
package linstor

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"

	"github.com/cozystack/cozy-health/agent/internal/check"
	"github.com/cozystack/cozy-health/agent/internal/checks/httpsource"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	URL                       string
	CAFile, CertFile, KeyFile string
}

// InputFix says what to do when a LINSTOR TLS file is missing (the message
// names the file): Cozystack keeps the client certificate in this Secret,
// which the agent mounts optional so that a node without it still reports
// everything else. Short: it ends up in a Health message of 256 bytes.
const InputFix = "mount Secret linstor-client-tls from cozy-linstor (ca.crt, tls.crt, tls.key) there"

// Client is a minimal LINSTOR REST client.
type Client struct {
	base *url.URL
	cfg  ClientConfig

	// mu guards the fields below: the HTTP client built from the TLS files
	// as they were last read.
	mu   sync.Mutex
	http *http.Client
	// files are the contents http was built from (CA, cert, key).
	files [3][]byte
}

// NewClient builds a client. The TLS files are not read here: they are read
// before every request, and the transport is rebuilt when their contents
// change, so a Secret mounted after the agent started or a rotated
// certificate is picked up without a restart, and a missing file makes the
// checks Unknown (a *check.InputError) instead of stopping the agent.
func NewClient(cfg ClientConfig) (*Client, error) {
	u, err := url.Parse(strings.TrimSuffix(cfg.URL, "/"))
	if err != nil {
		return nil, fmt.Errorf("parse linstor url: %w", err)
	}
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return nil, errors.New("linstor client certificate and key go together")
	}
	c := &Client{base: u, cfg: cfg}
	if cfg.CAFile == "" && cfg.CertFile == "" {
		c.http = &http.Client{Transport: newTransport(nil)}
	}
	return c, nil
}

func newTransport(tc *tls.Config) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 1
	tr.TLSClientConfig = tc
	return tr
}

// client returns the HTTP client for the TLS files as they are now.
func (c *Client) client() (*http.Client, error) {
	if c.cfg.CAFile == "" && c.cfg.CertFile == "" {
		return c.http, nil
	}
	var files [3][]byte
	for i, f := range []struct{ what, path string }{
		{"LINSTOR CA", c.cfg.CAFile}, {"LINSTOR client certificate", c.cfg.CertFile}, {"LINSTOR client key", c.cfg.KeyFile},
	} {
		if f.path == "" {
			continue
		}
		b, err := os.ReadFile(f.path)
		if err != nil {
			return nil, check.Input(f.what, f.path, InputFix, err)
		}
		files[i] = b
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.http != nil && sameFiles(files, c.files) {
		return c.http, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.cfg.CAFile != "" {
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(files[0]) {
			return nil, check.Input("LINSTOR CA", c.cfg.CAFile, InputFix, errors.New("no PEM certificate in it"))
		}
	}
	if c.cfg.CertFile != "" {
		crt, err := tls.X509KeyPair(files[1], files[2])
		if err != nil {
			return nil, check.Input("LINSTOR client certificate", c.cfg.CertFile, InputFix, err)
		}
		tc.Certificates = []tls.Certificate{crt}
	}
	if c.http != nil {
		c.http.CloseIdleConnections()
	}
	c.http, c.files = &http.Client{Transport: newTransport(tc)}, files
	return c.http, nil
}

func sameFiles(a, b [3][]byte) bool {
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// Node is the part of LINSTOR's Node read here.
type Node struct {
	Name             string   `json:"name"`
	Type             string   `json:"type"`
	Flags            []string `json:"flags,omitempty"`
	ConnectionStatus string   `json:"connection_status,omitempty"`
	UUID             string   `json:"uuid,omitempty"`
}

// ResourceWithVolumes is the part of LINSTOR's ResourceWithVolumes read here.
type ResourceWithVolumes struct {
	Name     string         `json:"name"`
	NodeName string         `json:"node_name"`
	Flags    []string       `json:"flags,omitempty"`
	State    *ResourceState `json:"state,omitempty"`
	Volumes  []Volume       `json:"volumes,omitempty"`
	UUID     string         `json:"uuid,omitempty"`
}

// ResourceState is LINSTOR's ResourceState.
type ResourceState struct {
	InUse *bool `json:"in_use,omitempty"`
}

// Volume is the part of LINSTOR's Volume read here.
type Volume struct {
	VolumeNumber    int          `json:"volume_number"`
	StoragePoolName string       `json:"storage_pool_name,omitempty"`
	ProviderKind    string       `json:"provider_kind,omitempty"`
	DevicePath      string       `json:"device_path,omitempty"`
	Flags           []string     `json:"flags,omitempty"`
	State           *VolumeState `json:"state,omitempty"`
}

// VolumeState is LINSTOR's VolumeState; a missing state means the
// controller has no satellite state for it.
type VolumeState struct {
	DiskState         string                      `json:"disk_state,omitempty"`
	ReplicationStates map[string]ReplicationState `json:"replication_states,omitempty"`
}

// ReplicationState is LINSTOR's ReplicationState.
type ReplicationState struct {
	ReplicationState string  `json:"replication_state,omitempty"`
	DonePercentage   float64 `json:"done_percentage,omitempty"`
}

func (c *Client) get(ctx context.Context, path string, q url.Values, into any) error {
	u := *c.base
	u.Path += path
	u.RawQuery = q.Encode()
	hc, err := c.client()
	if err != nil {
		return err
	}
	body, err := httpsource.Get(ctx, hc, u.String(), http.Header{"Accept": {"application/json"}})
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, into); err != nil {
		return fmt.Errorf("decode linstor %s: %w", path, err)
	}
	return nil
}

// Nodes lists the named nodes (all when names is empty).
func (c *Client) Nodes(ctx context.Context, names ...string) ([]Node, error) {
	var out []Node
	if err := c.get(ctx, "/v1/nodes", url.Values{"nodes": names}, &out); err != nil {
		return nil, fmt.Errorf("list linstor nodes: %w", err)
	}
	return out, nil
}

// ResourceView lists resources with volumes, filtered by nodes and/or
// resource names.
func (c *Client) ResourceView(ctx context.Context, nodes, resources []string) ([]ResourceWithVolumes, error) {
	q := url.Values{}
	if len(nodes) > 0 {
		q["nodes"] = nodes
	}
	if len(resources) > 0 {
		q["resources"] = resources
	}
	var out []ResourceWithVolumes
	if err := c.get(ctx, "/v1/view/resources", q, &out); err != nil {
		return nil, fmt.Errorf("list linstor resources: %w", err)
	}
	return out, nil
}

// ParseNodes decodes a /v1/nodes body.
func ParseNodes(body []byte) ([]Node, error) {
	var out []Node
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("decode linstor nodes: %w", err)
	}
	return out, nil
}

// ParseResources decodes a /v1/view/resources body.
func ParseResources(body []byte) ([]ResourceWithVolumes, error) {
	var out []ResourceWithVolumes
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("decode linstor resources: %w", err)
	}
	return out, nil
}
