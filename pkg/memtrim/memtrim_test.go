package memtrim

import (
	"os"
	"strings"
	"testing"

	"github.com/prometheus/procfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
