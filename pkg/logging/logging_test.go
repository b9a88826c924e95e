package logging

import (
	"bytes"
	"encoding/json"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

func TestNewWritesJSONWithComponent(t *testing.T) {
	var buf bytes.Buffer
	log, err := New("info", &buf)
	require.NoError(t, err)
	Component(log, "rollup").Info("rolled up", zap.Int("nodes", 3))
	log.Debug("below the level")
	require.NoError(t, log.Sync())

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 1, "debug is filtered at info")
	var e map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &e))
	assert.Equal(t, "info", e["level"])
	assert.Equal(t, "rolled up", e["msg"])
	assert.Equal(t, "rollup", e[ComponentKey])
	assert.InDelta(t, 3, e["nodes"], 0)
	ts, ok := e["ts"].(string)
	require.True(t, ok, "ISO 8601 time, not epoch seconds: %v", e["ts"])
	_, err = time.Parse("2006-01-02T15:04:05.000Z0700", ts)
	assert.NoError(t, err)
}

func TestLevelFlag(t *testing.T) {
	level := "info"
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	RegisterLevelFlag(fs, &level)
	require.NoError(t, fs.Parse([]string{"--log-level", "debug"}))
	assert.Equal(t, "debug", level)

	var buf bytes.Buffer
	log, err := New(level, &buf)
	require.NoError(t, err)
	log.Debug("shown")
	assert.Contains(t, buf.String(), "shown")

	_, err = New("loud", &buf)
	assert.ErrorContains(t, err, "--log-level")
	assert.ErrorContains(t, ValidateLevel("loud"), `"loud"`)
}
