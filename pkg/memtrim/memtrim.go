// Package memtrim drops a process's read-only executable pages from its page
// tables once start-up is over. At start every package's init runs, and
// with the kernel's fault-around each touched code page maps its cached
// neighbours too, so almost the whole 20 MB binary ends up resident
// although a steady interval uses a fraction of it. The pages are clean,
// file-backed and stay in the page cache: dropping them costs a minor fault
// when code runs again, never I/O and never data (writable mappings are left
// alone). A read-only mapping holding a page the process changed before
// making it read-only (a dynamically linked binary's RELRO: the GOT the
// dynamic linker relocated, then sealed) is left alone too: dropping that
// anonymous copy would fault the file's unrelocated bytes back in.
package memtrim

import (
	"bufio"
	"fmt"
	"io"
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

// Executable advises the kernel that the read-only, purely file-backed
// mappings of the running executable are not needed (MADV_DONTNEED); they
// fault back in on use.
func Executable() (Result, error) { return trim(false) }

// ExecutableUncached trims as Executable does, after marking those
// mappings for random access (MADV_RANDOM: a fault reads only its own
// page), then drops the executable's pages no process maps from the page
// cache (POSIX_FADV_DONTNEED). The kernel's fault-around maps every cached
// page within 64 KiB of a faulting one, so with the whole binary cached each
// page a steady interval touches brings 15 neighbours it does not need.
// Uncached, a page of the read-only data (pclntab, type data, strings) faults
// back in alone, read once from disk. The text gains nothing: the kernel
// reads around a fault in an executable mapping whatever the advice (Linux
// 6.18: touching one page in 64 cached all of it). The executable's file
// must be one no other process maps with profit from its cache (a
// container's own binary).
func ExecutableUncached() (Result, error) { return trim(true) }

func trim(uncache bool) (Result, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return Result{}, fmt.Errorf("find executable: %w", err)
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return Result{}, fmt.Errorf("read mappings: %w", err)
	}
	defer f.Close()
	clean, err := trimmable(f, exe)
	if err != nil {
		return Result{}, fmt.Errorf("read mappings: %w", err)
	}
	var exef *os.File
	if uncache {
		// /proc/self/exe opens the running file even when its path was
		// replaced since.
		if exef, err = os.Open("/proc/self/exe"); err != nil {
			return Result{}, fmt.Errorf("open executable: %w", err)
		}
		defer exef.Close()
		// Dirty pages (a binary just built) are not dropped: write them
		// first (a no-op for an image's file).
		if err := unix.Fdatasync(int(exef.Fd())); err != nil {
			return Result{}, fmt.Errorf("sync executable: %w", err)
		}
		for _, m := range clean {
			if err := madvise(m, unix.MADV_RANDOM); err != nil {
				return Result{}, err
			}
		}
	}
	var res Result
	for _, m := range clean {
		if err := madvise(m, unix.MADV_DONTNEED); err != nil {
			return res, err
		}
		res.Mappings++
		res.Bytes += m.end - m.start
	}
	if !uncache {
		return res, nil
	}
	if err := unix.Fadvise(int(exef.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return res, fmt.Errorf("drop the executable's cached pages: %w", err)
	}
	return res, nil
}

func madvise(m span, advice int) error {
	if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(m.start), uintptr(m.end-m.start), uintptr(advice)); errno != 0 {
		return fmt.Errorf("madvise %x-%x (%d): %w", m.start, m.end, advice, errno)
	}
	return nil
}

// span is one mapping's address range.
type span struct{ start, end uint64 }

// trimmable reads /proc/self/smaps and returns exe's read-only private
// mappings without anonymous pages.
func trimmable(smaps io.Reader, exe string) ([]span, error) {
	var clean []span
	var cur *span
	sc := bufio.NewScanner(smaps)
	for sc.Scan() {
		line := sc.Text()
		if k, v, found := strings.Cut(line, ":"); found && !strings.Contains(k, " ") && !strings.Contains(k, "-") {
			// A field of the current mapping: one with anonymous
			// (changed, private) pages is not trimmed.
			if cur != nil && k == "Anonymous" && strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")) != "0" {
				cur = nil
			}
			continue
		}
		// A mapping's header line.
		if cur != nil {
			clean = append(clean, *cur)
		}
		cur = nil
		if start, end, ok := readOnlyMappingOf(line, exe); ok {
			cur = &span{start, end}
		}
	}
	if cur != nil {
		clean = append(clean, *cur)
	}
	return clean, sc.Err()
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
