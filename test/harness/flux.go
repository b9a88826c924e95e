package harness

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/repo"
)

// FluxOptions tune the controllers for a test.
type FluxOptions struct {
	// DependencyRequeue is helm-controller's and source-controller's
	// --requeue-dependency (upstream's default is 30s).
	DependencyRequeue time.Duration
	// MaxRetryDelay is both controllers' --max-retry-delay, the cap of
	// their exponential failure backoff (upstream's default is 15m).
	MaxRetryDelay time.Duration
}

// StartFlux installs Flux's CRDs (from the Flux tool's crds/) and starts
// source-controller and helm-controller against c, as the admin, watching
// every namespace, their logs in c.Dir. They are stopped at t's end.
// source-controller serves its artifacts on a loopback port it advertises
// to helm-controller.
func (c *ControlPlane) StartFlux(t testing.TB, o FluxOptions) {
	t.Helper()
	dir, err := Flux.Dir()
	if err != nil {
		t.Fatalf("flux: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	crds, err := filepath.Glob(filepath.Join(dir, "crds", "*.yaml"))
	if err != nil || len(crds) == 0 {
		t.Fatalf("flux: no CRDs in %s (%v)", dir, err)
	}
	if err := c.InstallCRDFiles(ctx, crds...); err != nil {
		t.Fatalf("flux: %v", err)
	}
	if o.DependencyRequeue == 0 {
		o.DependencyRequeue = 30 * time.Second
	}
	if o.MaxRetryDelay == 0 {
		o.MaxRetryDelay = 15 * time.Minute
	}
	env := []string{"KUBECONFIG=" + c.Kubeconfig, "RUNTIME_NAMESPACE=flux-system"}
	common := func() ([]string, string) {
		metrics, err1 := FreeAddr()
		health, err2 := FreeAddr()
		if err := errors.Join(err1, err2); err != nil {
			t.Fatalf("flux: %v", err)
		}
		return []string{"--metrics-addr=" + metrics, "--health-addr=" + health, "--log-encoding=json",
			"--requeue-dependency=" + o.DependencyRequeue.String(), "--max-retry-delay=" + o.MaxRetryDelay.String()}, health
	}
	storage, err := FreeAddr()
	if err != nil {
		t.Fatalf("flux: %v", err)
	}
	store := filepath.Join(c.Dir, "flux-storage")
	if err := os.MkdirAll(store, 0o700); err != nil {
		t.Fatalf("flux: %v", err)
	}
	scArgs, scHealth := common()
	scArgs = append(scArgs, "--storage-path="+store, "--storage-addr="+storage, "--storage-adv-addr="+storage)
	hcArgs, hcHealth := common()
	for _, s := range []struct {
		name   string
		args   []string
		health string
	}{{"source-controller", scArgs, scHealth}, {"helm-controller", hcArgs, hcHealth}} {
		p, err := spawnProcess(filepath.Join(c.Dir, s.name+".log"), s.name, filepath.Join(dir, s.name), s.args, false, env...)
		if err != nil {
			t.Fatalf("flux: %v", err)
		}
		t.Cleanup(func() {
			if err := p.stop(); err != nil {
				t.Errorf("flux: %v", err)
			}
		})
		if err := waitFor(ctx, p, httpOK(http.DefaultClient, "http://"+s.health+"/readyz")); err != nil {
			t.Fatalf("flux: %v", err)
		}
	}
}

// ServeCharts packages charts into a Helm repository (the .tgz files and
// the index.yaml Helm's own repo package writes) and serves it over HTTP on
// a loopback port until t's end. It returns the repository's URL, for a
// Flux HelmRepository.
func ServeCharts(t testing.TB, charts ...*chart.Chart) string {
	t.Helper()
	dir := t.TempDir()
	for _, ch := range charts {
		if _, err := chartutil.Save(ch, dir); err != nil {
			t.Fatalf("package chart %s: %v", ch.Name(), err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("chart repository: %v", err)
	}
	url := "http://" + l.Addr().String()
	idx, err := repo.IndexDirectory(dir, url)
	if err != nil {
		t.Fatalf("index charts: %v", err)
	}
	idx.SortEntries()
	if err := idx.WriteFile(filepath.Join(dir, "index.yaml"), 0o644); err != nil {
		t.Fatalf("write index: %v", err)
	}
	srv := &http.Server{Handler: http.FileServer(http.Dir(dir)), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return url
}

// Chart is a chart named name at version whose templates are the given
// files (name -> template text).
func Chart(name, version string, templates map[string]string) *chart.Chart {
	ch := &chart.Chart{Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: name, Version: version, Type: "application"}}
	for n, data := range templates {
		ch.Templates = append(ch.Templates, &chart.File{Name: "templates/" + n, Data: []byte(data)})
	}
	return ch
}
