package monitoring

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/cozy-health/deploy/render"
	"github.com/cozystack/cozy-health/test/harness"
	"github.com/cozystack/cozy-health/test/lab"
)

// The real evaluators on a lab, as one stack that TestAlertEvaluation,
// TestAlertTiming and the soak's rolling-maintenance scenario
// (test/soak) start the same way: Debian's prometheus, and vmalert over
// victoria-metrics single (built by `make vmalert`), each with its own
// Debian prometheus-alertmanager, scraping every aggregator replica with
// honor_labels (as the chart's ServiceMonitor and VMServiceScrape) and
// evaluating the rules the chart renders as its PrometheusRule (the
// VMRule's spec is the same), every `for` divided as EvalConfig says.

// DebianInstall is the one command that provides the real evaluators.
const DebianInstall = "apt-get update; apt-get install -y --no-install-recommends prometheus prometheus-alertmanager"

// EvalConfig says how the stack evaluates the shipped rules.
type EvalConfig struct {
	// ForDivisor divides every rule's `for` (1: the shipped durations).
	ForDivisor int
	// Interval, when set, replaces the rule group's interval (the
	// evaluation interval); otherwise the shipped one stays.
	Interval time.Duration
	// Scrape is the scrape interval of the aggregators.
	Scrape time.Duration
	// VMDelay, when set, replaces victoria-metrics's -search.latencyOffset
	// and vmalert's -rule.evalDelay (30 s each by default).
	VMDelay time.Duration
}

// Evaluator is one rule evaluator on the lab, with its own Alertmanager:
// Prometheus, or vmalert over victoria-metrics single.
type Evaluator struct {
	Name string
	// Alerts serves /api/v1/alerts; Query serves /api/v1/query; AM is
	// the evaluator's Alertmanager.
	Alerts, Query, AM string
}

// Stack is the evaluators started on a lab.
type Stack struct {
	Evaluators []*Evaluator
	// For is each alert's scaled `for`; Eval the evaluation interval.
	For  map[string]time.Duration
	Eval time.Duration

	dir   string
	procs []*evalProc
}

type evalProc struct {
	name string
	cmd  *exec.Cmd
	log  *os.File
}

// Binaries returns the paths of Debian's prometheus and alertmanager and
// the directory holding vmalert and victoria-metrics.
func Binaries() (prom, am, vmDir string, err error) {
	if prom, err = exec.LookPath("prometheus"); err != nil {
		return "", "", "", fmt.Errorf("debian's prometheus is not installed (%s): %w", DebianInstall, err)
	}
	if am, err = exec.LookPath("prometheus-alertmanager"); err != nil {
		return "", "", "", fmt.Errorf("debian's prometheus-alertmanager is not installed (%s): %w", DebianInstall, err)
	}
	if vmDir, err = harness.VMAlert.Dir(); err != nil {
		return "", "", "", err
	}
	return prom, am, vmDir, nil
}

// RenderedRules renders the chart for a cluster serving
// monitoring.coreos.com/v1 and returns its PrometheusRule's spec; it
// checks that the VMRule rendered for VictoriaMetrics carries the same.
func RenderedRules() (map[string]any, error) {
	spec := func(api, kind string) (map[string]any, error) {
		rel, err := render.Render(render.Options{APIVersions: []string{api}})
		if err != nil {
			return nil, err
		}
		for _, m := range rel.Manifests {
			if m.Kind != kind {
				continue
			}
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(m.Content), &obj); err != nil {
				return nil, fmt.Errorf("%s: %w", kind, err)
			}
			s, ok := obj["spec"].(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s without spec", kind)
			}
			return s, nil
		}
		return nil, fmt.Errorf("the chart rendered no %s for a cluster serving %s", kind, api)
	}
	prom, err := spec("monitoring.coreos.com/v1", "PrometheusRule")
	if err != nil {
		return nil, err
	}
	vm, err := spec("operator.victoriametrics.com/v1beta1", "VMRule")
	if err != nil {
		return nil, err
	}
	if !reflect.DeepEqual(prom, vm) {
		return nil, fmt.Errorf("the PrometheusRule and the VMRule carry different rules")
	}
	return prom, nil
}

// WriteRules writes the rendered rules into dir, with `for` divided and
// the group interval replaced as c says; it returns the file, each alert's
// scaled `for` and the evaluation interval.
func WriteRules(dir string, c EvalConfig) (string, map[string]time.Duration, time.Duration, error) {
	spec, err := RenderedRules()
	if err != nil {
		return "", nil, 0, err
	}
	div := max(c.ForDivisor, 1)
	forOf := map[string]time.Duration{}
	var eval time.Duration
	groups, _ := spec["groups"].([]any)
	if len(groups) == 0 {
		return "", nil, 0, fmt.Errorf("the rendered rules have no group")
	}
	for _, g := range groups {
		gm, _ := g.(map[string]any)
		if c.Interval > 0 {
			gm["interval"] = model.Duration(c.Interval).String()
		}
		iv, err := model.ParseDuration(fmt.Sprint(gm["interval"]))
		if err != nil {
			return "", nil, 0, fmt.Errorf("group interval: %w", err)
		}
		eval = time.Duration(iv)
		rules, _ := gm["rules"].([]any)
		for _, r := range rules {
			rm, _ := r.(map[string]any)
			name, _ := rm["alert"].(string)
			forOf[name] = 0
			if f, ok := rm["for"].(string); ok {
				d, err := model.ParseDuration(f)
				if err != nil {
					return "", nil, 0, fmt.Errorf("%s: for: %w", name, err)
				}
				scaled := time.Duration(d) / time.Duration(div)
				rm["for"] = model.Duration(scaled).String()
				forOf[name] = scaled
			}
		}
	}
	b, err := yaml.Marshal(spec)
	if err != nil {
		return "", nil, 0, err
	}
	f := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		return "", nil, 0, err
	}
	return f, forOf, eval, nil
}

// StartStack starts, in dir, Prometheus and vmalert over victoria-metrics,
// each with its own Alertmanager, scraping the aggregators of the lab st
// and evaluating the chart's rules as c says. Close stops them.
func StartStack(dir string, st *lab.State, c EvalConfig, logf func(string, ...any)) (_ *Stack, err error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	promBin, amBin, vmDir, err := Binaries()
	if err != nil {
		return nil, err
	}
	s := &Stack{dir: dir}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	var rulesFile string
	if rulesFile, s.For, s.Eval, err = WriteRules(dir, c); err != nil {
		return nil, err
	}
	addr := func() (string, error) { return harness.FreeAddr() }
	amConf := filepath.Join(dir, "alertmanager.yml")
	if err := os.WriteFile(amConf, []byte("route:\n  receiver: none\n  group_wait: 0s\n  group_interval: 1s\nreceivers:\n  - name: none\n"), 0o644); err != nil {
		return nil, err
	}
	startAM := func(name string) (string, error) {
		a, err := addr()
		if err != nil {
			return "", err
		}
		return a, s.start(name, amBin, logf, "--config.file="+amConf, "--storage.path="+filepath.Join(dir, name+"-data"),
			"--web.listen-address="+a, "--cluster.listen-address=")
	}
	var targets []string
	for _, a := range st.Aggregators {
		targets = append(targets, fmt.Sprintf("%q", a.Metrics))
	}
	sc := model.Duration(c.Scrape).String()
	scrapeConf := fmt.Sprintf(`global:
  scrape_interval: %[1]s
  scrape_timeout: %[1]s
scrape_configs:
  - job_name: cozy-health-aggregator
    honor_labels: true
    static_configs: [{targets: [%[2]s]}]
`, sc, strings.Join(targets, ", "))

	prom := &Evaluator{Name: "prometheus"}
	if prom.AM, err = startAM("alertmanager-prometheus"); err != nil {
		return nil, err
	}
	if prom.Alerts, err = addr(); err != nil {
		return nil, err
	}
	prom.Query = prom.Alerts
	promConf := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(promConf, []byte(scrapeConf+fmt.Sprintf("rule_files: [%q]\nalerting:\n  alertmanagers:\n    - static_configs: [{targets: [%q]}]\n", rulesFile, prom.AM)), 0o644); err != nil {
		return nil, err
	}
	if err := s.start("prometheus", promBin, logf, "--config.file="+promConf, "--storage.tsdb.path="+filepath.Join(dir, "prom-data"),
		"--web.listen-address="+prom.Alerts, "--rules.alert.resend-delay=1s"); err != nil {
		return nil, err
	}

	// vmalert over victoria-metrics single, with their default delays
	// (-search.latencyOffset and -rule.evalDelay, 30 s each) as
	// Cozystack's VictoriaMetrics runs them, unless c.VMDelay says.
	vm := &Evaluator{Name: "vmalert"}
	if vm.AM, err = startAM("alertmanager-vmalert"); err != nil {
		return nil, err
	}
	if vm.Alerts, err = addr(); err != nil {
		return nil, err
	}
	if vm.Query, err = addr(); err != nil {
		return nil, err
	}
	vmConf := filepath.Join(dir, "vm-scrape.yml")
	if err := os.WriteFile(vmConf, []byte(scrapeConf), 0o644); err != nil {
		return nil, err
	}
	vmArgs := []string{"-storageDataPath=" + filepath.Join(dir, "vm-data"), "-httpListenAddr=" + vm.Query, "-promscrape.config=" + vmConf, "-retentionPeriod=1d"}
	vmalertArgs := []string{"-rule=" + rulesFile, "-datasource.url=http://" + vm.Query, "-notifier.url=http://" + vm.AM,
		"-httpListenAddr=" + vm.Alerts, "-evaluationInterval=" + model.Duration(s.Eval).String()}
	if c.VMDelay > 0 {
		vmArgs = append(vmArgs, "-search.latencyOffset="+c.VMDelay.String())
		vmalertArgs = append(vmalertArgs, "-rule.evalDelay="+c.VMDelay.String())
	}
	if err := s.start("victoria-metrics", filepath.Join(vmDir, "victoria-metrics"), logf, vmArgs...); err != nil {
		return nil, err
	}
	if err := s.start("vmalert", filepath.Join(vmDir, "vmalert"), logf, vmalertArgs...); err != nil {
		return nil, err
	}
	s.Evaluators = []*Evaluator{prom, vm}
	return s, nil
}

// start starts a process with its output in dir/name.log; it dies with
// the caller even when the caller is killed.
func (s *Stack) start(name, bin string, logf func(string, ...any), args ...string) error {
	lf, err := os.Create(filepath.Join(s.dir, name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = lf.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	logf("started %s (pid %d): %s %s", name, cmd.Process.Pid, bin, strings.Join(args, " "))
	s.procs = append(s.procs, &evalProc{name: name, cmd: cmd, log: lf})
	return nil
}

// LogTail is the last n bytes of the named process's log.
func (s *Stack) LogTail(name string, n int) string {
	b, _ := os.ReadFile(filepath.Join(s.dir, name+".log"))
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// Names are the stack's processes, in start order.
func (s *Stack) Names() []string {
	out := make([]string, 0, len(s.procs))
	for _, p := range s.procs {
		out = append(out, p.name)
	}
	return out
}

// Close stops every process the stack started (SIGTERM, then SIGKILL
// after 10 s), by its pid.
func (s *Stack) Close() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		p := s.procs[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
		_ = p.log.Close()
	}
	s.procs = nil
}

// Ready tells whether ev scrapes n aggregators (count(up==1) is n).
func (ev *Evaluator) Ready(ctx context.Context, n int) bool {
	body, code, err := httpGet(ctx, "http://"+ev.Query+"/api/v1/query?query=count(up%3D%3D1)")
	return err == nil && code == http.StatusOK && strings.Contains(body, fmt.Sprintf(`"%d"]`, n))
}

// Alert is one alert of an evaluator's /api/v1/alerts.
type Alert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

// PromAlerts is an evaluator's /api/v1/alerts (Prometheus's, vmalert's).
func PromAlerts(ctx context.Context, addr string) ([]Alert, error) {
	body, code, err := httpGet(ctx, "http://"+addr+"/api/v1/alerts")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("/api/v1/alerts: %d %s", code, body)
	}
	var r struct {
		Data struct {
			Alerts []Alert `json:"alerts"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return nil, fmt.Errorf("/api/v1/alerts: %w", err)
	}
	return r.Data.Alerts, nil
}

// AMAlerts is Alertmanager's /api/v2/alerts (the active ones: a resolved
// alert leaves it), each alert's labels.
func AMAlerts(ctx context.Context, addr string) ([]map[string]string, error) {
	body, code, err := httpGet(ctx, "http://"+addr+"/api/v2/alerts")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("alertmanager /api/v2/alerts: %d %s", code, body)
	}
	var r []struct {
		Labels map[string]string `json:"labels"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return nil, fmt.Errorf("alertmanager /api/v2/alerts: %w", err)
	}
	out := make([]map[string]string, 0, len(r))
	for _, a := range r {
		out = append(out, a.Labels)
	}
	return out, nil
}

func httpGet(ctx context.Context, url string) (string, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode, err
}
