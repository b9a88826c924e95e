package app

import (
	"context"
	"net/http"
	"net/http/pprof"
	rpprof "runtime/pprof"
	"runtime/trace"
)

// PartRegion is the runtime/trace region (and log category) of the agent's
// own parts, as runner.TraceRegion is a check's.
const PartRegion = "part"

// inPart runs f under the profile label part=name and in a trace region
// PartRegion whose log names it: the agent's own loops and calls (runner,
// uplink, metrics) carry it, every check the label check=<name>
// (runner.ProfileLabel), so a CPU profile, a goroutine dump
// (GODEBUG=tracebacklabels=1) or an execution trace tells them apart; a
// goroutine with neither is the Go runtime's.
func inPart(ctx context.Context, name string, f func(context.Context)) {
	rpprof.Do(ctx, rpprof.Labels(PartRegion, name), func(ctx context.Context) {
		trace.WithRegion(ctx, PartRegion, func() {
			trace.Log(ctx, PartRegion, name)
			f(ctx)
		})
	})
}

// mountPprof serves net/http/pprof's handlers on mux (--pprof), as the
// aggregator does.
func mountPprof(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}
