package ovs

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Command answers a unixctl command: its text, or an error text.
type Command func(args []string) (string, error)

// Unixctl is a daemon's control socket.
type Unixctl struct {
	// Path is the socket path.
	Path string

	srv *rpcServer
	// pidfile is removed on Close when set.
	pidfile string

	mu       sync.Mutex // guards commands
	commands map[string]Command
}

// StartUnixctl serves the control socket at path with commands (more can be
// added with Handle). Every daemon also answers "version" and
// "list-commands" as lib/unixctl.c registers them.
func StartUnixctl(path string, commands map[string]Command) (*Unixctl, error) {
	u := &Unixctl{Path: path, commands: map[string]Command{}}
	for name, c := range commands {
		u.commands[name] = c
	}
	srv, err := listenRPC(path, u.handle)
	if err != nil {
		return nil, fmt.Errorf("unixctl stand-in: %w", err)
	}
	u.srv = srv
	return u, nil
}

// StartDaemonCtl writes <rundir>/<program>.pid with pid and serves
// <rundir>/<program>.<pid>.ctl, where ovs-appctl -t <program> finds a
// daemon's control socket.
func StartDaemonCtl(rundir, program string, pid int, commands map[string]Command) (*Unixctl, error) {
	pidfile := filepath.Join(rundir, program+".pid")
	if err := os.WriteFile(pidfile, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("unixctl stand-in: write pidfile: %w", err)
	}
	u, err := StartUnixctl(filepath.Join(rundir, fmt.Sprintf("%s.%d.ctl", program, pid)), commands)
	if err != nil {
		_ = os.Remove(pidfile)
		return nil, err
	}
	u.pidfile = pidfile
	return u, nil
}

// Handle adds or replaces a command.
func (u *Unixctl) Handle(name string, c Command) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.commands[name] = c
}

// SetHang makes the daemon accept requests and never answer (a wedged
// daemon).
func (u *Unixctl) SetHang(h bool) { u.srv.hang.Store(h) }

// Close stops the daemon: the socket (and pidfile) disappear as when the
// daemon exits cleanly.
func (u *Unixctl) Close() {
	u.srv.close()
	if u.pidfile != "" {
		_ = os.Remove(u.pidfile)
	}
}

func (u *Unixctl) handle(method string, raw json.RawMessage) (any, any) {
	ps, err := params(raw)
	if err != nil {
		return nil, err.Error() + "\n"
	}
	args := make([]string, len(ps))
	for i, p := range ps {
		// lib/unixctl.c: "command has non-string argument".
		if err := json.Unmarshal(p, &args[i]); err != nil {
			return nil, fmt.Sprintf("command has non-string argument: %s\n", p)
		}
	}
	u.mu.Lock()
	c, ok := u.commands[method]
	names := make([]string, 0, len(u.commands))
	for n := range u.commands {
		names = append(names, n)
	}
	u.mu.Unlock()
	switch {
	case ok:
	case method == "list-commands":
		sort.Strings(names)
		return "The available commands are:\n  " + strings.Join(append(names, "list-commands"), "\n  ") + "\n", nil
	default:
		return nil, fmt.Sprintf("%q is not a valid command (use \"list-commands\" to see a list of valid commands)\n", method)
	}
	out, err := c(args)
	if err != nil {
		return nil, withNewline(err.Error())
	}
	return withNewline(out), nil
}

// withNewline adds the trailing newline unixctl_command_reply__ adds to a
// non-empty body that lacks one.
func withNewline(s string) string {
	if s != "" && !strings.HasSuffix(s, "\n") {
		return s + "\n"
	}
	return s
}
