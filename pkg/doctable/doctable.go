// Package doctable reads the Markdown tables the documentation repeats
// from the code (docs/reference/*.md, the runbook, the README) and compares
// a table's column with the code's own table as sets, in tests: one parser
// for every such check, so that a row missing from a page, or one the code
// no longer has, fails the test that owns the code's table (TestAlertTables
// in test/monitoring, TestChecksReference beside checks.Table, ...).
package doctable

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Read returns the file at path, relative to the repository root (the
// directory holding go.mod, found upward from the test's working
// directory). A missing file fails the test.
func Read(t testing.TB, path string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(Root(t), filepath.FromSlash(path)))
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return string(data)
}

// Root is the repository root: the nearest directory upward from the
// working directory that holds go.mod.
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("working directory: %v", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Rows reads the Markdown table of doc whose header row starts with
// header and returns the cells of every row, trimmed. No such table, or one
// without rows, fails the test.
func Rows(t testing.TB, doc, header string) [][]string {
	t.Helper()
	i := strings.Index(doc, "\n"+header)
	if i < 0 {
		t.Fatalf("no table headed %q", header)
	}
	lines := strings.Split(doc[i+1:], "\n")
	var out [][]string
	for _, line := range lines[2:] { // the header and its |---| row
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		out = append(out, cells)
	}
	if len(out) == 0 {
		t.Fatalf("table headed %q has no rows", header)
	}
	return out
}

// Column returns column col (from 0) of every row of the table Rows reads,
// through name; a row for which name returns "" is left out. A row with
// fewer cells, or a column naming nothing, fails the test.
func Column(t testing.TB, doc, header string, col int, name func(cell string) string) []string {
	t.Helper()
	var out []string
	for _, cells := range Rows(t, doc, header) {
		if len(cells) <= col {
			t.Fatalf("table headed %q: a row has no column %d: %q", header, col, cells)
		}
		if n := name(cells[col]); n != "" {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		t.Fatalf("table headed %q names nothing in column %d", header, col)
	}
	return out
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// Code is the first `code span` of a cell, "" for none: the name a
// reference table's first column gives ("`etcd-member`" -> etcd-member).
func Code(cell string) string {
	if m := codeSpan.FindStringSubmatch(cell); m != nil {
		return m[1]
	}
	return ""
}

// Codes is every `code span` of a cell, in order.
func Codes(cell string) []string {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}

// SameSet compares got (read from gotFrom, a page) with want (from the
// source wantFrom, the code) as sets: what got lacks, what it has beyond
// want, and what it lists twice, each by name. It reports through
// t.Errorf, so every difference of one test is reported.
func SameSet(t testing.TB, wantFrom string, want []string, gotFrom string, got []string) {
	t.Helper()
	if m := Missing(got, want); len(m) > 0 {
		t.Errorf("%s lacks these of %s: %v", gotFrom, wantFrom, m)
	}
	if m := Missing(want, got); len(m) > 0 {
		t.Errorf("%s has these beyond %s: %v", gotFrom, wantFrom, m)
	}
	if tw := Twice(got); len(tw) > 0 {
		t.Errorf("%s lists these more than once: %v", gotFrom, tw)
	}
}

// Missing is what of names is not in set, sorted, each once.
func Missing(set, names []string) []string {
	in := map[string]bool{}
	for _, s := range set {
		in[s] = true
	}
	var out []string
	for _, n := range Unique(names) {
		if !in[n] {
			out = append(out, n)
		}
	}
	return out
}

// Twice is what names lists more than once, sorted, each once.
func Twice(names []string) []string {
	count := map[string]int{}
	for _, n := range names {
		count[n]++
	}
	var out []string
	for n, c := range count {
		if c > 1 {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// Unique is names sorted, each once.
func Unique(names []string) []string {
	out := slices.Clone(names)
	slices.Sort(out)
	return slices.Compact(out)
}
