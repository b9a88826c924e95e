package monitoring

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/cozy-health/test/harness"
)

// The stale backup the scrape cross-check creates: a CNPG Cluster in a
// Cozystack tenant namespace whose last successful backup is 50 h old under
// a daily ScheduledBackup (maxAge 1.5 x 24 h), as CNPG's status says it.
const (
	staleTenant  = "tenant-lab"
	staleCluster = "pg-lab"
)

var (
	cnpgClusters         = schema.GroupVersionResource{Group: "postgresql.cnpg.io", Version: "v1", Resource: "clusters"}
	cnpgScheduledBackups = schema.GroupVersionResource{Group: "postgresql.cnpg.io", Version: "v1", Resource: "scheduledbackups"}
)

// createStaleBackup creates the tenant namespace (labelled as Cozystack's
// tenant chart labels it), the Cluster with its status moved in through
// the status subresource as CNPG's operator does, and its ScheduledBackup.
func createStaleBackup(ctx context.Context, rc *rest.Config) error {
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: staleTenant,
		Labels: map[string]string{"tenant.cozystack.io/tenant-root": "", "tenant.cozystack.io/" + staleTenant: ""}}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace %s: %w", staleTenant, err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}
	// The Cluster and ScheduledBackup are marshalled from CNPG's own Go
	// types (test/fixtures): last success 50 h ago, a daily schedule.
	now := time.Now().UTC()
	cluster, err := harness.Fixture("cnpg.yaml", "Cluster", "postgres-db", now)
	if err != nil {
		return err
	}
	sb, err := harness.Fixture("cnpg.yaml", "ScheduledBackup", "postgres-db-daily", now)
	if err != nil {
		return err
	}
	cluster.SetNamespace(staleTenant)
	cluster.SetName(staleCluster)
	unstructured.RemoveNestedField(cluster.Object, "metadata", "creationTimestamp")
	status := cluster.Object["status"]
	delete(cluster.Object, "status")
	ri := dyn.Resource(cnpgClusters).Namespace(staleTenant)
	got, err := ri.Create(ctx, cluster, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create Cluster: %w", err)
	}
	got.Object["status"] = status
	if _, err := ri.UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("Cluster status: %w", err)
	}
	sb.SetNamespace(staleTenant)
	sb.SetName(staleCluster + "-daily")
	unstructured.RemoveNestedField(sb.Object, "metadata", "creationTimestamp")
	delete(sb.Object, "status")
	if err := unstructured.SetNestedField(sb.Object, staleCluster, "spec", "cluster", "name"); err != nil {
		return err
	}
	if _, err := dyn.Resource(cnpgScheduledBackups).Namespace(staleTenant).Create(ctx, sb, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create ScheduledBackup: %w", err)
	}
	return nil
}

// promtoolBackupsStale feeds what the real aggregators exported for the
// stale backup (every replica's cozy_health_issue series of the backups
// component, with the scraper's instance label) to `promtool test rules`
// against the shipped rule file: CozyHealthBackupsStale must stay silent
// before its 15 minutes and then fire once (the replicas collapse), with
// the labels and annotations that name the backup.
func promtoolBackupsStale(t *testing.T, ix scrapeIndex) {
	t.Helper()
	var alert *rule
	for _, r := range loadRules(t) {
		if r.Alert == "CozyHealthBackupsStale" {
			alert = &r
		}
	}
	require.NotNil(t, alert, "CozyHealthBackupsStale in alerts.yaml")
	var series []string
	for _, s := range ix["cozy_health_issue"] {
		if s.labels["component"] != "backups" || !strings.HasPrefix(s.target, "aggregator/") {
			continue
		}
		ls := []string{fmt.Sprintf("instance=%q", strings.TrimPrefix(s.target, "aggregator/"))}
		for k, v := range s.labels {
			ls = append(ls, fmt.Sprintf("%s=%q", k, v))
		}
		sort.Strings(ls)
		series = append(series, fmt.Sprintf("      - series: 'cozy_health_issue{%s}'\n        values: '%gx40'\n", strings.Join(ls, ","), s.value))
	}
	require.NotEmpty(t, series, "no cozy_health_issue series of the backups component in the aggregators' scrape")
	labels := map[string]string{"namespace": staleTenant, "component": "backups", "kind": "Cluster.postgresql.cnpg.io", "resource": staleCluster, "reason": "BackupStale"}
	expLabels := map[string]string{"severity": alert.Labels["severity"]}
	for k, v := range labels {
		expLabels[k] = v
	}
	ann := map[string]string{}
	tmpl := regexp.MustCompile(`\{\{\s*\$labels\.(\w+)\s*\}\}`)
	for k, v := range alert.Annotations {
		ann[k] = tmpl.ReplaceAllStringFunc(v, func(m string) string { return labels[tmpl.FindStringSubmatch(m)[1]] })
	}
	exp, err := yaml.Marshal([]map[string]any{{"exp_labels": expLabels, "exp_annotations": ann}})
	require.NoError(t, err)
	test := "rule_files:\n  - " + filepath.Join(filesDir(), "alerts.yaml") + "\nevaluation_interval: 30s\ntests:\n  - interval: 30s\n    input_series:\n" +
		strings.Join(series, "") + "    alert_rule_test:\n" +
		"      - eval_time: 14m30s\n        alertname: CozyHealthBackupsStale\n        exp_alerts: []\n" +
		"      - eval_time: 15m30s\n        alertname: CozyHealthBackupsStale\n        exp_alerts:\n" + indent(string(exp), "          ")
	f := filepath.Join(t.TempDir(), "backups_scraped_test.yaml")
	require.NoError(t, os.WriteFile(f, []byte(test), 0o644))
	out, err := exec.Command(promtool(t), "test", "rules", f).CombinedOutput()
	require.NoError(t, err, "promtool test rules on the scraped series:\n%s\n%s", test, out)
	t.Logf("promtool test rules on the aggregators' scraped backups series (%d series): CozyHealthBackupsStale fires for %s/%s after 15 m", len(series), staleTenant, staleCluster)
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n") + "\n"
}
