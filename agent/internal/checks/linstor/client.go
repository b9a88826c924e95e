// Package linstor reads the LINSTOR controller's REST API (plain HTTP or
// mutual TLS, the real JSON shapes of /v1/nodes and /v1/view/resources) and
// judges this node's satellite as the controller sees it.
package linstor

import (
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

	"github.com/cozystack/cozy-health/agent/internal/checks/httpsource"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	URL                       string
	CAFile, CertFile, KeyFile string
}

// Client is a minimal LINSTOR REST client.
type Client struct {
	base *url.URL
	http *http.Client
}

// NewClient builds a client; TLS material is read now.
func NewClient(cfg ClientConfig) (*Client, error) {
	u, err := url.Parse(strings.TrimSuffix(cfg.URL, "/"))
	if err != nil {
		return nil, fmt.Errorf("parse linstor url: %w", err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 1
	if cfg.CAFile != "" || cfg.CertFile != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg.CAFile != "" {
			pem, err := os.ReadFile(cfg.CAFile)
			if err != nil {
				return nil, fmt.Errorf("read linstor ca: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, errors.New("read linstor ca: no certificate in " + cfg.CAFile)
			}
		}
		if cfg.CertFile != "" {
			crt, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("load linstor client certificate: %w", err)
			}
			tc.Certificates = []tls.Certificate{crt}
		}
		tr.TLSClientConfig = tc
	}
	return &Client{base: u, http: &http.Client{Transport: tr}}, nil
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
	body, err := httpsource.Get(ctx, c.http, u.String(), http.Header{"Accept": {"application/json"}})
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
