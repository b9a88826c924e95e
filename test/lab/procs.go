package lab

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// Proc is a process the lab started: enough to stop it by pid, and to start
// it again with the same command line after a fault.
type Proc struct {
	Name string   `json:"name"`
	Pid  int      `json:"pid"`
	Args []string `json:"args"`
	Log  string   `json:"log"`
}

// startProc starts args[0] with args[1:], output to dir/<name>.log. Detached
// processes get their own session and outlive the caller (the lab's `up`);
// attached ones die with the caller (tests). extra are passed as
// descriptors 3, 4, ...
func startProc(dir, name string, args []string, detach bool, extra ...*os.File) (*Proc, error) {
	return startProcEnv(dir, name, args, nil, detach, extra...)
}

// startProcEnv is startProc with env added to this process's environment
// (a pod's container environment).
func startProcEnv(dir, name string, args, env []string, detach bool, extra ...*os.File) (*Proc, error) {
	logPath := filepath.Join(dir, "logs", name+".log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err != nil {
		return nil, fmt.Errorf("create log dir: %w", err)
	}
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	defer f.Close()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.ExtraFiles = extra
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	if detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	// Reap it when it exits so a stopped process does not linger as a zombie
	// while this process lives.
	go func() { _ = cmd.Wait() }()
	return &Proc{Name: name, Pid: cmd.Process.Pid, Args: args, Log: logPath}, nil
}

// alive reports whether pid runs (and is not a zombie).
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ')' && i+2 < len(b) {
			return b[i+2] != 'Z'
		}
	}
	return true
}

// stopPid sends SIGTERM, waits up to grace, then SIGKILL. A pid that is not
// running is not an error.
func stopPid(pid int, grace time.Duration) error {
	if !alive(pid) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %d: %w", pid, err)
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !alive(pid) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for i := 0; i < 100 && alive(pid); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// killPid kills pid at once (a crash, not a shutdown).
func killPid(pid int) {
	if alive(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		for i := 0; i < 100 && alive(pid); i++ {
			time.Sleep(20 * time.Millisecond)
		}
	}
}
