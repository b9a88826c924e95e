// Package harness runs a real Kubernetes control plane for tests and for the
// local lab: etcd and kube-apiserver v1.37.2, built from the Go module proxy
// (the TestBin tool, `make testbin`), on free loopback ports. Nothing in it
// is a fake: CRD validation, the status subresource, server-side apply,
// RBAC, TokenReview and Leases behave exactly as in a cluster. Its
// subpackage realnode adds a real kubelet node.
package harness

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cozystack/cozy-health/pkg/tlsutil"
)

// KubernetesVersion is the version of the control-plane binaries.
const KubernetesVersion = "v1.37.2"

// Options configure a control plane started outside a test.
type Options struct {
	// Dir holds data, certificates, logs and the admin kubeconfig. Created if
	// missing. Required.
	Dir string
	// Detach starts the processes in their own session and without a parent
	// death signal, so they outlive the calling process (the lab's `up`).
	Detach bool
	// Address is the IP kube-apiserver binds to and advertises; default
	// 127.0.0.1. realnode sets its node bridge's address, which pods
	// reach (a loopback address is not reachable from a pod).
	Address string
	// TalosPodSecurity enables PodSecurity admission as Talos configures it:
	// every namespace but kube-system enforces "baseline" unless labelled
	// otherwise, so a manifest Talos refuses is refused here too.
	TalosPodSecurity bool
	// Kubelet makes the apiserver serve a real kubelet (realnode sets it):
	// Node authorization, NodeRestriction, a kubelet client certificate,
	// ServiceAccount admission (pods get their token volumes).
	Kubelet bool
}

// ControlPlane is a running etcd + kube-apiserver.
type ControlPlane struct {
	// Dir holds data, certificates, logs and the admin kubeconfig.
	Dir string
	// Kubeconfig is the path of the admin kubeconfig.
	Kubeconfig string
	// Config is an admin (system:masters) client config.
	Config *rest.Config
	// EtcdURL is etcd's client URL.
	EtcdURL string
	// APIServerURL is the apiserver's https URL.
	APIServerURL string

	bin    string
	detach bool
	opts   Options
	ca     *tlsutil.CA // signs client certificates (--client-ca-file)

	mu        sync.Mutex // guards the processes below
	etcd      *process
	apiserver *process
	apiArgs   []string
}

// RepoRoot returns the root of the cozy-health repository: $COZY_HEALTH_ROOT,
// or the nearest parent of the working directory (or of this source file)
// whose go.mod declares the cozy-health module. Empty when not found.
func RepoRoot() string {
	if r := os.Getenv("COZY_HEALTH_ROOT"); r != "" {
		return r
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for d := dir; ; d = filepath.Dir(d) {
			b, err := os.ReadFile(filepath.Join(d, "go.mod"))
			if err == nil && bytes.HasPrefix(b, []byte("module github.com/cozystack/cozy-health\n")) {
				return d
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return ""
}

// Start starts a control plane for a test and stops it at the test's end.
func Start(t testing.TB) *ControlPlane {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith starts a control plane with o for a test (Dir defaults to a
// temporary directory) and stops it at the test's end.
func StartWith(t testing.TB, o Options) *ControlPlane {
	t.Helper()
	SkipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	cp, err := StartControlPlane(ctx, o)
	if err != nil {
		t.Fatalf("start control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Errorf("stop control plane: %v", err)
		}
	})
	return cp
}

// StartControlPlane starts etcd and kube-apiserver in o.Dir and returns when
// the apiserver is ready. Ports are picked free on 127.0.0.1; a start that
// loses a port race is retried.
func StartControlPlane(ctx context.Context, o Options) (*ControlPlane, error) {
	if o.Dir == "" {
		return nil, errors.New("start control plane: Options.Dir is required")
	}
	bin, err := TestBin.Dir()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", o.Dir, err)
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		cp := &ControlPlane{Dir: o.Dir, bin: bin, detach: o.Detach, opts: o}
		if lastErr = cp.start(ctx); lastErr == nil {
			return cp, nil
		}
		_ = cp.Stop()
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func (c *ControlPlane) start(ctx context.Context) error {
	pki := filepath.Join(c.Dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return fmt.Errorf("create pki dir: %w", err)
	}
	if err := writeServiceAccountKeys(pki); err != nil {
		return err
	}
	ca, err := loadOrCreateCA(pki, "client-ca")
	if err != nil {
		return err
	}
	c.ca = ca
	const adminToken = "cozy-health-admin-token"
	tokens := filepath.Join(pki, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(adminToken+",admin,admin,system:masters\n"), 0o600); err != nil {
		return fmt.Errorf("write token file: %w", err)
	}

	etcdPort, err := FreePort()
	if err != nil {
		return err
	}
	peerPort, err := FreePort()
	if err != nil {
		return err
	}
	apiPort, err := FreePort()
	if err != nil {
		return err
	}
	c.EtcdURL = "http://127.0.0.1:" + strconv.Itoa(etcdPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	etcdData := filepath.Join(c.Dir, "etcd")
	_ = os.RemoveAll(etcdData)
	c.etcd, err = c.spawn("etcd", []string{
		"--name=harness",
		"--data-dir=" + etcdData,
		"--listen-client-urls=" + c.EtcdURL,
		"--advertise-client-urls=" + c.EtcdURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=harness=" + peerURL,
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	})
	if err != nil {
		return err
	}
	if err := waitFor(ctx, c.etcd, httpOK(http.DefaultClient, c.EtcdURL+"/health")); err != nil {
		return fmt.Errorf("wait for etcd: %w", err)
	}

	addr := c.opts.Address
	if addr == "" {
		addr = "127.0.0.1"
	}
	c.APIServerURL = "https://" + net.JoinHostPort(addr, strconv.Itoa(apiPort))
	c.apiArgs = []string{
		"--etcd-servers=" + c.EtcdURL,
		"--bind-address=" + addr,
		"--advertise-address=" + addr,
		"--secure-port=" + strconv.Itoa(apiPort),
		"--cert-dir=" + filepath.Join(c.Dir, "apiserver-certs"),
		"--service-cluster-ip-range=10.96.0.0/24",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + filepath.Join(pki, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(pki, "sa.key"),
		"--token-auth-file=" + tokens,
		"--client-ca-file=" + filepath.Join(pki, "client-ca.crt"),
		"--enable-priority-and-fairness=false",
	}
	if ip := net.ParseIP(addr); ip != nil && ip.IsLoopback() {
		// 1.37 refuses a loopback advertise address with the default
		// reconciler; nothing can reach a loopback endpoint anyway.
		c.apiArgs = append(c.apiArgs, "--endpoint-reconciler-type=none")
	}
	if c.opts.Kubelet {
		certPEM, keyPEM, err := issueClient(ca, "kube-apiserver-kubelet-client", []string{"system:masters"})
		if err != nil {
			return err
		}
		crt, key := filepath.Join(pki, "apiserver-kubelet-client.crt"), filepath.Join(pki, "apiserver-kubelet-client.key")
		if err := os.WriteFile(crt, certPEM, 0o600); err != nil {
			return fmt.Errorf("write kubelet client certificate: %w", err)
		}
		if err := os.WriteFile(key, keyPEM, 0o600); err != nil {
			return fmt.Errorf("write kubelet client key: %w", err)
		}
		c.apiArgs = append(c.apiArgs,
			"--authorization-mode=Node,RBAC",
			"--enable-admission-plugins=NodeRestriction",
			"--allow-privileged=true",
			"--kubelet-client-certificate="+crt,
			"--kubelet-client-key="+key,
			"--kubelet-preferred-address-types=InternalIP",
		)
	} else {
		// No token controller and no kubelet: pods get no token volume.
		c.apiArgs = append(c.apiArgs, "--authorization-mode=RBAC", "--disable-admission-plugins=ServiceAccount")
	}
	if c.opts.TalosPodSecurity {
		cfg := filepath.Join(pki, "admission.yaml")
		if err := os.WriteFile(cfg, []byte(talosAdmissionConfig), 0o600); err != nil {
			return fmt.Errorf("write admission config: %w", err)
		}
		c.apiArgs = append(c.apiArgs, "--admission-control-config-file="+cfg)
	}
	if err := c.startAPIServer(ctx); err != nil {
		return err
	}
	servingCA, err := os.ReadFile(filepath.Join(c.Dir, "apiserver-certs", "apiserver.crt"))
	if err != nil {
		return fmt.Errorf("read apiserver serving cert: %w", err)
	}
	c.Config = &rest.Config{
		Host:            c.APIServerURL,
		BearerToken:     adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: servingCA},
		QPS:             200,
		Burst:           400,
	}
	c.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	if err := writeKubeconfig(c.Kubeconfig, c.APIServerURL, servingCA, "admin", map[string]string{"token": adminToken}); err != nil {
		return err
	}
	return nil
}

// talosAdmissionConfig is the PodSecurity configuration Talos puts in its
// machine config by default (Talos docs, "Pod Security").
const talosAdmissionConfig = `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
  - name: PodSecurity
    configuration:
      apiVersion: pod-security.admission.config.k8s.io/v1
      kind: PodSecurityConfiguration
      defaults:
        enforce: baseline
        enforce-version: latest
        audit: restricted
        audit-version: latest
        warn: restricted
        warn-version: latest
      exemptions:
        usernames: []
        runtimeClasses: []
        namespaces: [kube-system]
`

func (c *ControlPlane) startAPIServer(ctx context.Context) error {
	p, err := c.spawn("kube-apiserver", c.apiArgs)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.apiserver = p
	c.mu.Unlock()
	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // readiness probe of the apiserver we just started on loopback; clients verify its CA
	}
	if err := waitFor(ctx, p, httpOK(client, c.APIServerURL+"/readyz")); err != nil {
		return fmt.Errorf("wait for kube-apiserver: %w", err)
	}
	return nil
}

// StopAPIServer stops kube-apiserver and leaves etcd running; StartAPIServer
// brings it back on the same port with the same certificates.
func (c *ControlPlane) StopAPIServer() error {
	c.mu.Lock()
	p := c.apiserver
	c.apiserver = nil
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.stop()
}

// StartAPIServer starts kube-apiserver again after StopAPIServer.
func (c *ControlPlane) StartAPIServer(ctx context.Context) error {
	c.mu.Lock()
	running := c.apiserver != nil
	c.mu.Unlock()
	if running {
		return errors.New("start kube-apiserver: already running")
	}
	return c.startAPIServer(ctx)
}

// Pids returns the pids of etcd and kube-apiserver (0 when not running).
func (c *ControlPlane) Pids() (etcd, apiserver int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.etcd != nil {
		etcd = c.etcd.cmd.Process.Pid
	}
	if c.apiserver != nil {
		apiserver = c.apiserver.cmd.Process.Pid
	}
	return etcd, apiserver
}

// Stop stops kube-apiserver, then etcd. It is safe to call more than once.
func (c *ControlPlane) Stop() error {
	var errs []error
	if err := c.StopAPIServer(); err != nil {
		errs = append(errs, err)
	}
	c.mu.Lock()
	p := c.etcd
	c.etcd = nil
	c.mu.Unlock()
	if p != nil {
		if err := p.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Clientset returns an admin clientset.
func (c *ControlPlane) Clientset() kubernetes.Interface {
	return kubernetes.NewForConfigOrDie(c.Config)
}

// Binary returns the path of one of the control-plane binaries (etcd,
// kube-apiserver, kubectl).
func (c *ControlPlane) Binary(name string) string {
	return filepath.Join(c.bin, name)
}

// Kubectl runs kubectl with the admin kubeconfig and returns its stdout; on
// failure the error carries stderr.
func (c *ControlPlane) Kubectl(ctx context.Context, args ...string) (string, error) {
	return RunKubectl(ctx, c.Binary("kubectl"), c.Kubeconfig, args...)
}

// RunKubectl runs a kubectl binary with a kubeconfig and returns its stdout;
// on failure the error carries stderr.
func RunKubectl(ctx context.Context, kubectl, kubeconfig string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig=" + kubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// UserConfig returns a client config authenticating as user with groups by
// an x509 client certificate signed by the apiserver's client CA.
func (c *ControlPlane) UserConfig(user string, groups ...string) (*rest.Config, error) {
	certPEM, keyPEM, err := issueClient(c.ca, user, groups)
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(c.Config)
	cfg.BearerToken = ""
	cfg.CertData = certPEM
	cfg.KeyData = keyPEM
	return cfg, nil
}

// UserKubeconfig writes a kubeconfig for user (see UserConfig) into Dir and
// returns its path.
func (c *ControlPlane) UserKubeconfig(user string, groups ...string) (string, error) {
	path := filepath.Join(c.Dir, "kubeconfig-"+sanitize(user))
	return path, c.WriteUserKubeconfig(path, user, groups...)
}

// WriteUserKubeconfig writes a kubeconfig for user (see UserConfig) at path.
func (c *ControlPlane) WriteUserKubeconfig(path, user string, groups ...string) error {
	certPEM, keyPEM, err := issueClient(c.ca, user, groups)
	if err != nil {
		return err
	}
	return writeKubeconfig(path, c.APIServerURL, c.Config.CAData, user, map[string]string{
		"client-certificate-data": b64(certPEM),
		"client-key-data":         b64(keyPEM),
	})
}

// ServingCA returns the PEM bundle that verifies the apiserver's serving
// certificate.
func (c *ControlPlane) ServingCA() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.Config.CAData)
	return pool
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == ':' || r == ' ' {
			return '_'
		}
		return r
	}, s)
}

// FreePort picks a free TCP port on 127.0.0.1.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// FreeAddr is FreePort as a 127.0.0.1:port address.
func FreeAddr() (string, error) {
	p, err := FreePort()
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(p), nil
}

// RebindablePort picks a free TCP port on 127.0.0.1 below the kernel's
// ephemeral range (net.ipv4.ip_local_port_range), for a process that binds
// its port again after a restart (an etcd member, an aggregator replica). In
// the ephemeral range the kernel may hand the port, between the stop and the
// restart, to any ":0" listener or outgoing connection of a test running in
// parallel; below it, only an explicit bind takes it.
func RebindablePort() (int, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				low = v
			}
		}
	}
	const first = 10000
	if low < first+1000 {
		return FreePort() // no room below the range: the best left is a free port
	}
	for range 200 {
		p := first + rand.IntN(low-first)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		_ = l.Close()
		return p, nil
	}
	return 0, fmt.Errorf("no free port on 127.0.0.1 in [%d, %d)", first, low)
}

// process is a child process with its log file.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // set before done is closed
}

func (c *ControlPlane) spawn(name string, args []string) (*process, error) {
	return spawnProcess(filepath.Join(c.Dir, name+".log"), name, filepath.Join(c.bin, name), args, c.detach)
}

// Spawn starts bin with args, its output appended to logPath, and returns
// its pid. A detached process gets its own session and outlives the caller;
// the others are killed with it. The caller stops it by pid (realnode, whose
// processes another process may have to stop from node.json).
func Spawn(logPath, name, bin string, args []string, detach bool) (pid int, err error) {
	p, err := spawnProcess(logPath, name, bin, args, detach)
	if err != nil {
		return 0, err
	}
	return p.cmd.Process.Pid, nil
}

// spawnProcess starts bin with args (and env on top of this process's
// environment), its output appended to logPath. Detached processes get
// their own session and outlive the caller; the others are killed with it
// (parent death signal) even when it is killed.
func spawnProcess(logPath, name, bin string, args []string, detach bool, env ...string) (*process, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	if detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// stop sends SIGTERM, waits, then SIGKILL.
func (p *process) stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(15 * time.Second):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("stop %s: killed after SIGTERM timeout", p.name)
}

func (p *process) tail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// httpOK is a probe for waitFor: GET url must answer 200.
func httpOK(client *http.Client, url string) func() error {
	return func() error {
		// One probe never outlasts a few seconds: etcd's /health blocks
		// while the member has no quorum, and waitFor must see its
		// deadline and the process's exit.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return GetOK(ctx, client, url)
	}
}

// GetOK fails unless GET url answers 200: the readiness probe of a process
// a harness started.
func GetOK(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// waitFor polls probe until it succeeds, the process exits, or ctx ends.
func waitFor(ctx context.Context, p *process, probe func() error) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if last = probe(); last == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited (%v); log tail:\n%s", p.name, p.err, p.tail())
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (last probe: %v); log tail:\n%s", p.name, ctx.Err(), last, p.tail())
		case <-tick.C:
		}
	}
}
