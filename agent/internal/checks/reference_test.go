package checks_test

import (
	"flag"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/cozystack/cozy-health/agent/internal/checks"
	"github.com/cozystack/cozy-health/pkg/doctable"
)

// checksPage is the reference page of the checks.
const checksPage = "docs/reference/checks.md"

// TestChecksReference: Table is the one list of checks; the reference
// page's two tables (where each check reads; sources and judgements) name
// the same checks with the same components, as sets, and every `--flag` the
// page names is one the agent registers for its checks and sources.
func TestChecksReference(t *testing.T) {
	cfg := checks.NewConfig()
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	set, err := cfg.Build("node-0", zap.NewNop())
	require.NoError(t, err)
	t.Cleanup(func() { _ = set.Close() })
	var table []string
	for _, c := range set.Checks {
		table = append(table, c.Name()+" ("+c.Component()+")")
	}
	page := doctable.Read(t, checksPage)

	var where []string
	for _, cells := range doctable.Rows(t, page, "| check | component | source flag") {
		where = append(where, doctable.Code(cells[0])+" ("+cells[1]+")")
	}
	doctable.SameSet(t, "checks.Table", table, checksPage+"'s check table", where)

	var judged []string
	for _, cells := range doctable.Rows(t, page, "| check (component) | source and protocol |") {
		judged = append(judged, withComponent(cells[0])...)
	}
	doctable.SameSet(t, "checks.Table", table, checksPage+"'s sources table", judged)

	var unknown []string
	for _, m := range regexp.MustCompile("`--([a-z0-9][a-z0-9-]*)").FindAllStringSubmatch(page, -1) {
		if fs.Lookup(m[1]) == nil {
			unknown = append(unknown, m[1])
		}
	}
	assert.Empty(t, doctable.Unique(unknown), "%s names flags the agent's checks and sources do not register", checksPage)
}

var checkGroup = regexp.MustCompile("((?:`[a-z0-9-]+`(?:, )?)+) \\(([a-z0-9-]+)\\)")

// withComponent reads a cell naming checks by component, "`a`, `b` (etcd),
// `c` (node)", as "a (etcd)", "b (etcd)", "c (node)".
func withComponent(cell string) []string {
	var out []string
	for _, m := range checkGroup.FindAllStringSubmatch(cell, -1) {
		for _, name := range doctable.Codes(m[1]) {
			out = append(out, name+" ("+m[2]+")")
		}
	}
	if out == nil {
		out = []string{strings.TrimSpace(cell)}
	}
	return out
}
