package cli

import "flag"

// Runtime is the Go runtime and profiling flags both binaries take,
// registered here once so that each has one help text. A binary's Config
// embeds it and sets its own defaults.
type Runtime struct {
	// Pprof serves /debug/pprof/ on the metrics address (--pprof).
	Pprof bool
	// MaxProcs is GOMAXPROCS; 0 keeps the runtime's default, one per core
	// (--gomaxprocs). $GOMAXPROCS, when set, wins.
	MaxProcs int
	// TrimStartupPages releases the executable's read-only pages that only
	// start-up used once the binary has started (--trim-startup-pages; the
	// agent after its first report, pkg/memtrim.ExecutableUncached; the
	// aggregator after its warm-up, pkg/memtrim.Executable).
	TrimStartupPages bool
}

// RegisterFlags binds --pprof, --gomaxprocs and --trim-startup-pages to r;
// r's current values are the defaults.
func (r *Runtime) RegisterFlags(fs *flag.FlagSet) {
	fs.BoolVar(&r.Pprof, "pprof", r.Pprof, "serve /debug/pprof/ on --metrics-addr (the agent runs every check under the profile label check=<name>)")
	fs.IntVar(&r.MaxProcs, "gomaxprocs", r.MaxProcs, "Go GOMAXPROCS: how many threads run Go code at once; 0 keeps the runtime default (one per core); $GOMAXPROCS wins when set")
	fs.BoolVar(&r.TrimStartupPages, "trim-startup-pages", r.TrimStartupPages, "once started (the agent after its first report, the aggregator after its warm-up), release the executable's read-only pages only start-up used, so they fault back in on use; the agent also drops the binary's unmapped pages from the page cache, so a page faults back in alone (read once from disk) instead of with its cached neighbours")
}
