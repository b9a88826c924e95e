package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadValues: keys in the file's order with their dotted path, the
// comment above each (and beside it), sections without a value, and
// collections on one line.
func TestReadValues(t *testing.T) {
	vs, err := readValues([]byte(`# The file's own comment.

# The agent.
agent:
  # How often.
  # In seconds.
  interval: 5s # beside
  tolerations:
    - operator: Exists
  nodeSelector: {}
  resources: {cpu: 5m}
empty: ""
`))
	require.NoError(t, err)
	assert.Equal(t, []value{
		{path: "agent", comment: "The agent."},
		{path: "agent.interval", value: "5s", comment: "How often. In seconds. beside", leaf: true},
		{path: "agent.tolerations", value: "[{operator: Exists}]", leaf: true},
		{path: "agent.nodeSelector", value: "{}", leaf: true},
		{path: "agent.resources", value: "{cpu: 5m}", leaf: true},
		{path: "empty", value: "", leaf: true},
	}, vs)
}

func TestCell(t *testing.T) {
	assert.Equal(t, `a \| b &lt;svc&gt; c`, cell("a | b <svc>\n  c"))
	assert.Equal(t, "`x`", code("x"))
	assert.Equal(t, "`` a`b ``", code("a`b"))
}
