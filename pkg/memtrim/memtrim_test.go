package memtrim

import (
	"os"
	"strings"
	"testing"
	"unsafe"

	"github.com/prometheus/procfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestReadOnlyMappingOf(t *testing.T) {
	for line, want := range map[string]bool{
		"00400000-00d43000 r-xp 00000000 fe:00 10033699 /bin/agent": true,
		"00d43000-01808000 r--p 00943000 fe:00 10033699 /bin/agent": true,
		"01808000-0194b000 rw-p 01408000 fe:00 10033699 /bin/agent": false, // data: never
		"00400000-00d43000 r-xp 00000000 fe:00 10033699 /bin/other": false,
		"00400000-00d43000 r-xs 00000000 fe:00 10033699 /bin/agent": false,
		"7fbf01a38000-7fbf01aea000 rw-p 00000000 00:00 0":           false,
		"zz-00d43000 r-xp 00000000 fe:00 10033699 /bin/agent":       false,
	} {
		_, _, ok := readOnlyMappingOf(line, "/bin/agent")
		assert.Equal(t, want, ok, line)
	}
}

// A dynamically linked binary's RELRO (a read-only mapping whose pages the
// dynamic linker relocated, then sealed) holds anonymous pages: dropping
// them would fault the file's unrelocated bytes back in (a test binary built
// with cgo crashed jumping to a zeroed GOT entry). Only mappings without
// anonymous pages are trimmed.
func TestTrimmableSkipsRelocatedPages(t *testing.T) {
	smaps := `00400000-00d43000 r-xp 00000000 fe:00 10033699 /bin/agent
Size:               9484 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me dw
05afc000-05afd000 r--p 056fb000 fe:00 10033699 /bin/agent
Size:                  4 kB
Anonymous:             4 kB
VmFlags: rd mr mw me dw ac
05afd000-05b00000 r--p 056fc000 fe:00 10033699 /bin/agent
Size:                 12 kB
Anonymous:             0 kB
05b00000-05b10000 rw-p 056ff000 fe:00 10033699 /bin/agent
Anonymous:            64 kB
7fbf01a38000-7fbf01aea000 r--p 00000000 fe:00 42 /lib/x86_64-linux-gnu/libc.so.6
Anonymous:             0 kB
`
	got, err := trimmable(strings.NewReader(smaps), "/bin/agent")
	require.NoError(t, err)
	assert.Equal(t, []span{{0x00400000, 0x00d43000}, {0x05afd000, 0x05b00000}}, got)
}

// TestExecutableKeepsRunning trims the test binary itself: its read-only
// pages leave the resident set and code keeps running (they fault back in).
func TestExecutableKeepsRunning(t *testing.T) {
	p, err := procfs.Self()
	require.NoError(t, err)
	before, err := p.NewStatus()
	require.NoError(t, err)
	res, err := Executable()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, res.Mappings, 2, "text and rodata")
	after, err := p.NewStatus()
	require.NoError(t, err)
	assert.Less(t, after.RssFile, before.RssFile)
	// Still works: code, strings and data are intact.
	assert.Equal(t, "A-B", strings.Join([]string{"A", "B"}, "-"))
	_, err = os.Stat("/proc/self/maps")
	require.NoError(t, err)
}

// TestExecutableUncachedReadsPagesAlone trims the test binary and drops its
// unmapped pages from the page cache: the trimmed mappings are marked for
// random access (smaps VmFlags "rr": no readahead), fewer of the file's
// pages stay cached, and code keeps running.
func TestExecutableUncachedReadsPagesAlone(t *testing.T) {
	exe, err := os.Readlink("/proc/self/exe")
	require.NoError(t, err)
	data, err := os.ReadFile(exe) // every page cached
	require.NoError(t, err)
	cachedBefore := cachedPages(t, exe)
	require.Equal(t, (len(data)+os.Getpagesize()-1)/os.Getpagesize(), cachedBefore)

	res, err := ExecutableUncached()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, res.Mappings, 2, "text and rodata")
	assert.Less(t, cachedPages(t, exe), cachedBefore, "pages no process maps leave the page cache")
	smaps, err := os.ReadFile("/proc/self/smaps")
	require.NoError(t, err)
	random := 0
	var cur string
	for _, line := range strings.Split(string(smaps), "\n") {
		if _, _, ok := readOnlyMappingOf(line, exe); ok {
			cur = line
			continue
		}
		if flags, ok := strings.CutPrefix(line, "VmFlags:"); ok && cur != "" {
			assert.Contains(t, strings.Fields(flags), "rr", "mapping %s", cur)
			random++
			cur = ""
		}
	}
	assert.GreaterOrEqual(t, random, 2)
	assert.Equal(t, "A-B", strings.Join([]string{"A", "B"}, "-"))
}

// cachedPages is how many of path's pages are in the page cache (mincore
// of a fresh mapping).
func cachedPages(t *testing.T, path string) int {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	st, err := f.Stat()
	require.NoError(t, err)
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	require.NoError(t, err)
	defer func() { _ = unix.Munmap(m) }()
	vec := make([]byte, (len(m)+os.Getpagesize()-1)/os.Getpagesize())
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0])))
	require.Zero(t, errno, "mincore")
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}
