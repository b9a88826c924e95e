package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Upgrade replaces one process of the lab in dir, as a rolling upgrade
// replaces a pod: target names a node (its agent) or an aggregator
// replica. The process is stopped with SIGTERM (as the kubelet stops a
// container; up to 10 s) and started again with the same arguments from
// the binary of the same name in binDir (an older release's, for a
// rollback, or the newer one's). It returns what it did.
func Upgrade(ctx context.Context, dir, target, binDir string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	s, err := LoadState(dir)
	if err != nil {
		return "", err
	}
	args, env, pid, name, save := []string(nil), []string(nil), 0, "", func(int, []string) {}
	for i := range s.Aggregators {
		if a := &s.Aggregators[i]; a.Name == target {
			args, env, pid, name = a.Args, a.Env, a.Pid, a.Name
			save = func(p int, argv []string) { a.Pid, a.Args = p, argv }
		}
	}
	if args == nil {
		n, err := s.Node(target)
		if err != nil {
			return "", fmt.Errorf("upgrade: %q is neither an aggregator nor a node of the lab: %w", target, err)
		}
		args, env, pid, name = n.AgentArgs, n.AgentEnv, n.AgentPid, "agent-"+n.Name
		save = func(p int, argv []string) { n.AgentPid, n.AgentArgs = p, argv }
	}
	if len(args) == 0 {
		return "", fmt.Errorf("upgrade %s: no command line in the lab state", target)
	}
	bin := filepath.Join(binDir, filepath.Base(args[0]))
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("upgrade %s: no executable %s", target, bin)
	}
	if alive(pid) {
		if err := stopPid(pid, 10*time.Second); err != nil {
			return "", fmt.Errorf("upgrade %s: stop pid %d: %w", target, pid, err)
		}
	}
	argv := append([]string{bin}, args[1:]...)
	p, err := startProcEnv(s.Dir, name, argv, env, s.Detached)
	if err != nil {
		return "", err
	}
	save(p.Pid, argv)
	if err := s.save(); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s restarted from %s (pid %d, was %d)", target, bin, p.Pid, pid), nil
}
