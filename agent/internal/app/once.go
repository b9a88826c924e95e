package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"go.uber.org/zap"

	"github.com/cozystack/cozy-health/agent/internal/config"
	"github.com/cozystack/cozy-health/pkg/report"
)

// Exit codes of run-once: the worst status seen. They coincide with
// pkg/cli's (a usage error is 2, as "unknown" is).
const (
	ExitHealthy = 0
	ExitBad     = 1
	ExitUnknown = 2
)

// onceOutput is run-once's JSON document.
type onceOutput struct {
	Node         string            `json:"node"`
	Observations []onceObservation `json:"observations"`
}

type onceObservation struct {
	report.Observation
	Status string `json:"status"`
}

// RunOnce runs every check once, prints the result to stdout (--output)
// and returns the exit code: ExitHealthy when all are Healthy (or not
// applicable), ExitBad when any is Degraded or Down, ExitUnknown when any
// is Unknown and none is worse.
func (a *App) RunOnce(ctx context.Context, stdout io.Writer) int {
	rep := a.runner.Collect(ctx, a.cfg.Interval)
	out := onceOutput{Node: a.cfg.NodeName, Observations: []onceObservation{}}
	worst := report.StatusHealthy
	for _, o := range rep.Observations {
		out.Observations = append(out.Observations, onceObservation{Observation: o, Status: o.Status.String()})
		worst = report.Worse(worst, o.Status)
	}
	if a.cfg.Output == config.OutputJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			a.log.Error("write output", zap.Error(err))
			return ExitUnknown
		}
	} else {
		printTable(stdout, out)
	}
	switch worst {
	case report.StatusDegraded, report.StatusDown:
		return ExitBad
	case report.StatusUnknown:
		return ExitUnknown
	}
	return ExitHealthy
}

func printTable(w io.Writer, out onceOutput) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "NODE %s\n", out.Node)
	fmt.Fprintln(tw, "COMPONENT\tCHECK\tRESOURCE\tSTATUS\tREASON\tMESSAGE")
	for _, o := range out.Observations {
		res := ""
		if o.ResourceRef != nil {
			res = o.ResourceRef.Kind + "/" + o.ResourceRef.Name
		}
		msg := o.Message
		if len(o.Attributes) > 0 {
			keys := make([]string, 0, len(o.Attributes))
			for k := range o.Attributes {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			var parts []string
			for _, k := range keys {
				parts = append(parts, fmt.Sprintf("%s=%g", k, o.Attributes[k]))
			}
			msg += " [" + strings.Join(parts, " ") + "]"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", o.Component, o.Check, res, o.Status, o.Reason, msg)
	}
	_ = tw.Flush()
}
