// Command cozy-health-soak is `make soak`: it starts a lab (test/lab),
// drives it under a seeded fault schedule for --minutes, prints per fault
// the seconds of false green and false red and the time to the right
// answer against its bound, and exits 1 on any false-green second or a
// bound missed. docs/soak.md describes it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cozystack/cozy-health/test/lab"
	"github.com/cozystack/cozy-health/test/monitoring"
	"github.com/cozystack/cozy-health/test/soak"
)

func main() {
	os.Exit(run())
}

func run() int {
	minutes := flag.Float64("minutes", 20, "how long faults keep being scheduled")
	seed := flag.Int64("seed", 1, "seed of the fault schedule")
	dir := flag.String("dir", "", "directory for the lab (default: a new one under /tmp)")
	only := flag.String("only", "", "comma-separated fault names to draw from (default: all)")
	short := flag.Bool("short", false, "draw only the short variant's faults")
	scenario := flag.String("scenario", "schedule", "schedule (the seeded fault schedule), rolling-maintenance (every node in turn maintained as a Talos reboot does, on the real Prometheus and vmalert) or upgrade (a rolling upgrade from the release --from names and back, faults in every mixed state)")
	from := flag.String("from", "", "upgrade: the git ref of the previous release (default: the newest v* tag, else hack/release-baseline)")
	flag.Parse()
	if *scenario != "schedule" && *scenario != "rolling-maintenance" && *scenario != "upgrade" {
		fmt.Fprintln(os.Stderr, "cozy-health-soak: --scenario is schedule, rolling-maintenance or upgrade, got", *scenario)
		return 2
	}
	if *from != "" && *scenario != "upgrade" {
		fmt.Fprintln(os.Stderr, "cozy-health-soak: --from is for --scenario upgrade")
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(format string, args ...any) {
		fmt.Printf("%s ==> %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "cozy-health-soak.")
		if err != nil {
			fmt.Fprintln(os.Stderr, "cozy-health-soak:", err)
			return 2
		}
		*dir = d
	}
	lo := lab.Options{Dir: *dir, Nodes: soak.Nodes, Log: logf}
	if *scenario == "rolling-maintenance" {
		lo.MaintenanceWindow = rollingWindow
	}
	if *scenario == "upgrade" {
		return upgrade(ctx, lo, *from, *seed, logf)
	}
	l, err := lab.Up(ctx, lo)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cozy-health-soak: lab:", err)
		return 2
	}
	defer func() {
		if err := l.Down(); err != nil {
			fmt.Fprintln(os.Stderr, "cozy-health-soak: lab down:", err)
		}
	}()
	if *scenario == "rolling-maintenance" {
		return rolling(ctx, l, logf)
	}
	o := soak.Options{Duration: time.Duration(*minutes * float64(time.Minute)), Seed: *seed, Short: *short, Log: logf}
	if *only != "" {
		o.Only = strings.Split(*only, ",")
	}
	rep, err := soak.Run(ctx, l.State.Dir, o)
	if rep != nil {
		rep.Print(os.Stdout)
	}
	fmt.Printf("lab logs: %s/logs\n", l.State.Dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cozy-health-soak:", err)
		return 2
	}
	if len(rep.Failures()) > 0 {
		return 1
	}
	return 0
}

// The rolling-maintenance scenario's scale: every alert's `for` divided
// by 12, evaluation and scrape every second, victoria-metrics' and
// vmalert's delays 1 s. Not TestAlertEvaluation's 30: what is not scaled
// (a real etcd member catching up after its node is uncordoned, 16-28 s
// here) must stay shorter than the scaled `for` it races, as it is far
// shorter than the shipped one (CozyHealthComponentDegraded: 10m -> 50 s;
// with 20 s it fired after an uncordon). The aggregators'
// --maintenance-window 3m (15m shipped) outlasts one node's maintenance in
// the lab (about 100 s: the dwell outlasts the longest held `for`, 75 s)
// and is short enough to be overrun.
const (
	rollingForDivisor = 12
	rollingWindow     = 3 * time.Minute
)

func rolling(ctx context.Context, l *lab.Lab, logf func(string, ...any)) int {
	c := monitoring.EvalConfig{ForDivisor: rollingForDivisor, Interval: time.Second, Scrape: time.Second, VMDelay: time.Second}
	evalDir := filepath.Join(l.State.Dir, "evaluators")
	if err := os.MkdirAll(evalDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "cozy-health-soak:", err)
		return 2
	}
	stack, err := monitoring.StartStack(evalDir, l.State, c, logf)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cozy-health-soak: evaluators:", err)
		return 2
	}
	defer stack.Close()
	rep, err := soak.RunRollingMaintenance(ctx, l.State.Dir, soak.MaintenanceOptions{
		Stack: stack, Scrape: c.Scrape, VMDelay: c.VMDelay, Window: rollingWindow, Log: logf,
	})
	if rep != nil {
		rep.Print(os.Stdout)
	}
	fmt.Printf("lab logs: %s/logs; evaluators' logs: %s\n", l.State.Dir, evalDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cozy-health-soak:", err)
		return 2
	}
	if len(rep.Failures()) > 0 {
		return 1
	}
	return 0
}
