package cli

import (
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRuntimeFlags(t *testing.T) {
	r := Runtime{MaxProcs: 1, TrimStartupPages: true}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	r.RegisterFlags(fs)
	for name, dflt := range map[string]string{"pprof": "false", "gomaxprocs": "1", "trim-startup-pages": "true"} {
		f := fs.Lookup(name)
		require.NotNil(t, f, name)
		assert.Equal(t, dflt, f.DefValue, "--%s's default is the value it was registered with", name)
		assert.NotEmpty(t, f.Usage, name)
	}
	require.NoError(t, fs.Parse([]string{"--pprof", "--gomaxprocs", "3", "--trim-startup-pages=false"}))
	assert.Equal(t, Runtime{Pprof: true, MaxProcs: 3}, r)
}
