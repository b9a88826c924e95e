package render

import (
	"encoding/json"
	"io/fs"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/cozy-health/deploy"
)

const (
	vmAPI      = "operator.victoriametrics.com/v1beta1"
	promAPI    = "monitoring.coreos.com/v1"
	grafanaAPI = "grafana.integreatly.org/v1beta1"
)

var monitoringKinds = []string{"VMServiceScrape", "VMRule", "ServiceMonitor", "PrometheusRule", "GrafanaDashboard"}

// TestMonitoringAttachByDetection: the chart renders the objects of the
// monitoring stack the cluster serves (VictoriaMetrics first), nothing
// when it serves none, and follows monitoring.stack when it is forced.
func TestMonitoringAttachByDetection(t *testing.T) {
	for _, tc := range []struct {
		name  string
		apis  []string
		stack string
		want  []string
	}{
		{name: "no monitoring API", want: nil},
		{name: "VictoriaMetrics", apis: []string{vmAPI}, want: []string{"VMServiceScrape", "VMRule"}},
		{name: "prometheus-operator", apis: []string{promAPI}, want: []string{"ServiceMonitor", "PrometheusRule"}},
		{name: "both: VictoriaMetrics first", apis: []string{promAPI, vmAPI}, want: []string{"VMServiceScrape", "VMRule"}},
		{name: "both, forced prometheus-operator", apis: []string{promAPI, vmAPI}, stack: "prometheus-operator", want: []string{"ServiceMonitor", "PrometheusRule"}},
		{name: "forced none", apis: []string{vmAPI, grafanaAPI}, stack: "none", want: nil},
		{name: "Cozystack: VictoriaMetrics and grafana-operator", apis: []string{vmAPI, grafanaAPI}, want: []string{"VMServiceScrape", "VMRule", "GrafanaDashboard"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{APIVersions: tc.apis}
			if tc.stack != "" {
				o.Set = []string{"monitoring.stack=" + tc.stack}
			}
			r, err := Render(o)
			require.NoError(t, err)
			var got []string
			for _, m := range r.Manifests {
				for _, k := range monitoringKinds {
					if m.Kind == k {
						got = append(got, k)
					}
				}
			}
			assert.ElementsMatch(t, tc.want, got)
		})
	}
}

// TestMonitoringObjects: the scrape object selects the aggregator's
// Service by its labels and metrics port with the series' own labels
// honoured; the rule object is files/alerts.yaml unchanged; the dashboard
// is files/dashboard.json unchanged.
func TestMonitoringObjects(t *testing.T) {
	src, err := fs.ReadFile(deploy.Chart(), "files/alerts.yaml")
	require.NoError(t, err)
	var rules map[string]any
	require.NoError(t, yaml.Unmarshal(src, &rules))
	dashSrc, err := fs.ReadFile(deploy.Chart(), "files/dashboard.json")
	require.NoError(t, err)
	var dash map[string]any
	require.NoError(t, json.Unmarshal(dashSrc, &dash))

	for _, stack := range []struct{ api, scrape, rule string }{
		{vmAPI, "VMServiceScrape", "VMRule"},
		{promAPI, "ServiceMonitor", "PrometheusRule"},
	} {
		t.Run(stack.rule, func(t *testing.T) {
			r, err := Render(Options{APIVersions: []string{stack.api, grafanaAPI}, Set: []string{"monitoring.labels.release=kps"}})
			require.NoError(t, err)

			sc, err := r.Object(stack.scrape, "cozy-health-aggregator")
			require.NoError(t, err)
			assert.Equal(t, stack.api, sc.GetAPIVersion())
			assert.Equal(t, "kps", sc.GetLabels()["release"])
			svc, err := r.Object("Service", "cozy-health-aggregator")
			require.NoError(t, err)
			sel := nested(t, sc, "spec", "selector", "matchLabels").(map[string]any)
			require.NotEmpty(t, sel)
			for k, v := range sel {
				assert.Equal(t, v, svc.GetLabels()[k], "the Service carries the selected label %s", k)
			}
			assert.Equal(t, []any{DefaultNamespace}, nested(t, sc, "spec", "namespaceSelector", "matchNames"))
			assert.Equal(t, "metrics", nested(t, sc, "spec", "endpoints", 0, "port"))
			assert.Equal(t, true, nested(t, sc, "spec", "endpoints", 0, "honorLabels"), "the series' namespace label is the Health objects', not the target's")
			assert.Equal(t, "30s", nested(t, sc, "spec", "endpoints", 0, "interval"))
			// The watchdog's PastFreshUntil compares a freshUntil scraped up
			// to one interval ago with time(): its margin covers the
			// interval the chart scrapes at.
			assert.Contains(t, string(src), "cozy_health_health_fresh_until_timestamp_seconds) < time() - 30,",
				"PastFreshUntil's margin is the scrape interval (30s)")
			var hasPort bool
			for _, p := range nested(t, svc, "spec", "ports").([]any) {
				hasPort = hasPort || p.(map[string]any)["name"] == "metrics"
			}
			assert.True(t, hasPort)

			rule, err := r.Object(stack.rule, "cozy-health")
			require.NoError(t, err)
			assert.Equal(t, stack.api, rule.GetAPIVersion())
			assert.Equal(t, rules["groups"], nested(t, rule, "spec", "groups"), "the rule object is files/alerts.yaml")

			gd, err := r.Object("GrafanaDashboard", "cozy-health")
			require.NoError(t, err)
			var got map[string]any
			require.NoError(t, json.Unmarshal([]byte(nested(t, gd, "spec", "json").(string)), &got))
			assert.Equal(t, dash, got, "the GrafanaDashboard is files/dashboard.json")
			assert.Equal(t, "grafana", nested(t, gd, "spec", "instanceSelector", "matchLabels", "dashboards"))
		})
	}
}

// TestRunbookBaseURL: monitoring.rules.runbookBaseURL moves every alert's
// runbook_url (the section anchor kept), and changes nothing else of the
// rules; by default they are files/alerts.yaml as written.
func TestRunbookBaseURL(t *testing.T) {
	const base = "https://wiki.example.internal/cozy-health/runbook"
	r, err := Render(Options{APIVersions: []string{vmAPI}, Set: []string{"monitoring.rules.runbookBaseURL=" + base}})
	require.NoError(t, err)
	rule, err := r.Object("VMRule", "cozy-health")
	require.NoError(t, err)
	def, err := Render(Options{APIVersions: []string{vmAPI}})
	require.NoError(t, err)
	defRule, err := def.Object("VMRule", "cozy-health")
	require.NoError(t, err)
	groups := nested(t, rule, "spec", "groups").([]any)
	defGroups := nested(t, defRule, "spec", "groups").([]any)
	n := 0
	for gi, g := range groups {
		for ri, r := range g.(map[string]any)["rules"].([]any) {
			rm := r.(map[string]any)
			dm := defGroups[gi].(map[string]any)["rules"].([]any)[ri].(map[string]any)
			ann, ok := rm["annotations"].(map[string]any)
			if !ok {
				continue
			}
			url := ann["runbook_url"].(string)
			anchor := "#" + strings.ToLower(rm["alert"].(string))
			assert.Equal(t, base+anchor, url, "%s", rm["alert"])
			assert.Equal(t, "https://github.com/cozystack/cozy-health/blob/main/docs/runbook.md"+anchor, dm["annotations"].(map[string]any)["runbook_url"], "the default")
			assert.Equal(t, dm["expr"], rm["expr"], "only the URL moves")
			n++
		}
	}
	assert.Positive(t, n)
}

// TestDashboardConfigMapAndKubeStateMetrics: the optional sidecar
// ConfigMap and kube-state-metrics customResourceState config.
func TestDashboardConfigMapAndKubeStateMetrics(t *testing.T) {
	r, err := Render(Options{Set: []string{"monitoring.dashboard.configMap=true", "monitoring.kubeStateMetrics.customResourceState=true"}})
	require.NoError(t, err)
	cm, err := r.Object("ConfigMap", "cozy-health-dashboard")
	require.NoError(t, err)
	assert.Equal(t, "1", cm.GetLabels()["grafana_dashboard"])
	var d map[string]any
	require.NoError(t, json.Unmarshal([]byte(nested(t, cm, "data", "cozy-health.json").(string)), &d))
	assert.Equal(t, "cozy-health", d["uid"])

	ksm, err := r.Object("ConfigMap", "cozy-health-kube-state-metrics")
	require.NoError(t, err)
	var cfg struct {
		Kind string `json:"kind"`
		Spec struct {
			Resources []struct {
				GroupVersionKind map[string]string   `json:"groupVersionKind"`
				LabelsFromPath   map[string][]string `json:"labelsFromPath"`
				Metrics          []struct {
					Name string `json:"name"`
				} `json:"metrics"`
			} `json:"resources"`
		} `json:"spec"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(nested(t, ksm, "data", "config.yaml").(string)), &cfg))
	assert.Equal(t, "CustomResourceStateMetrics", cfg.Kind)
	require.Len(t, cfg.Spec.Resources, 1)
	res := cfg.Spec.Resources[0]
	assert.Equal(t, map[string]string{"group": "health.cozystack.io", "version": "v1alpha1", "kind": "Health"}, res.GroupVersionKind)
	assert.Equal(t, []string{"spec", "component"}, res.LabelsFromPath["component"])
	require.Len(t, res.Metrics, 2)
	assert.Equal(t, "health_overall", res.Metrics[0].Name)
}
