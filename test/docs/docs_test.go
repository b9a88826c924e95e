// Package docs runs every command docs/*.md tells an operator to type, so
// the documentation cannot drift from the product: the kubectl commands
// against a lab-node (the chart installed on a real kubelet node, a real
// aggregator Deployment and agent DaemonSet, Health objects, the Lease),
// the make targets and go tests against this repository. Commands of tools
// that run only on a real Talos, LINSTOR or kube-ovn installation are listed,
// with why, in external, and code spans that name a command in a sentence
// rather than give one to type in named: a new one fails the test until it
// is run or listed. What it runs: every line of a ```sh block and every code
// span in prose that starts with one of tools; a block fenced otherwise
// (```text, ```console) is shown, not run, which is how the docs show what
// only a real cluster can run (helm, talm, talosctl loops) and the lab's own
// commands. TestLinks checks that every relative link of the Markdown files
// resolves.
package docs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cozystack/cozy-health/pkg/client/clientset/versioned"
	"github.com/cozystack/cozy-health/test/harness"
	"github.com/cozystack/cozy-health/test/harness/realnode"
	"github.com/cozystack/cozy-health/test/lab"
)

// Command is one command found in a document.
type Command struct {
	Doc, Text string
}

// tools are the first words that make a code span or a line a command.
var tools = []string{"kubectl", "talosctl", "linstor", "drbdsetup", "make", "go"}

// external are the commands of tools that run only against a real Talos
// node, LINSTOR controller or kube-ovn installation, which cannot run here
// (DESIGN: Talos machined and LINSTOR are served by real-protocol
// stand-ins, not their CLIs).
var external = map[string]string{
	"talosctl etcd defrag":                                             "Talos machined",
	"talosctl etcd alarm disarm":                                       "Talos machined",
	"talosctl -n NODE time":                                            "Talos machined",
	"talosctl -n NODE dmesg":                                           "Talos machined",
	"talosctl -n NODE etcd defrag":                                     "Talos machined",
	"talosctl -n NODE etcd leave":                                      "Talos machined",
	"linstor resource list -r RESOURCE":                                "LINSTOR controller",
	"drbdsetup status RESOURCE --verbose":                              "DRBD kernel module on a LINSTOR satellite",
	"linstor storage-pool list -n NODE":                                "LINSTOR controller",
	"linstor resource set-property NODE RESOURCE DrbdOptions/SkipDisk": "LINSTOR controller",
	"talosctl patch":                                                   "Talos machined",
	"talosctl reboot --drain":                                          "Talos machined",
	"drbdsetup events2":                                                "DRBD kernel module on a LINSTOR satellite",
	"kubectl ko nb status":                                             "kube-ovn's kubectl plugin and its ovn-central pods",
	"kubectl apply --server-side -f deploy/manifests/talos-serviceaccount.yaml": "a Talos cluster (serves talos.dev/v1alpha1)",
}

// named are code spans that name a command in a sentence rather than give
// one to type: the command alone, or its form with the reader's own files.
var named = map[string]string{
	"kubectl apply":                      "the tool the plain manifests are written for",
	"kubectl apply --server-side -f ...": "the form of the commands make release prints, with its files",
	"kubectl health drain-check":         "the command by name, the node left to the reader",
	"go test -short":                     "the flag make test-unit passes",
}

var (
	fence = regexp.MustCompile("(?s)```([a-z]*)\n(.*?)```")
	span  = regexp.MustCompile("`([^`]+)`")
)

// Extract returns the commands of a markdown document: every line of its
// ```sh blocks (comments stripped, continuations joined) and every code span
// elsewhere that starts with one of tools followed by an argument.
func Extract(doc, text string) []Command {
	var out []Command
	for _, m := range fence.FindAllStringSubmatch(text, -1) {
		if m[1] != "sh" {
			continue
		}
		body := strings.ReplaceAll(m[2], "\\\n", " ")
		for _, line := range strings.Split(body, "\n") {
			if i := strings.Index(line, " #"); i >= 0 {
				line = line[:i]
			}
			if line = strings.Join(strings.Fields(line), " "); line != "" && !strings.HasPrefix(line, "#") {
				out = append(out, Command{doc, line})
			}
		}
	}
	prose := fence.ReplaceAllString(text, "")
	for _, m := range span.FindAllStringSubmatch(prose, -1) {
		c := strings.Join(strings.Fields(m[1]), " ")
		f := strings.Fields(c)
		if len(f) < 2 {
			continue
		}
		for _, tool := range tools {
			if f[0] == tool && (tool != "go" || f[1] == "test") {
				out = append(out, Command{doc, c})
			}
		}
	}
	return out
}

func documents(t *testing.T) []Command {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(harness.RepoRoot(), "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var all []Command
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		all = append(all, Extract(filepath.Base(f), string(b))...)
	}
	return all
}

// The extraction finds the runbook's commands, the Lease is read where it
// lives (the platform namespace), and every external command is still in
// the docs (the list does not outlive them).
func TestExtract(t *testing.T) {
	cmds := documents(t)
	var texts []string
	for _, c := range cmds {
		texts = append(texts, c.Text)
	}
	assert.Contains(t, texts, "kubectl get chz -A")
	assert.Contains(t, texts, "kubectl -n cozy-system get lease cozy-health-aggregator -o yaml")
	assert.NotContains(t, texts, "kubectl -n cozy-health get lease cozy-health-aggregator -o yaml", "the Lease is in the platform namespace")
	assert.Contains(t, texts, "make soak SOAK_MINUTES=7 SOAK_SEED=42")
	for e := range external {
		assert.Contains(t, texts, e, "an external command no document names any more")
	}
	for e := range named {
		assert.Contains(t, texts, e, "a named command no document names any more")
	}
	assert.Equal(t, []string{"make", "soak", "SOAK_ARGS=--only etcd-stop,agent-kill"}, words("make soak SOAK_ARGS='--only etcd-stop,agent-kill'"))
	assert.Equal(t, []Command{{"x.md", "kubectl get pods -A"}, {"x.md", "kubectl get chz"}},
		Extract("x.md", "```sh\nkubectl get pods \\\n  -A   # all\n```\n```\nkubectl not-sh\n```\nsee `kubectl get chz` and `kubectl`\n"))
}

// words splits a command as the shell does for its simple quoting.
func words(s string) []string {
	var (
		out   []string
		cur   strings.Builder
		quote rune
		in    bool
	)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}

// placeholders are the docs' words for what the reader fills in, and what
// the lab has for them.
var placeholders = []struct{ word, value string }{
	{"KIND/RESOURCE", "Cluster.postgresql.cnpg.io/postgres-docs"},
	{"NAMESPACE", docsNS},
	{"SCHEDULE", "postgres-docs-daily"},
	{"NODE", "node-1"},
}

const docsNS = "tenant-docs"

func fill(c string) string {
	for _, p := range placeholders {
		c = regexp.MustCompile(`\b`+regexp.QuoteMeta(p.word)+`\b`).ReplaceAllString(c, p.value)
	}
	return c
}

// expected output (a regular expression) of some commands beyond exit 0.
var expected = map[string]string{
	"kubectl get chz -A": "cozy-system",
	"kubectl -n cozy-system get lease cozy-health-aggregator -o yaml": "holderIdentity: cozy-health-aggregator-",
	"kubectl health node NODE":                                        "node-1",
	"kubectl health budget":                                           `NODE\s+VERDICT\s+LOSING IT NEXT WOULD BREAK\n(.|\n)*node-1\s`,
	// Run after the runbook's resume of the suspended ScheduledBackup (the
	// same section, above it): the schedule counts again and no backup has
	// run yet (the lab has no CNPG operator).
	"kubectl -n NAMESPACE get chz backups -o yaml":                       "reason: AwaitingFirstBackup",
	"kubectl -n cozy-health describe certificate cozy-health-aggregator": "cozy-health-aggregator-tls",
}

// repoSh runs a shell command in the repository root.
func repoSh(t *testing.T, cmd string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ec := exec.CommandContext(ctx, "bash", "-c", cmd)
	ec.Dir = harness.RepoRoot()
	out, err := ec.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	require.NoError(t, err)
	return 0, string(out)
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;]*m`)

// The make targets and go tests the docs name exist: the target is in
// `make help` (a pattern such as bench-* matches one there), every VAR= (an
// optional one in [brackets] too) is a variable the Makefile reads, the
// -run test (or, with -run '^$', the -bench benchmark) is in `go test -list`
// of its package. Running them is what make test and make soak do.
func TestDocsMakeAndGoCommands(t *testing.T) {
	code, help := repoSh(t, "make help")
	require.Equal(t, 0, code, help)
	help = ansi.ReplaceAllString(help, "")
	mk, err := os.ReadFile(filepath.Join(harness.RepoRoot(), "Makefile"))
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, cmd := range documents(t) {
		f := words(cmd.Text)
		if seen[cmd.Text] || (f[0] != "make" && f[0] != "go") || named[cmd.Text] != "" {
			continue
		}
		seen[cmd.Text] = true
		t.Run(cmd.Doc+": "+cmd.Text, func(t *testing.T) {
			if f[0] == "make" {
				for _, a := range f[1:] {
					a = strings.TrimSuffix(strings.TrimPrefix(a, "["), "]")
					if k, _, ok := strings.Cut(a, "="); ok {
						assert.Regexp(t, `\$\{?`+regexp.QuoteMeta(k)+`\b|\$\(`+regexp.QuoteMeta(k)+`\)`, string(mk), "make variable %s is read by the Makefile", k)
						continue
					}
					target := strings.ReplaceAll(regexp.QuoteMeta(a), `\*`, `[\w-]*`)
					assert.Regexp(t, `(?m)^\s+`+target+`\s`, help, "make target %s", a)
				}
				return
			}
			require.Equal(t, "test", f[1], "go commands in docs are go test")
			run, bench := "", ""
			var pkgs []string
			for i := 2; i < len(f); i++ {
				switch {
				case f[i] == "-run" && i+1 < len(f):
					run = strings.Trim(f[i+1], "^$")
					i++
				case f[i] == "-bench" && i+1 < len(f):
					bench = strings.Trim(f[i+1], "^$")
					i++
				case f[i] == "-benchtime" && i+1 < len(f):
					i++
				case !strings.HasPrefix(f[i], "-"):
					pkgs = append(pkgs, f[i])
				}
			}
			if run == "" {
				run = bench
			}
			require.NotEmpty(t, run, "a go test command in docs names its test with -run (or its benchmark with -bench)")
			code, out := repoSh(t, "go test -list '^"+run+"$' "+strings.Join(pkgs, " "))
			require.Equal(t, 0, code, out)
			assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(run)+`$`, out, "the test %s exists in %v", run, pkgs)
		})
	}
	assert.NotEmpty(t, seen)
}

func TestDocsCommandsRunOnTheLab(t *testing.T) {
	cmds := documents(t)
	c := realnode.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	bin := os.Getenv("COZY_HEALTH_BIN")
	require.NotEmpty(t, bin, "COZY_HEALTH_BIN (make build) is required")
	require.NoError(t, lab.InstallChart(ctx, c, bin, t.Logf))

	// What the backups commands look at: a CNPG Cluster whose only
	// ScheduledBackup is suspended (the adapters pick the CRDs up live).
	require.NoError(t, c.ControlPlane.InstallAdapterCRDs(ctx, "postgresql.cnpg.io_clusters", "postgresql.cnpg.io_backups", "postgresql.cnpg.io_scheduledbackups"))
	kubectl := c.Binary("kubectl")
	env := append(os.Environ(), "KUBECONFIG="+c.Kubeconfig,
		"PATH="+filepath.Dir(kubectl)+string(os.PathListSeparator)+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	sh := func(cmd string) (int, string) {
		ec := exec.CommandContext(ctx, "bash", "-c", cmd)
		ec.Env = env
		ec.Dir = harness.RepoRoot()
		var out bytes.Buffer
		ec.Stdout, ec.Stderr = &out, &out
		err := ec.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			code = -1
		}
		return code, out.String()
	}
	// A tenant namespace as Cozystack's tenant chart labels it, so the
	// backups Health object is written there, beside the Cluster.
	code, out := sh(`kubectl apply -f - <<'EOF'
apiVersion: v1
kind: Namespace
metadata:
  name: ` + docsNS + `
  labels: {tenant.cozystack.io/tenant-root: "", tenant.cozystack.io/` + docsNS + `: ""}
---
apiVersion: postgresql.cnpg.io/v1
kind: Cluster
metadata: {name: postgres-docs, namespace: ` + docsNS + `}
spec:
  instances: 1
  storage: {size: 1Gi}
  backup:
    barmanObjectStore:
      destinationPath: s3://backups/
      s3Credentials:
        accessKeyId: {name: backup-creds, key: AWS_ACCESS_KEY_ID}
        secretAccessKey: {name: backup-creds, key: AWS_SECRET_ACCESS_KEY}
---
apiVersion: postgresql.cnpg.io/v1
kind: ScheduledBackup
metadata: {name: postgres-docs-daily, namespace: ` + docsNS + `}
spec: {schedule: "0 0 0 * * *", cluster: {name: postgres-docs}, suspend: true}
---
# Where the runbook looks for LINSTOR's API client certificate: the
# namespace and Secret the Piraeus operator's cert-manager Certificate
# writes on a cluster with LINSTOR (its contents are not read here).
apiVersion: v1
kind: Namespace
metadata: {name: cozy-linstor}
---
apiVersion: v1
kind: Secret
metadata: {name: linstor-client-tls, namespace: cozy-linstor}
type: Opaque
stringData: {ca.crt: "", tls.crt: "", tls.key: ""}
EOF`)
	require.Equal(t, 0, code, out)

	// With cert-manager's API served, the chart (tls.mode auto) renders the
	// Certificate the runbook describes; the aggregators keep serving the
	// Secret they minted.
	require.NoError(t, c.ControlPlane.InstallCertManagerCRDs(ctx))
	h, err := lab.NewHelm(c.Kubeconfig, "cozy-health", "cozy-health")
	require.NoError(t, err)
	rel, err := h.Last()
	require.NoError(t, err)
	_, err = h.Upgrade(ctx, rel.Config)
	require.NoError(t, err)
	code, out = sh("kubectl -n cozy-health rollout status deploy/cozy-health-aggregator --timeout=5m")
	require.Equal(t, 0, code, out)
	// and a replica of the new rollout holds the Lease again.
	require.NoError(t, wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := c.Clientset().CoordinationV1().Leases("cozy-system").Get(ctx, "cozy-health-aggregator", metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", nil
	}), "a leader after the rollout")

	hc, err := versioned.NewForConfig(c.Config)
	require.NoError(t, err)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err1 := hc.HealthV1alpha1().Healths("cozy-system").Get(ctx, "disk", metav1.GetOptions{})
		_, err2 := hc.HealthV1alpha1().Healths(docsNS).Get(ctx, "backups", metav1.GetOptions{})
		return err1 == nil && err2 == nil, nil
	}), "Health objects disk (cozy-system) and backups (%s) written", docsNS)

	// The runbook's old command: the Lease is not in the release namespace.
	code, out = sh("kubectl -n cozy-health get lease cozy-health-aggregator -o yaml")
	assert.NotEqual(t, 0, code)
	assert.Contains(t, out, `leases.coordination.k8s.io "cozy-health-aggregator" not found`)

	ran := map[string]bool{}
	for _, cmd := range cmds {
		if ran[cmd.Text] {
			continue
		}
		ran[cmd.Text] = true
		t.Run(cmd.Doc+": "+cmd.Text, func(t *testing.T) {
			f := words(cmd.Text)
			switch {
			case external[cmd.Text] != "":
				t.Logf("not run here: needs %s", external[cmd.Text])
			case named[cmd.Text] != "":
				t.Logf("not run: %s", named[cmd.Text])
			case strings.HasPrefix(cmd.Text, "kubectl health drain-check "):
				// Its exit code is its answer: 0 safe, 1 blocked, 2 unknown.
				code, out := sh(fill(cmd.Text))
				t.Logf("$ %s\n%s", fill(cmd.Text), out)
				verdict := map[int]string{0: "SAFE", 1: "BLOCKED", 2: "UNKNOWN"}[code]
				require.NotEmpty(t, verdict, "exit %d:\n%s", code, out)
				assert.Contains(t, out, "Node node-1: "+verdict)
			case f[0] == "kubectl":
				want := regexp.MustCompile(expected[cmd.Text])
				var (
					code int
					out  string
				)
				// The Lease is released and taken again while the
				// aggregators roll: its holder is read once one holds it.
				_ = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
					code, out = sh(fill(cmd.Text))
					return code == 0 && want.MatchString(out), nil
				})
				t.Logf("$ %s\n%s", fill(cmd.Text), out)
				require.Equal(t, 0, code, "%s exits 0:\n%s", fill(cmd.Text), out)
				assert.Regexp(t, want, out)
			case f[0] == "make" || f[0] == "go":
				// TestDocsMakeAndGoCommands checks these.
			default:
				t.Fatalf("%s: %q is neither run here nor listed in external", cmd.Doc, cmd.Text)
			}
		})
	}
}
