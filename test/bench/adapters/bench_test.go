// Package adapters measures the cluster adapters in the real aggregator
// binary against a real kube-apiserver (make bench-adapters): 5,000 Flux
// HelmReleases and 2,000 CNPG Clusters (each with a ScheduledBackup) spread
// over tenant namespaces, their status moved through the status
// subresource as the controllers do. It prints the aggregator's live memory
// and CPU added per 1,000 watched objects and the time from a status change
// to the Health object that reports it (p50/p99).
//
// Targets: <= 2 KiB of aggregator memory per watched object; change ->
// Health <= 2 s p99.
package adapters

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	healthv1alpha1 "github.com/cozystack/cozy-health/pkg/apis/health/v1alpha1"
	"github.com/cozystack/cozy-health/pkg/client/clientset/versioned"
	"github.com/cozystack/cozy-health/pkg/tlsutil"
	"github.com/cozystack/cozy-health/test/bench/benchproc"
	"github.com/cozystack/cozy-health/test/harness"
)

const platformNS = "cozy-system"

var (
	helmReleases     = schema.GroupVersionResource{Group: "helm.toolkit.fluxcd.io", Version: "v2", Resource: "helmreleases"}
	clusters         = schema.GroupVersionResource{Group: "postgresql.cnpg.io", Version: "v1", Resource: "clusters"}
	scheduledBackups = schema.GroupVersionResource{Group: "postgresql.cnpg.io", Version: "v1", Resource: "scheduledbackups"}
)

func BenchmarkAdapters(b *testing.B) {
	releases := benchproc.EnvInt("COZY_HEALTH_BENCH_RELEASES", 5000)
	pgs := benchproc.EnvInt("COZY_HEALTH_BENCH_CLUSTERS", 2000)
	tenants := benchproc.EnvInt("COZY_HEALTH_BENCH_TENANTS", 50)
	samples := benchproc.EnvInt("COZY_HEALTH_BENCH_SAMPLES", 100)
	for range b.N {
		run(b, releases, pgs, tenants, samples)
	}
}

func run(b *testing.B, releases, pgs, tenants, samples int) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cp := harness.Start(b)
	require.NoError(b, cp.InstallCRDs(ctx))
	require.NoError(b, cp.InstallAdapterCRDs(ctx, "helm.toolkit.fluxcd.io_helmreleases", "postgresql.cnpg.io_clusters",
		"postgresql.cnpg.io_backups", "postgresql.cnpg.io_scheduledbackups"))
	require.NoError(b, cp.EnsureNamespace(ctx, platformNS))
	nsNames := make([]string, tenants)
	for i := range nsNames {
		nsNames[i] = fmt.Sprintf("tenant-t%03d", i)
		_, err := cp.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsNames[i],
			Labels: map[string]string{"tenant.cozystack.io/tenant-root": "", "tenant.cozystack.io/" + nsNames[i]: ""}}}, metav1.CreateOptions{})
		require.NoError(b, err)
	}
	rc := rest.CopyConfig(cp.Config)
	rc.QPS, rc.Burst = 2000, 2000
	dyn, err := dynamic.NewForConfig(rc)
	require.NoError(b, err)
	hc, err := versioned.NewForConfig(rc)
	require.NoError(b, err)

	dir := b.TempDir()
	tlsFiles, err := tlsutil.WriteServing(filepath.Join(dir, "tls"), "127.0.0.1")
	require.NoError(b, err)
	keys := filepath.Join(dir, "keys")
	require.NoError(b, os.MkdirAll(keys, 0o700))
	metricsAddr, httpAddr := benchproc.FreeAddr(b), benchproc.FreeAddr(b)
	logPath := filepath.Join(dir, "aggregator.log")
	logf, err := os.Create(logPath)
	require.NoError(b, err)
	defer logf.Close()
	cmd := exec.Command(benchproc.AggregatorBinary(b),
		"--kubeconfig", cp.Kubeconfig, "--namespace", platformNS, "--identity", "bench-aggregator",
		"--listen", benchproc.FreeAddr(b), "--metrics-addr", metricsAddr, "--http-addr", httpAddr,
		"--tls-cert", tlsFiles.CertFile, "--tls-key", tlsFiles.KeyFile, "--insecure-dev-keys-dir", keys,
		"--log-level", "warn", "--pprof", "--warm-up", "1s", "--adapter-writes-per-second", "20")
	cmd.Stdout, cmd.Stderr = logf, logf
	require.NoError(b, cmd.Start())
	pid := cmd.Process.Pid
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if b.Failed() {
			benchproc.LogTail(b, logPath)
		}
	}()
	require.Eventually(b, func() bool {
		resp, err := http.Get("http://" + httpAddr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, time.Minute, 100*time.Millisecond, "aggregator did not start; log: %s", logPath)

	// Baseline: adapters applicable (the CRDs are served) but nothing to
	// watch yet.
	time.Sleep(5 * time.Second)
	base, err := benchproc.LiveMemory(metricsAddr)
	require.NoError(b, err)
	cpuBase := benchproc.CPUOver(b, pid, 20*time.Second)

	// The objects, created by 32 workers; status through the subresource.
	start := time.Now()
	now := time.Now().UTC()
	// CNPG objects marshalled from CNPG's own Go types (test/fixtures):
	// backed up 2 h ago, a daily schedule.
	pgTmpl, err := harness.Fixture("cnpg.yaml", "Cluster", "postgres-recent", now)
	require.NoError(b, err)
	schedTmpl, err := harness.Fixture("cnpg.yaml", "ScheduledBackup", "postgres-recent-daily", now)
	require.NoError(b, err)
	type job struct {
		gvr    schema.GroupVersionResource
		obj    *unstructured.Unstructured
		status map[string]any
	}
	jobs := make(chan job, 256)
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var firstErr error
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				ri := dyn.Resource(j.gvr).Namespace(j.obj.GetNamespace())
				got, err := ri.Create(ctx, j.obj, metav1.CreateOptions{})
				if err == nil && j.status != nil {
					got.Object["status"] = j.status
					_, err = ri.UpdateStatus(ctx, got, metav1.UpdateOptions{})
				}
				if err != nil {
					errMu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("%s %s/%s: %w", j.gvr.Resource, j.obj.GetNamespace(), j.obj.GetName(), err)
					}
					errMu.Unlock()
				}
			}
		}()
	}
	perNS := map[string]int{}
	for i := range releases {
		ns := nsNames[i%tenants]
		perNS[ns]++
		name := fmt.Sprintf("app-%05d", i)
		dep := ""
		if i >= tenants {
			dep = fmt.Sprintf("app-%05d", i-tenants) // a chain per namespace
		}
		jobs <- job{helmReleases, helmRelease(ns, name, dep), readyStatus("True", "UpgradeSucceeded", "Helm upgrade succeeded for release "+ns+"/"+name)}
	}
	for i := range pgs {
		ns := nsNames[i%tenants]
		name := fmt.Sprintf("pg-%05d", i)
		c, status := fromFixture(pgTmpl, ns, name)
		jobs <- job{clusters, c, status}
		sb, _ := fromFixture(schedTmpl, ns, name+"-daily")
		require.NoError(b, unstructured.SetNestedField(sb.Object, name, "spec", "cluster", "name"))
		jobs <- job{scheduledBackups, sb, nil}
	}
	close(jobs)
	wg.Wait()
	require.NoError(b, firstErr)
	watched := releases + 2*pgs
	fmt.Printf("    created %d HelmReleases, %d CNPG Clusters and %d ScheduledBackups in %d tenant namespaces in %s\n",
		releases, pgs, pgs, tenants, time.Since(start).Round(time.Second))

	// Every object reflected: each tenant's apps object counts its
	// releases, each backups object lists its clusters.
	require.Eventually(b, func() bool {
		list, err := hc.HealthV1alpha1().Healths(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		ready, backups := 0, 0
		for _, h := range list.Items {
			for _, c := range h.Status.Conditions {
				switch {
				case c.Type == "Releases" && c.Status == healthv1alpha1.ConditionTrue:
					n, _ := strconv.Atoi(strings.Fields(c.Message)[0])
					ready += n
				case c.Type == "Backup" && c.Status == healthv1alpha1.ConditionTrue:
					backups++
				}
			}
		}
		return ready == releases && backups == pgs
	}, 5*time.Minute, time.Second, "the Health objects never reflected every object; log: %s", logPath)
	fmt.Printf("    every object in the Health objects %s after the first was created\n", time.Since(start).Round(time.Second))

	// Steady state: live memory and CPU with everything watched.
	time.Sleep(10 * time.Second)
	full, err := benchproc.LiveMemory(metricsAddr)
	require.NoError(b, err)
	m0, err := benchproc.Gather(metricsAddr)
	require.NoError(b, err)
	t0 := time.Now()
	cpuFull := benchproc.CPUOver(b, pid, 30*time.Second)
	m1, err := benchproc.Gather(metricsAddr)
	require.NoError(b, err)
	restWrites := (benchproc.Value(m1, "cozy_health_writes_total", nil) - benchproc.Value(m0, "cozy_health_writes_total", nil)) / time.Since(t0).Seconds()
	_, rss, err := benchproc.Stat(pid)
	require.NoError(b, err)

	// Change -> Health: a release fails, then recovers; the time from the
	// status write to the Health object saying so, seen through a watch.
	var lat []time.Duration
	for i := range samples / 2 {
		idx := (i*97 + 13) % releases
		ns, name := nsNames[idx%tenants], fmt.Sprintf("app-%05d", idx)
		for _, fail := range []bool{true, false} {
			d, err := changeToHealth(ctx, dyn, hc, ns, name, fail)
			require.NoError(b, err, "%s/%s fail=%t; log: %s", ns, name, fail, logPath)
			lat = append(lat, d)
		}
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }

	added := full.Sub(base)
	perK := added.Live() / float64(watched) * 1000
	cpuPerK := (cpuFull - cpuBase) / float64(watched) * 1000 * 1000 // millicores
	b.ReportMetric(perK/1024, "live_KiB_per_1000_objects")
	b.ReportMetric(cpuPerK, "millicores_per_1000_objects")
	b.ReportMetric(float64(pct(0.50).Milliseconds()), "change_to_health_p50_ms")
	b.ReportMetric(float64(pct(0.99).Milliseconds()), "change_to_health_p99_ms")
	b.ReportMetric(restWrites, "writes_per_s_at_rest")
	fmt.Printf("    watched objects         %d (%d HelmReleases, %d Clusters, %d ScheduledBackups)\n", watched, releases, pgs, pgs)
	fmt.Printf("    live memory             %s before, %s with them: %.0f KiB added per 1,000 objects = %.2f KiB per object (target <= 2 KiB)\n",
		base, full, perK/1024, perK/1024/1000)
	fmt.Printf("    RSS                     %.1f MiB at the end\n", float64(rss)/(1<<20))
	fmt.Printf("    CPU                     %.1f millicores before, %.1f with them: %.2f millicores added per 1,000 objects (steady state, re-judged every 10 s)\n",
		cpuBase*1000, cpuFull*1000, cpuPerK)
	fmt.Printf("    judgement (mean)        helmrelease %.1f ms, cnpg %.1f ms over %.0f watched objects (cozy_health_adapter_objects)\n",
		benchproc.Value(m1, "cozy_health_adapter_judge_duration_seconds", map[string]string{"adapter": "helmrelease"})*1000,
		benchproc.Value(m1, "cozy_health_adapter_judge_duration_seconds", map[string]string{"adapter": "cnpg"})*1000,
		benchproc.Value(m1, "cozy_health_adapter_objects", nil))
	fmt.Printf("    writes at rest          %.2f Health writes/s while nothing changed (refreshes only; each queues ahead of a change)\n", restWrites)
	fmt.Printf("    change -> Health        p50 %s, p90 %s, p99 %s, max %s over %d status changes (target p99 <= 2 s)\n",
		pct(0.50).Round(time.Millisecond), pct(0.90).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond), len(lat))
}

// changeToHealth moves one release's status (failed, or ready again) and
// returns how long until its tenant's apps object says so.
func changeToHealth(ctx context.Context, dyn dynamic.Interface, hc versioned.Interface, ns, name string, fail bool) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	w, err := hc.HealthV1alpha1().Healths(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=apps"})
	if err != nil {
		return 0, err
	}
	defer w.Stop()
	ri := dyn.Resource(helmReleases).Namespace(ns)
	got, err := ri.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	if fail {
		got.Object["status"] = readyStatus("False", "UpgradeFailed", "Helm upgrade failed for release "+ns+"/"+name+": context deadline exceeded")
	} else {
		got.Object["status"] = readyStatus("True", "UpgradeSucceeded", "Helm upgrade succeeded")
	}
	t0 := time.Now()
	if _, err := ri.UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		return 0, err
	}
	for ev := range w.ResultChan() {
		if ev.Type != watch.Added && ev.Type != watch.Modified {
			continue
		}
		h, ok := ev.Object.(*healthv1alpha1.Health)
		if !ok {
			continue
		}
		shows := false
		for _, c := range h.Status.Conditions {
			if c.Type == "Release" && c.ResourceRef != nil && c.ResourceRef.Name == name && c.Reason == "UpgradeFailed" {
				shows = true
			}
		}
		if shows == fail {
			return time.Since(t0), nil
		}
	}
	return 0, fmt.Errorf("no Health change within 30 s: %w", ctx.Err())
}

func helmRelease(ns, name, dep string) *unstructured.Unstructured {
	spec := map[string]any{"interval": "5m", "chart": map[string]any{"spec": map[string]any{
		"chart": name, "version": "0.1.0", "sourceRef": map[string]any{"kind": "HelmRepository", "name": "cozystack-apps", "namespace": platformNS}}},
		"values": map[string]any{"replicas": int64(2), "resourcesPreset": "small", "size": "10Gi"}}
	if dep != "" {
		spec["dependsOn"] = []any{map[string]any{"name": dep}}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]any{
			"apps.cozystack.io/application.kind": "Postgres", "apps.cozystack.io/application.name": name}},
		"spec": spec,
	}}
}

func readyStatus(status, reason, msg string) map[string]any {
	at := time.Now().UTC().Format(time.RFC3339)
	return map[string]any{
		"observedGeneration": int64(1), "lastAttemptedGeneration": int64(1), "lastAttemptedRevision": "0.1.0",
		"lastAttemptedReleaseAction": "upgrade", "storageNamespace": "tenant-root",
		"history": []any{map[string]any{"name": "app", "namespace": "tenant-root", "version": int64(3), "status": "deployed",
			"chartName": "app", "chartVersion": "0.1.0", "appVersion": "1.0.0", "configDigest": "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
			"digest":        "sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210",
			"firstDeployed": at, "lastDeployed": at}},
		"conditions": []any{
			map[string]any{"type": "Ready", "status": status, "reason": reason, "message": msg, "observedGeneration": int64(1), "lastTransitionTime": at},
			map[string]any{"type": "Released", "status": status, "reason": reason, "message": msg, "observedGeneration": int64(1), "lastTransitionTime": at},
		},
	}
}

// fromFixture is a copy of tmpl (an upstream-typed fixture) named ns/name,
// and its status apart (written through the status subresource).
func fromFixture(tmpl *unstructured.Unstructured, ns, name string) (*unstructured.Unstructured, map[string]any) {
	u := tmpl.DeepCopy()
	u.SetNamespace(ns)
	u.SetName(name)
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	status, _ := u.Object["status"].(map[string]any)
	delete(u.Object, "status")
	return u, status
}
