// Package linstorapi is the one LINSTOR controller REST client of
// cozy-health, shared by the binaries: GET /v1/nodes, GET
// /v1/view/resources and GET /v1/view/storage-pools decoded into upstream's
// own types (golinstor's client.Node, client.ResourceWithVolumes and
// client.StoragePool, the version Cozystack's LINSTOR 1.33 speaks), over
// plain HTTP or mutual TLS, with a bounded body.
//
// The TLS material is asked of a Credentials at every request and the
// transport is rebuilt only when it changed, so a certificate cert-manager
// renews (a Secret the caller watches) is used from the next request on,
// without a restart.
package linstorapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	lapi "github.com/LINBIT/golinstor/client"
)

// Node and ResourceWithVolumes are upstream's types, re-exported so that
// callers need not import golinstor themselves.
type (
	Node                = lapi.Node
	ResourceWithVolumes = lapi.ResourceWithVolumes
)

// ReplicationState is one entry of a volume's state.replication_states
// (OpenAPI schema ReplicationState of linstor-server v1.33.3
// docs/rest_v1_openapi.yaml; filled by Json.apiToVolumeState from the
// satellite's DRBD events): the replication state of this volume toward
// one peer node (ReplState.java: Off, Established, StartingSyncS,
// StartingSyncT, WFBitMapS, WFBitMapT, WFSyncUUID, SyncSource,
// SyncTarget, PausedSyncS, PausedSyncT, VerifyS, VerifyT, Ahead, Behind,
// Unknown) and how far a resync is. golinstor v0.63.0's VolumeState drops
// the field, so it is decoded here.
type ReplicationState struct {
	ReplicationState string   `json:"replication_state,omitempty"`
	DonePercentage   *float64 `json:"done_percentage,omitempty"`
}

// Resource is one entry of GET /v1/view/resources: golinstor's
// ResourceWithVolumes, and what its types drop.
type Resource struct {
	ResourceWithVolumes
	// Replication[i] is Volumes[i]'s state.replication_states, by peer
	// node name (nil where the controller holds none).
	Replication []map[string]ReplicationState `json:"-"`
}

// UnmarshalJSON decodes upstream's type, then the replication states.
func (r *Resource) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &r.ResourceWithVolumes); err != nil {
		return err
	}
	var aux struct {
		Volumes []struct {
			State *struct {
				ReplicationStates map[string]ReplicationState `json:"replication_states"`
			} `json:"state"`
		} `json:"volumes"`
	}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	r.Replication = nil
	for i, v := range aux.Volumes {
		if v.State == nil || len(v.State.ReplicationStates) == 0 {
			continue
		}
		if r.Replication == nil {
			r.Replication = make([]map[string]ReplicationState, len(aux.Volumes))
		}
		r.Replication[i] = v.State.ReplicationStates
	}
	return nil
}

// DefaultMaxBody caps one answer; a larger one is an error, not truncated.
// A resource view entry is about 2 KiB: 64 MiB is some 30,000 replicas.
const DefaultMaxBody = 64 << 20

// TLSMaterial is the PEM a client presents and verifies with: Cozystack's
// Secret linstor-client-tls (ca.crt, tls.crt, tls.key).
type TLSMaterial struct {
	CA, Cert, Key []byte
}

func (m TLSMaterial) equal(o TLSMaterial) bool {
	return bytes.Equal(m.CA, o.CA) && bytes.Equal(m.Cert, o.Cert) && bytes.Equal(m.Key, o.Key)
}

// Credentials returns the current TLS material; an error (the Secret is
// not there yet) fails the request with it.
type Credentials func() (TLSMaterial, error)

// Config configures a Client.
type Config struct {
	// URL is the controller's base URL (http:// or https://).
	URL string
	// Credentials, when set, supplies the client certificate and CA; nil
	// speaks plain HTTP (or HTTPS verified by the system roots).
	Credentials Credentials
	// MaxBody caps one answer; 0 means DefaultMaxBody.
	MaxBody int64
}

// Client reads the controller's REST API. Safe for concurrent use.
type Client struct {
	base    *url.URL
	creds   Credentials
	maxBody int64

	// mu guards http and material: the HTTP client built from the TLS
	// material as it was last seen.
	mu       sync.Mutex
	http     *http.Client
	material TLSMaterial
}

// New builds a client; it does not connect.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(strings.TrimSuffix(cfg.URL, "/"))
	if err != nil {
		return nil, fmt.Errorf("parse linstor url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("parse linstor url %q: want http:// or https:// with a host", cfg.URL)
	}
	c := &Client{base: u, creds: cfg.Credentials, maxBody: cfg.MaxBody}
	if c.maxBody <= 0 {
		c.maxBody = DefaultMaxBody
	}
	if c.creds == nil {
		c.http = &http.Client{Transport: newTransport(nil)}
	}
	return c, nil
}

// URL is the controller's base URL.
func (c *Client) URL() string { return c.base.String() }

func newTransport(tc *tls.Config) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 2
	tr.TLSClientConfig = tc
	return tr
}

// TLSConfig builds the client TLS configuration from m: its CA as the only
// root, its certificate as the client certificate (both optional).
func TLSConfig(m TLSMaterial) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(m.CA) > 0 {
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(m.CA) {
			return nil, errors.New("ca.crt holds no PEM certificate")
		}
	}
	if len(m.Cert) > 0 || len(m.Key) > 0 {
		crt, err := tls.X509KeyPair(m.Cert, m.Key)
		if err != nil {
			return nil, fmt.Errorf("tls.crt and tls.key: %w", err)
		}
		tc.Certificates = []tls.Certificate{crt}
	}
	return tc, nil
}

// client returns the HTTP client for the credentials as they are now.
func (c *Client) client() (*http.Client, error) {
	if c.creds == nil {
		return c.http, nil
	}
	m, err := c.creds()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.http != nil && m.equal(c.material) {
		return c.http, nil
	}
	tc, err := TLSConfig(m)
	if err != nil {
		return nil, fmt.Errorf("linstor client certificate: %w", err)
	}
	if c.http != nil {
		c.http.CloseIdleConnections()
	}
	c.http, c.material = &http.Client{Transport: newTransport(tc)}, m
	return c.http, nil
}

// StatusError is a non-2xx answer of the controller.
type StatusError struct {
	Path string
	Code int
}

func (e *StatusError) Error() string { return fmt.Sprintf("linstor %s: HTTP %d", e.Path, e.Code) }

func (c *Client) get(ctx context.Context, path string, into any) error {
	hc, err := c.client()
	if err != nil {
		return err
	}
	u := *c.base
	u.Path += path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("build linstor request %s: %w", path, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("get linstor %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, c.maxBody+1))
	if err != nil {
		return fmt.Errorf("read linstor %s: %w", path, err)
	}
	if int64(len(body)) > c.maxBody {
		return fmt.Errorf("read linstor %s: body larger than %d bytes", path, c.maxBody)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &StatusError{Path: path, Code: resp.StatusCode}
	}
	if err := json.Unmarshal(body, into); err != nil {
		return fmt.Errorf("decode linstor %s: %w", path, err)
	}
	return nil
}

// Nodes lists every node the controller knows (GET /v1/nodes).
func (c *Client) Nodes(ctx context.Context) ([]Node, error) {
	var out []Node
	if err := c.get(ctx, "/v1/nodes", &out); err != nil {
		return nil, err
	}
	return out, nil
}

// ResourceView lists every resource with its volumes on every node (GET
// /v1/view/resources), with the volumes' replication states.
func (c *Client) ResourceView(ctx context.Context) ([]Resource, error) {
	var out []Resource
	if err := c.get(ctx, "/v1/view/resources", &out); err != nil {
		return nil, err
	}
	return out, nil
}

// ParseNodes decodes a /v1/nodes body.
func ParseNodes(body []byte) ([]Node, error) {
	var out []Node
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("decode linstor /v1/nodes: %w", err)
	}
	return out, nil
}

// ParseResources decodes a /v1/view/resources body.
func ParseResources(body []byte) ([]Resource, error) {
	var out []Resource
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("decode linstor /v1/view/resources: %w", err)
	}
	return out, nil
}
