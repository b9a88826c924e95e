package harness

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// ProcState is the state letter of pid in /proc/<pid>/stat (R, S, D, T for
// stopped, Z for a zombie...), 0 when it cannot be read.
func ProcState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The state follows the parenthesised command name.
	if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) {
		return b[i+2]
	}
	return 0
}

// WaitStopped waits until pid is stopped (SIGSTOP is delivered
// asynchronously: a process signalled a moment ago may still answer).
func WaitStopped(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		st := ProcState(pid)
		if st == 'T' || st == 't' {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d not stopped after %s (state %q)", pid, timeout, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
