package doctable

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

const page = "# x\n\n| name | what |\n|---|---|\n| `a` | one |\n| `b`, `c` | two |\n\nprose\n| not | this |\n"

func TestRowsAndColumn(t *testing.T) {
	assert.Equal(t, [][]string{{"`a`", "one"}, {"`b`, `c`", "two"}}, Rows(t, page, "| name | what |"))
	assert.Equal(t, []string{"a", "b"}, Column(t, page, "| name |", 0, Code))
	assert.Equal(t, []string{"b", "c"}, Codes("`b`, `c` (x)"))
}

// recorder is a testing.TB that keeps what SameSet reports.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestSameSet: a row missing, one extra and one twice are each reported,
// by name.
func TestSameSet(t *testing.T) {
	r := &recorder{TB: t}
	SameSet(r, "code", []string{"a", "b", "c"}, "page", []string{"a", "a", "c", "d"})
	assert.Equal(t, []string{
		"page lacks these of code: [b]",
		"page has these beyond code: [d]",
		"page lists these more than once: [a]",
	}, r.errs)
	r.errs = nil
	SameSet(r, "code", []string{"a", "b"}, "page", []string{"b", "a"})
	assert.Empty(t, r.errs)
}
