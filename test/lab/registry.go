package lab

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/registry"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/cozy-health/hack/image/push"
	"github.com/cozystack/cozy-health/test/harness"
	"github.com/cozystack/cozy-health/test/harness/realnode"
)

// Registry is go-containerregistry's registry (the one crane is tested
// against) serving plain HTTP on a loopback port, recording every request.
type Registry struct {
	// Host is host:port.
	Host string
	srv  *http.Server
	mu   sync.Mutex
	seen []string
}

// StartRegistry starts a registry on 127.0.0.1.
func StartRegistry() (*Registry, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("start registry: %w", err)
	}
	r := &Registry{Host: l.Addr().String()}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.seen = append(r.seen, req.Method+" "+req.URL.Path)
		r.mu.Unlock()
		reg.ServeHTTP(w, req)
	})}
	go func() { _ = r.srv.Serve(l) }()
	return r, nil
}

// Requests are the requests served so far ("METHOD /path").
func (r *Registry) Requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

// Stop stops the registry.
func (r *Registry) Stop() error { return r.srv.Close() }

// PushedImages publishes the images `make image` wrote into dir as `make
// push` does (hack/image/push: the whole index to reg, REGISTRY/NAME:TAG@DIGEST
// written into a copy of the chart's values.yaml in work), lets the node's
// containerd pull from reg, and returns the chart values that run them: the
// references as `make push` wrote them, pulled by the node (IfNotPresent,
// the chart's default), never imported.
func PushedImages(ctx context.Context, c *realnode.Cluster, reg *Registry, dir, work string) (map[string]any, []push.Pushed, error) {
	src, err := os.ReadFile(filepath.Join(harness.RepoRoot(), "deploy", "charts", "cozy-health", "values.yaml"))
	if err != nil {
		return nil, nil, err
	}
	valuesFile := filepath.Join(work, "values.yaml")
	if err := os.WriteFile(valuesFile, src, 0o600); err != nil {
		return nil, nil, err
	}
	pushed, err := push.Push(ctx, push.Options{Images: dir, Registry: reg.Host + "/cozystack/cozystack", Tag: "0.1.0",
		Values: []push.ValuesFile{{Path: valuesFile}}})
	if err != nil {
		return nil, nil, err
	}
	if err := c.Node.TrustRegistry(reg.Host); err != nil {
		return nil, nil, err
	}
	b, err := os.ReadFile(valuesFile)
	if err != nil {
		return nil, nil, err
	}
	var written map[string]any
	if err := yaml.Unmarshal(b, &written); err != nil {
		return nil, nil, fmt.Errorf("the values `make push` wrote: %w", err)
	}
	values := map[string]any{"image": map[string]any{"pullPolicy": "IfNotPresent"}}
	for _, key := range []string{"agent", "aggregator"} {
		m, _ := written[key].(map[string]any)
		ref, _ := m["image"].(string)
		if !strings.HasPrefix(ref, reg.Host+"/") || !strings.Contains(ref, "@sha256:") {
			return nil, nil, fmt.Errorf("make push wrote %s.image %q, want a reference into %s pinned by digest", key, ref, reg.Host)
		}
		values[key] = map[string]any{"image": ref}
	}
	return values, pushed, nil
}
