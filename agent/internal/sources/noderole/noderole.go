// Package noderole tells whether the agent's node is a control-plane node,
// from its own Node object's node-role.kubernetes.io/control-plane label
// (Talos and kubeadm set it on control-plane nodes; NodeRestriction forbids
// a kubelet to set node-role.kubernetes.io/* labels on itself). The etcd
// checks ask it when the Talos API cannot be asked: a node is not
// applicable for etcd only when it is known not to be a control-plane node.
//
// One GET of the Node's metadata (PartialObjectMetadata) with the pod's
// ServiceAccount token, no client library: the agent stays small. An answer
// is reused for CacheFor; a failure is not cached.
package noderole

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// ControlPlaneLabel marks a control-plane Node.
const ControlPlaneLabel = "node-role.kubernetes.io/control-plane"

// CacheFor is how long a role read from the API is reused.
const CacheFor = time.Minute

// Role is what is known of the node's role.
type Role int

// Roles.
const (
	// Unknown: the Node object could not be read.
	Unknown Role = iota
	// ControlPlane: the Node carries ControlPlaneLabel.
	ControlPlane
	// Worker: the Node does not carry ControlPlaneLabel.
	Worker
)

func (r Role) String() string {
	switch r {
	case ControlPlane:
		return "control-plane"
	case Worker:
		return "worker"
	}
	return "unknown"
}

// Config configures a Reader.
type Config struct {
	// Server is the API server's base URL (https://host:port).
	Server string
	// TokenFile is a ServiceAccount token file, read for every request
	// (the kubelet rotates it).
	TokenFile string
	// CAFile verifies the API server.
	CAFile string
	// NodeName is the node whose Node object is read.
	NodeName string
}

// ServerFromEnv is the in-cluster API server URL from the environment the
// kubelet gives every container, or "" when it is not set.
func ServerFromEnv() string {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return ""
	}
	return "https://" + net.JoinHostPort(host, port)
}

// Reader reads the node's role.
type Reader struct {
	cfg Config
	now func() time.Time

	// mu guards the cached answer.
	mu   sync.Mutex
	role Role
	at   time.Time
}

// New returns a Reader; nothing is read until Role.
func New(cfg Config) (*Reader, error) {
	if cfg.Server == "" || cfg.TokenFile == "" || cfg.NodeName == "" {
		return nil, errors.New("noderole: server, token file and node name are required")
	}
	if _, err := url.Parse(cfg.Server); err != nil {
		return nil, fmt.Errorf("noderole: server %q: %w", cfg.Server, err)
	}
	return &Reader{cfg: cfg, now: time.Now}, nil
}

// Role returns the node's role, or Unknown and why it could not be read.
// A nil Reader knows nothing.
func (r *Reader) Role(ctx context.Context) (Role, error) {
	if r == nil {
		return Unknown, errors.New("no Kubernetes API access configured (--kube-api-token-file)")
	}
	r.mu.Lock()
	if r.role != Unknown && r.now().Sub(r.at) < CacheFor {
		role := r.role
		r.mu.Unlock()
		return role, nil
	}
	r.mu.Unlock()
	labels, err := r.labels(ctx)
	if err != nil {
		return Unknown, fmt.Errorf("read Node %s: %w", r.cfg.NodeName, err)
	}
	role := Worker
	if _, ok := labels[ControlPlaneLabel]; ok {
		role = ControlPlane
	}
	r.mu.Lock()
	r.role, r.at = role, r.now()
	r.mu.Unlock()
	return role, nil
}

func (r *Reader) client() (*http.Client, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if r.cfg.CAFile != "" {
		pem, err := os.ReadFile(r.cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read CA %s: %w", r.cfg.CAFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA %s holds no PEM certificate", r.cfg.CAFile)
		}
		tc.RootCAs = pool
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc, Proxy: nil}}, nil
}

// labels GETs the Node's metadata.
func (r *Reader) labels(ctx context.Context) (map[string]string, error) {
	tok, err := os.ReadFile(r.cfg.TokenFile)
	if err != nil {
		return nil, fmt.Errorf("read token: %w", err)
	}
	c, err := r.client()
	if err != nil {
		return nil, err
	}
	defer c.CloseIdleConnections()
	u := strings.TrimSuffix(r.cfg.Server, "/") + "/api/v1/nodes/" + url.PathEscape(r.cfg.NodeName)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	// Only the metadata: a Node's status (images, conditions) is large.
	req.Header.Set("Accept", "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json")
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("get %s: HTTP %d: %s", u, resp.StatusCode, firstLine(body))
	}
	var obj struct {
		Metadata struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, fmt.Errorf("decode %s: %w", u, err)
	}
	if obj.Metadata.Name != r.cfg.NodeName {
		return nil, fmt.Errorf("get %s: answered for Node %q", u, obj.Metadata.Name)
	}
	return obj.Metadata.Labels, nil
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}
