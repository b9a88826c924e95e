package cli

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type list []string

func (l *list) String() string { return strings.Join(*l, ",") }
func (l *list) Set(v string) error {
	*l = append(*l, v)
	return nil
}
func (l *list) Repeatable() {}

type conf struct {
	file  string
	name  string
	n     int64
	on    bool
	items list
}

// load runs Load with a small flag set whose defaults are name=dflt, count=1.
func load(t *testing.T, args ...string) (conf, string, error) {
	t.Helper()
	var c conf
	var stderr bytes.Buffer
	err := Load("prog", args, &stderr, func(fs *flag.FlagSet) {
		c = conf{name: "dflt", n: 1}
		fs.StringVar(&c.file, ConfigFlag, c.file, "file")
		fs.StringVar(&c.name, "name", c.name, "name")
		fs.Int64Var(&c.n, "count", c.n, "count")
		fs.BoolVar(&c.on, "enabled", c.on, "enabled")
		fs.Var(&c.items, "item", "item (repeatable)")
	})
	return c, stderr.String(), err
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

func TestFlagsOnly(t *testing.T) {
	c, _, err := load(t, "--name", "x", "--item", "a", "--item", "b")
	require.NoError(t, err)
	assert.Equal(t, "x", c.name)
	assert.Equal(t, int64(1), c.n)
	assert.Equal(t, list{"a", "b"}, c.items)
}

func TestFileThenFlagsWin(t *testing.T) {
	p := writeFile(t, "name: from-file\ncount: 400000000000\nenabled: true\nitem: [a, b]\n")
	c, _, err := load(t, "--config", p, "--name", "flag")
	require.NoError(t, err)
	assert.Equal(t, "flag", c.name, "the command line wins over the file")
	assert.Equal(t, int64(400000000000), c.n, "large integers are kept exactly")
	assert.True(t, c.on)
	assert.Equal(t, list{"a", "b"}, c.items, "a repeatable flag takes a list, once")

	c, _, err = load(t, "--config", p, "--item", "c")
	require.NoError(t, err)
	assert.Equal(t, list{"a", "b", "c"}, c.items, "the command line adds to a repeatable flag")
}

func TestRejections(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	for _, tc := range []struct {
		name, body string
		args       []string
		want       []string
	}{
		{"unknown flag", "", []string{"--frobnicate"}, []string{"frobnicate"}},
		{"stray argument", "", []string{"--name", "x", "extra"}, []string{"unexpected arguments: extra"}},
		{"missing file", "", []string{"--config", missing}, []string{"--config", missing}},
		{"unknown key", "nmae: x\n", nil, []string{`unknown key "nmae"`}},
		{"config key in the file", "config: other.yaml\n", nil, []string{`unknown key "config"`}},
		{"bad value", "count: lots\n", nil, []string{"--count"}},
		{"list for a single value", "name: [a, b]\n", nil, []string{"--name", "want a single value"}},
		{"map value", "name: {a: b}\n", nil, []string{"--name", "want a scalar"}},
		{"not YAML", "name: [\n", nil, []string{"config file"}},
		{"duplicate key", "name: a\nname: b\n", nil, []string{"name"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.body != "" {
				args = append([]string{"--config", writeFile(t, tc.body)}, args...)
			}
			_, stderr, err := load(t, args...)
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error()+stderr, w)
			}
			assert.Equal(t, ExitUsage, ExitCode(err))
		})
	}
}

func TestHelp(t *testing.T) {
	_, stderr, err := load(t, "-h")
	require.ErrorIs(t, err, flag.ErrHelp)
	assert.Equal(t, ExitOK, ExitCode(err))
	assert.Contains(t, stderr, "-name")
	assert.Equal(t, ExitOK, ExitCode(nil))
}

func TestLoadNeedsTheConfigFlag(t *testing.T) {
	err := Load("prog", nil, io.Discard, func(*flag.FlagSet) {})
	assert.ErrorContains(t, err, "--config")
}
