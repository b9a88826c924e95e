// Package ovnreal runs real OVN and Open vSwitch from Debian's packages
// (ovn-central, ovn-host, openvswitch-switch) for tests: a 3-member
// clustered OVN_Northbound + OVN_Southbound on loopback (ovsdb-tool
// create-cluster / join-cluster), ovn-northd, and on the first member's
// node an Open_vSwitch ovsdb-server, a userspace ovs-vswitchd
// (--disable-system, netdev datapath) and ovn-controller.
//
// Each member has its own directory tree laid out as kube-ovn lays out a
// node: <member>/var/run/ovn/{ovnnb_db,ovnsb_db}.{ctl,sock,pid} (the
// agent's --ovn-nb-ctl/--ovn-sb-ctl), <member>/var/lib/ovn/ovn{nb,sb}_db.db
// (--ovn-db-dir, kube-ovn's OVN_DIR in Cozystack), and on the OVS node
// <member>/run/openvswitch/{db.sock,ovs-vswitchd.pid,ovs-vswitchd.<pid>.ctl}
// (--ovs-db-socket) and <member>/var/run/ovn/ovn-controller.pid
// (--ovn-controller-pidfile).
//
// Every process is started by this package as a child (Debian's policy may
// refuse to start the packaged services, and the tests must not touch the
// host's) and stopped by its pid. Raft addresses are 127.X.Y.{1,2,3} with X
// and Y drawn per cluster, ports 6643 (NB) and 6644 (SB) as in kube-ovn, so
// clusters of concurrent tests do not meet.
package ovnreal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// InstallCommand installs what the fixture needs on Debian.
const InstallCommand = "apt-get update && apt-get install -y ovn-central ovn-host openvswitch-switch"

// Binaries the fixture runs.
var binaries = []string{"ovsdb-server", "ovsdb-tool", "ovs-appctl", "ovs-vsctl", "ovs-vswitchd", "ovn-northd", "ovn-controller"}

// Schemas.
const (
	NBSchema  = "/usr/share/ovn/ovn-nb.ovsschema"
	SBSchema  = "/usr/share/ovn/ovn-sb.ovsschema"
	OVSSchema = "/usr/share/openvswitch/vswitch.ovsschema"
)

// Databases.
const (
	Northbound = "OVN_Northbound"
	Southbound = "OVN_Southbound"
)

// Require fails t (it never skips) when the Debian packages are absent,
// naming the one command that installs them.
func Require(t testing.TB) {
	t.Helper()
	if err := Available(); err != nil {
		t.Fatal(err)
	}
}

// Available says whether the Debian packages are installed; its error
// names what is missing and the one command that installs it.
func Available() error {
	var missing []string
	for _, b := range binaries {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	for _, f := range []string{NBSchema, SBSchema, OVSSchema} {
		if _, err := os.Stat(f); err != nil {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("real OVN is not installed (missing %s); install it with: %s", strings.Join(missing, ", "), InstallCommand)
	}
	return nil
}

// Version is `ovn-northd --version`'s first line and ovsdb-server's.
func Version() string {
	var parts []string
	for _, b := range []string{"ovn-northd", "ovsdb-server"} {
		out, err := exec.Command(b, "--version").Output()
		if err == nil {
			parts = append(parts, strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0]))
		}
	}
	return strings.Join(parts, ", ")
}

// Proc is one process the fixture started.
type Proc struct {
	Name string
	args []string
	env  []string
	log  string
	// netns starts the process in a network namespace of its own (as
	// root): ovs-vswitchd's netdev datapath creates the tap devices
	// ovs-netdev and br-int, which are global to a network namespace, so
	// two fixtures (or one a killed fixture left behind) would collide on
	// the host's; a private namespace goes, with its taps, when the
	// process does.
	netns bool

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	exited string
}

func (p *Proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("%s already runs (pid %d)", p.Name, p.cmd.Process.Pid)
		}
	}
	out, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.args[0], p.args[1:]...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if p.netns && os.Geteuid() == 0 {
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWNET
	}
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(out, "ovnreal: %s (pid %d) exited: %v\n", p.Name, cmd.Process.Pid, err)
		p.mu.Lock()
		p.exited = fmt.Sprint(err)
		p.mu.Unlock()
		out.Close()
		close(done)
	}()
	p.cmd, p.done, p.exited = cmd, done, ""
	return nil
}

// Pid is the running process's pid, 0 when none runs.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	select {
	case <-p.done:
		return 0
	default:
		return p.cmd.Process.Pid
	}
}

// Signal sends sig to the process by its pid.
func (p *Proc) Signal(sig syscall.Signal) error {
	pid := p.Pid()
	if pid == 0 {
		return fmt.Errorf("%s does not run", p.Name)
	}
	return syscall.Kill(pid, sig)
}

// Stop sends sig (SIGTERM or SIGKILL) and waits for the process to exit.
func (p *Proc) Stop(sig syscall.Signal) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	_ = syscall.Kill(cmd.Process.Pid, syscall.SIGCONT) // a frozen one cannot exit
	if err := syscall.Kill(cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("signal %s: %w", p.Name, err)
	}
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return fmt.Errorf("%s did not exit within 10s of %v; killed", p.Name, sig)
	}
}

// Start starts the process again with the same command line.
func (p *Proc) Start() error { return p.start() }

// Exited is the exit status of the last run that ended, "" while it runs
// or before any.
func (p *Proc) Exited() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// Member is one ovn-central member: its NB and SB ovsdb-servers.
type Member struct {
	// Root is the member's own directory tree.
	Root string
	// IP is its loopback address.
	IP string
	// RunDir is <Root>/var/run/ovn, DBDir <Root>/var/lib/ovn, LogDir
	// <Root>/var/log/ovn, OVSRun <Root>/run/openvswitch (unless
	// Options.Layout placed them).
	RunDir, DBDir, LogDir, OVSRun string
	// NB and SB are its ovsdb-servers.
	NB, SB *Proc
}

// Ctl is the database's control socket (ovnnb_db.ctl / ovnsb_db.ctl).
func (m *Member) Ctl(db string) string { return filepath.Join(m.RunDir, short(db)+".ctl") }

// Sock is the database's client socket.
func (m *Member) Sock(db string) string { return filepath.Join(m.RunDir, short(db)+".sock") }

// DBFile is the database file.
func (m *Member) DBFile(db string) string { return filepath.Join(m.DBDir, short(db)+".db") }

// Server is the database's ovsdb-server.
func (m *Member) Server(db string) *Proc {
	if db == Northbound {
		return m.NB
	}
	return m.SB
}

// Address is the member's raft address of db.
func (m *Member) Address(db string) string { return "tcp:" + m.IP + ":" + port(db) }

func short(db string) string {
	if db == Northbound {
		return "ovnnb_db"
	}
	return "ovnsb_db"
}

func port(db string) string {
	if db == Northbound {
		return "6643"
	}
	return "6644"
}

func schema(db string) string {
	if db == Northbound {
		return NBSchema
	}
	return SBSchema
}

// OVSNode is the node running Open vSwitch and ovn-controller.
type OVSNode struct {
	// OVSRunDir is <Root>/run/openvswitch: db.sock, ovs-vswitchd.pid and
	// its control socket.
	OVSRunDir string
	// DBSocket is the Open_vSwitch ovsdb-server's socket.
	DBSocket string
	// ControllerPidfile is ovn-controller's pidfile.
	ControllerPidfile string
	// OVSDB, Vswitchd and Controller are the daemons.
	OVSDB, Vswitchd, Controller *Proc
}

// Cluster is the running fixture.
type Cluster struct {
	Dir     string
	Members []*Member
	Northd  *Proc
	// Node is the OVS node (the first member's tree); nil without
	// Options.OVS.
	Node *OVSNode

	procs []*Proc
	logf  func(string, ...any)
}

// Options configure Start.
type Options struct {
	// Members is the raft cluster size (default 3).
	Members int
	// ElectionTimer in ms (default 1000, OVS's own default).
	ElectionTimer int
	// OVS also runs the OVS node with ovn-controller; it implies Northd:
	// Debian's ovn-controller 23.03.1 dies of SIGSEGV when started again
	// against a southbound database no ovn-northd ever wrote (no SB_Global
	// row), which no real deployment has.
	OVS bool
	// Northd runs ovn-northd.
	Northd bool
	// Layout places the members' files (one per member, overriding
	// Members); empty: <dir>/m<i>/var/run/ovn, var/lib/ovn, var/log/ovn.
	Layout []Layout
}

// Layout is where one member's files are: RunDir its sockets and pidfiles
// (kube-ovn's /var/run/ovn), DBDir its database files (OVN_DIR), LogDir
// its logs.
type Layout struct {
	RunDir, DBDir, LogDir string
	// OVSRun is where the OVS node (on the first member, Options.OVS)
	// keeps db.sock, its pidfiles and ovs-vswitchd's control socket
	// (kube-ovn's /run/openvswitch); empty: <Root>/run/openvswitch.
	OVSRun string
}

// Launch starts the fixture under dir (which holds the members' trees when
// o.Layout is empty); Close stops it. Outside tests, e.g. the local lab.
func Launch(ctx context.Context, dir string, o Options) (*Cluster, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if o.OVS {
		o.Northd = true
	}
	if o.Members == 0 {
		o.Members = 3
	}
	if len(o.Layout) > 0 {
		o.Members = len(o.Layout)
	}
	if o.ElectionTimer == 0 {
		o.ElectionTimer = 1000
	}
	c := &Cluster{Dir: dir}
	if err := c.start(ctx, o); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Start starts the fixture under t.TempDir and stops it at the test's end.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := shortTempDir(t)
	c, err := Launch(ctx, dir, o)
	if err != nil {
		t.Fatalf("start real OVN: %v", err)
	}
	c.logf = t.Logf
	t.Cleanup(func() {
		c.Close()
		if t.Failed() {
			c.dumpLogs(t)
		}
	})
	return c
}

// shortTempDir is a temporary directory with a short path: unix socket
// paths are limited to 107 bytes.
func shortTempDir(t testing.TB) string {
	d, err := os.MkdirTemp("", "ovnreal")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

func (c *Cluster) start(ctx context.Context, o Options) error {
	a, b := 1+rand.IntN(254), 1+rand.IntN(254)
	for i := 0; i < o.Members; i++ {
		root := filepath.Join(c.Dir, fmt.Sprintf("m%d", i+1))
		l := Layout{RunDir: filepath.Join(root, "var/run/ovn"), DBDir: filepath.Join(root, "var/lib/ovn"), LogDir: filepath.Join(root, "var/log/ovn")}
		if len(o.Layout) > 0 {
			l = o.Layout[i]
		}
		if l.OVSRun == "" {
			l.OVSRun = filepath.Join(root, "run/openvswitch")
		}
		m := &Member{Root: root, IP: fmt.Sprintf("127.%d.%d.%d", a, b, i+1), RunDir: l.RunDir, DBDir: l.DBDir, LogDir: l.LogDir, OVSRun: l.OVSRun}
		for _, d := range []string{m.RunDir, m.DBDir, m.LogDir} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		c.Members = append(c.Members, m)
	}
	for _, db := range []string{Northbound, Southbound} {
		for i, m := range c.Members {
			var err error
			if i == 0 {
				err = run(ctx, "ovsdb-tool", fmt.Sprintf("--election-timer=%d", o.ElectionTimer), "create-cluster", m.DBFile(db), schema(db), m.Address(db))
			} else {
				err = run(ctx, "ovsdb-tool", "join-cluster", m.DBFile(db), db, m.Address(db), c.Members[0].Address(db))
			}
			if err != nil {
				return err
			}
			p := c.proc(m, db+"-"+filepath.Base(m.Root), filepath.Join(m.LogDir, short(db)+".out"), m.serverArgs(db))
			if db == Northbound {
				m.NB = p
			} else {
				m.SB = p
			}
			if err := p.start(); err != nil {
				return err
			}
		}
	}
	for _, db := range []string{Northbound, Southbound} {
		if _, err := c.WaitLeader(ctx, db); err != nil {
			return err
		}
	}
	if o.Northd {
		m := c.Members[0]
		c.Northd = c.proc(m, "ovn-northd", filepath.Join(m.LogDir, "ovn-northd.out"), []string{"ovn-northd",
			"--ovnnb-db=" + c.Remotes(Northbound), "--ovnsb-db=" + c.Remotes(Southbound),
			"--pidfile=" + filepath.Join(m.RunDir, "ovn-northd.pid"), "--no-chdir",
			"--log-file=" + filepath.Join(m.LogDir, "ovn-northd.log")})
		if err := c.Northd.start(); err != nil {
			return err
		}
	}
	if o.OVS {
		if err := c.startOVS(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (m *Member) serverArgs(db string) []string {
	return []string{"ovsdb-server", m.DBFile(db),
		"--remote=punix:" + m.Sock(db), "--unixctl=" + m.Ctl(db),
		"--pidfile=" + filepath.Join(m.RunDir, short(db)+".pid"), "--no-chdir",
		"--log-file=" + filepath.Join(m.LogDir, short(db)+".log")}
}

// env points every OVS/OVN default path into the member's tree.
func env(m *Member) []string {
	root := m.Root
	return []string{
		"OVS_RUNDIR=" + m.OVSRun, "OVS_LOGDIR=" + filepath.Join(root, "var/log/openvswitch"),
		"OVS_DBDIR=" + filepath.Join(root, "etc/openvswitch"), "OVS_SYSCONFDIR=" + filepath.Join(root, "etc"),
		"OVN_RUNDIR=" + m.RunDir, "OVN_LOGDIR=" + m.LogDir,
		"OVN_DBDIR=" + m.DBDir, "OVN_SYSCONFDIR=" + filepath.Join(root, "etc"),
	}
}

func (c *Cluster) proc(m *Member, name, log string, args []string) *Proc {
	p := &Proc{Name: name, args: args, env: env(m), log: log}
	c.procs = append(c.procs, p)
	return p
}

// Remotes is the comma-separated unix remotes of db's members.
func (c *Cluster) Remotes(db string) string {
	r := make([]string, len(c.Members))
	for i, m := range c.Members {
		r[i] = "unix:" + m.Sock(db)
	}
	return strings.Join(r, ",")
}

func (c *Cluster) startOVS(ctx context.Context) error {
	m := c.Members[0]
	n := &OVSNode{OVSRunDir: m.OVSRun}
	n.DBSocket = filepath.Join(n.OVSRunDir, "db.sock")
	n.ControllerPidfile = filepath.Join(m.RunDir, "ovn-controller.pid")
	etc := filepath.Join(m.Root, "etc/openvswitch")
	for _, d := range []string{n.OVSRunDir, etc, filepath.Join(m.Root, "var/log/openvswitch")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	conf := filepath.Join(etc, "conf.db")
	if err := run(ctx, "ovsdb-tool", "create", conf, OVSSchema); err != nil {
		return err
	}
	logs := filepath.Join(m.Root, "var/log/openvswitch")
	n.OVSDB = c.proc(m, "ovsdb-server(Open_vSwitch)", filepath.Join(logs, "ovsdb-server.out"), []string{"ovsdb-server", conf,
		"--remote=punix:" + n.DBSocket, "--pidfile=" + filepath.Join(n.OVSRunDir, "ovsdb-server.pid"), "--no-chdir",
		"--log-file=" + filepath.Join(logs, "ovsdb-server.log")})
	if err := n.OVSDB.start(); err != nil {
		return err
	}
	if err := waitFile(ctx, n.DBSocket); err != nil {
		return err
	}
	vsctl := func(args ...string) error {
		return run(ctx, "ovs-vsctl", append([]string{"--db=unix:" + n.DBSocket, "--no-wait", "--timeout=10"}, args...)...)
	}
	// ovs_version as ovs-ctl (and kube-ovn's start-ovs.sh through it)
	// sets it.
	ver, err := exec.CommandContext(ctx, "ovs-vswitchd", "--version").Output()
	if err != nil {
		return fmt.Errorf("ovs-vswitchd --version: %w", err)
	}
	f := strings.Fields(strings.SplitN(string(ver), "\n", 2)[0])
	if err := vsctl("init", "--", "set", "Open_vSwitch", ".", "ovs_version="+f[len(f)-1],
		"external_ids:system-id=ovnreal-"+filepath.Base(c.Dir),
		"external_ids:ovn-remote="+c.Remotes(Southbound),
		"external_ids:ovn-encap-type=geneve", "external_ids:ovn-encap-ip="+m.IP,
		"external_ids:ovn-bridge-datapath-type=netdev", "external_ids:hostname=ovnreal-node-1"); err != nil {
		return err
	}
	if err := vsctl("--may-exist", "add-br", "br-int", "--", "set", "Bridge", "br-int", "datapath_type=netdev", "fail_mode=secure"); err != nil {
		return err
	}
	n.Vswitchd = c.proc(m, "ovs-vswitchd", filepath.Join(logs, "ovs-vswitchd.out"), []string{"ovs-vswitchd", "unix:" + n.DBSocket,
		"--disable-system", "--pidfile=" + filepath.Join(n.OVSRunDir, "ovs-vswitchd.pid"), "--no-chdir",
		"--log-file=" + filepath.Join(logs, "ovs-vswitchd.log")})
	n.Vswitchd.netns = true
	if err := n.Vswitchd.start(); err != nil {
		return err
	}
	n.Controller = c.proc(m, "ovn-controller", filepath.Join(m.LogDir, "ovn-controller.out"), []string{"ovn-controller", "unix:" + n.DBSocket,
		"--pidfile=" + n.ControllerPidfile, "--no-chdir",
		"--log-file=" + filepath.Join(m.LogDir, "ovn-controller.log")})
	if err := n.Controller.start(); err != nil {
		return err
	}
	c.Node = n
	// Ready: vswitchd answers and ovn-controller is connected.
	return poll(ctx, func() error {
		if n.Vswitchd.Pid() == 0 || n.Controller.Pid() == 0 {
			return fmt.Errorf("ovs-vswitchd or ovn-controller exited (see their logs under %s)", m.Root)
		}
		if _, err := Appctl(ctx, n.VswitchdCtl(), "version"); err != nil {
			return err
		}
		out, err := Appctl(ctx, n.ControllerCtl(), "connection-status")
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) != "connected" {
			return fmt.Errorf("ovn-controller %s", strings.TrimSpace(out))
		}
		return nil
	})
}

// ControllerCtl is ovn-controller's control socket (beside its pidfile).
func (n *OVSNode) ControllerCtl() string {
	return filepath.Join(filepath.Dir(n.ControllerPidfile), fmt.Sprintf("ovn-controller.%d.ctl", n.Controller.Pid()))
}

// VswitchdCtl is ovs-vswitchd's control socket.
func (n *OVSNode) VswitchdCtl() string {
	return filepath.Join(n.OVSRunDir, fmt.Sprintf("ovs-vswitchd.%d.ctl", n.Vswitchd.Pid()))
}

// Vsctl runs ovs-vsctl against the node's database without waiting for
// ovs-vswitchd.
func (c *Cluster) Vsctl(ctx context.Context, args ...string) error {
	return run(ctx, "ovs-vsctl", append([]string{"--db=unix:" + c.Node.DBSocket, "--no-wait", "--timeout=10"}, args...)...)
}

// Appctl runs `ovs-appctl -t ctl args...` (the upstream client) and returns
// its output; a server error is an error carrying its text.
func Appctl(ctx context.Context, ctl string, args ...string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, "ovs-appctl", append([]string{"-T", "5", "-t", ctl}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("ovs-appctl -t %s %s: %w: %s", ctl, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// ClusterStatus is `cluster/status db` of member i.
func (c *Cluster) ClusterStatus(ctx context.Context, i int, db string) (string, error) {
	return Appctl(ctx, c.Members[i].Ctl(db), "cluster/status", db)
}

// field reads "Key: value" from a cluster/status text.
func field(text, key string) string {
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, key+": "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// Leader is the index of db's leader as the running members say, -1 when
// none says it leads.
func (c *Cluster) Leader(ctx context.Context, db string) int {
	for i, m := range c.Members {
		if m.Server(db).Pid() == 0 {
			continue
		}
		text, err := c.ClusterStatus(ctx, i, db)
		if err == nil && field(text, "Role") == "leader" {
			return i
		}
	}
	return -1
}

// WaitLeader waits until every running member of db is a cluster member
// that knows a leader, and returns the leader's index.
func (c *Cluster) WaitLeader(ctx context.Context, db string) (int, error) {
	leader := -1
	err := poll(ctx, func() error {
		leader = -1
		for i, m := range c.Members {
			if m.Server(db).Pid() == 0 {
				continue
			}
			text, err := c.ClusterStatus(ctx, i, db)
			if err != nil {
				return err
			}
			if s := field(text, "Status"); s != "cluster member" {
				return fmt.Errorf("member %d of %s: status %q", i, db, s)
			}
			switch l := field(text, "Leader"); {
			case l == "self":
				leader = i
			case l == "unknown" || l == "":
				return fmt.Errorf("member %d of %s: no leader", i, db)
			}
		}
		if leader < 0 {
			return fmt.Errorf("%s: no member leads", db)
		}
		return nil
	})
	if err != nil {
		return -1, fmt.Errorf("wait for a %s leader: %w", db, err)
	}
	return leader, nil
}

// SetElectionTimer changes db's election timer to ms through its leader
// (`cluster/change-election-timer`), doubling at most per step as OVS
// requires when raising it.
func (c *Cluster) SetElectionTimer(ctx context.Context, db string, ms int) error {
	l, err := c.WaitLeader(ctx, db)
	if err != nil {
		return err
	}
	text, err := c.ClusterStatus(ctx, l, db)
	if err != nil {
		return err
	}
	cur, err := strconv.Atoi(field(text, "Election timer"))
	if err != nil {
		return fmt.Errorf("read the election timer of %s: %w", db, err)
	}
	for cur != ms {
		next := ms
		if next > 2*cur {
			next = 2 * cur
		}
		if _, err := Appctl(ctx, c.Members[l].Ctl(db), "cluster/change-election-timer", db, strconv.Itoa(next)); err != nil {
			return err
		}
		if err := poll(ctx, func() error {
			text, err := c.ClusterStatus(ctx, l, db)
			if err != nil {
				return err
			}
			if got := field(text, "Election timer"); got != strconv.Itoa(next) {
				return fmt.Errorf("election timer of %s is %s, not yet %d", db, got, next)
			}
			return nil
		}); err != nil {
			return err
		}
		cur = next
	}
	return nil
}

// Leave makes member i leave db's cluster (`cluster/leave`) and waits until
// it has left: its server runs on without the database.
func (c *Cluster) Leave(ctx context.Context, i int, db string) error {
	if _, err := Appctl(ctx, c.Members[i].Ctl(db), "cluster/leave", db); err != nil {
		return err
	}
	return poll(ctx, func() error {
		_, err := c.ClusterStatus(ctx, i, db)
		if err != nil && strings.Contains(err.Error(), "unknown cluster") {
			return nil
		}
		return fmt.Errorf("member %d has not left %s yet: %v", i, db, err)
	})
}

// Rejoin puts a member that left db's cluster back: it stops its server,
// joins a fresh database file to the cluster at the same address and
// starts the server again.
func (c *Cluster) Rejoin(ctx context.Context, i int, db string) error {
	m := c.Members[i]
	if err := m.Server(db).Stop(syscall.SIGTERM); err != nil {
		return err
	}
	if err := os.Remove(m.DBFile(db)); err != nil {
		return err
	}
	var remotes []string
	for j, o := range c.Members {
		if j != i {
			remotes = append(remotes, o.Address(db))
		}
	}
	if err := run(ctx, "ovsdb-tool", append([]string{"join-cluster", m.DBFile(db), db, m.Address(db)}, remotes...)...); err != nil {
		return err
	}
	if err := m.Server(db).Start(); err != nil {
		return err
	}
	_, err := c.WaitLeader(ctx, db)
	return err
}

// Close stops every process by its pid (SIGTERM, then SIGKILL).
func (c *Cluster) Close() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		if err := c.procs[i].Stop(syscall.SIGTERM); err != nil && c.logf != nil {
			c.logf("ovnreal: %v", err)
		}
	}
}

func (c *Cluster) dumpLogs(t testing.TB) {
	_ = filepath.Walk(c.Dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || !strings.HasSuffix(p, ".log") && !strings.HasSuffix(p, ".out") {
			return nil
		}
		b, _ := os.ReadFile(p)
		if len(b) > 3000 {
			b = b[len(b)-3000:]
		}
		t.Logf("--- %s (tail)\n%s", p, b)
		return nil
	})
}

func run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func waitFile(ctx context.Context, path string) error {
	return poll(ctx, func() error { _, err := os.Stat(path); return err })
}

// poll runs f every 50 ms until it succeeds or ctx ends.
func poll(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Poll is poll for the tests: f until it returns nil or ctx ends.
func Poll(ctx context.Context, f func() error) error { return poll(ctx, f) }

// StartStandalone runs one non-clustered (standalone) database db in its
// own member tree, as an OVN deployment without raft does, and stops it at
// the test's end.
func StartStandalone(t testing.TB, db string) *Member {
	t.Helper()
	Require(t)
	root := shortTempDir(t)
	m := &Member{Root: root, IP: "127.0.0.1", RunDir: filepath.Join(root, "var/run/ovn"), DBDir: filepath.Join(root, "var/lib/ovn"), LogDir: filepath.Join(root, "var/log/ovn")}
	for _, d := range []string{m.RunDir, m.DBDir, m.LogDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, "ovsdb-tool", "create", m.DBFile(db), schema(db)); err != nil {
		t.Fatal(err)
	}
	p := &Proc{Name: db + "-standalone", args: m.serverArgs(db), env: env(m), log: filepath.Join(m.LogDir, short(db)+".out")}
	if db == Northbound {
		m.NB = p
	} else {
		m.SB = p
	}
	t.Cleanup(func() { _ = p.Stop(syscall.SIGTERM) })
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, func() error { _, err := Appctl(ctx, m.Ctl(db), "version"); return err }); err != nil {
		t.Fatal(err)
	}
	return m
}
