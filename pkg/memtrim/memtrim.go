// Package memtrim drops a process's read-only executable pages from its page
// tables once start-up is over. At start every package's init runs, and
// with the kernel's fault-around each touched code page maps its cached
// neighbours too, so almost the whole 20 MB binary ends up resident
// although a steady interval uses a fraction of it. The pages are clean,
// file-backed and stay in the page cache: dropping them costs a minor fault
// when code runs again, never I/O and never data (writable mappings are left
// alone).
package memtrim

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Result says what was trimmed.
type Result struct {
	Mappings int
	Bytes    uint64
}

// Executable advises the kernel that the read-only mappings of the running
// executable are not needed (MADV_DONTNEED); they fault back in on use.
func Executable() (Result, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return Result{}, fmt.Errorf("find executable: %w", err)
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return Result{}, fmt.Errorf("read mappings: %w", err)
	}
	defer f.Close()
	var res Result
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		start, end, ok := readOnlyMappingOf(sc.Text(), exe)
		if !ok {
			continue
		}
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), unix.MADV_DONTNEED); errno != 0 {
			return res, fmt.Errorf("madvise %x-%x: %w", start, end, errno)
		}
		res.Mappings++
		res.Bytes += end - start
	}
	if err := sc.Err(); err != nil {
		return res, fmt.Errorf("read mappings: %w", err)
	}
	return res, nil
}

// readOnlyMappingOf parses one /proc/self/maps line and reports a
// non-writable mapping of path.
func readOnlyMappingOf(line, path string) (start, end uint64, ok bool) {
	fields := strings.Fields(line)
	if len(fields) < 6 || fields[5] != path {
		return 0, 0, false
	}
	perms := fields[1]
	if len(perms) < 4 || perms[1] == 'w' || perms[3] != 'p' {
		return 0, 0, false
	}
	lo, hi, found := strings.Cut(fields[0], "-")
	if !found {
		return 0, 0, false
	}
	s, err1 := strconv.ParseUint(lo, 16, 64)
	e, err2 := strconv.ParseUint(hi, 16, 64)
	if err1 != nil || err2 != nil || e <= s {
		return 0, 0, false
	}
	return s, e, true
}
