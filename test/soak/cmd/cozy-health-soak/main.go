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
	"strings"
	"syscall"
	"time"

	"github.com/cozystack/cozy-health/test/lab"
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
	flag.Parse()

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
	l, err := lab.Up(ctx, lab.Options{Dir: *dir, Nodes: soak.Nodes, Log: logf})
	if err != nil {
		fmt.Fprintln(os.Stderr, "cozy-health-soak: lab:", err)
		return 2
	}
	defer func() {
		if err := l.Down(); err != nil {
			fmt.Fprintln(os.Stderr, "cozy-health-soak: lab down:", err)
		}
	}()
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
