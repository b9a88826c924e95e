// Command collect turns the output of the benchmarks (`make bench` tees each
// bench's `go test -bench` output into a results directory) into one table:
// figure, goal, measured, ratio; and, when the aggregator ran at more than
// one node count, a table of how its figures grow with the node count; and
// the aggregator under faults (BenchmarkAggregatorFaults) in a table of its
// own.
//
//	go run ./test/bench/collect [-dir bin/bench] [-machine "..."] [-only bench]
//
// It reads the benchmark result lines (the standard `go test -bench` format:
// name, iterations, then value/unit pairs, including b.ReportMetric's), so
// the benchmarks need nothing but ReportMetric to feed it. A benchmark run
// more than once (go test -count, as `make bench` runs the aggregator) has a
// column per run: on a shared machine one run alone says little, and the
// load average each run started at (load1_before) is a row beside them. The
// tables are Markdown, printed and written to <dir>/table.md.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Figures are one run's figures: unit -> value.
type Figures map[string]float64

// Results are the figures of one results file: benchmark name (without the
// -GOMAXPROCS suffix) -> its runs in the order they ran.
type Results map[string][]Figures

// Get is unit's value in run (from 0) of bench.
func (r Results) Get(bench, unit string, run int) (float64, bool) {
	runs := r[bench]
	if run >= len(runs) {
		return 0, false
	}
	v, ok := runs[run][unit]
	return v, ok
}

// Mean is unit's mean over the runs of bench that have it.
func (r Results) Mean(bench, unit string) (float64, bool) {
	var sum float64
	n := 0
	for _, f := range r[bench] {
		if v, ok := f[unit]; ok {
			sum += v
			n++
		}
	}
	if n == 0 {
		return 0, false
	}
	return sum / float64(n), true
}

var procSuffix = regexp.MustCompile(`-\d+$`)

// Parse reads `go test -bench` output. A benchmark whose own output is
// printed while it runs has its name and its result on different lines; a
// result line (iterations, then value/unit pairs with ns/op) belongs to the
// last benchmark name seen. A benchmark with more than one result line ran
// more than once (-count): each is a run.
func Parse(r io.Reader) (Results, error) {
	res := Results{}
	var name string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if strings.HasPrefix(f[0], "Benchmark") {
			name = procSuffix.ReplaceAllString(f[0], "")
			f = f[1:]
		}
		if name == "" || len(f) < 3 || len(f)%2 != 1 {
			continue
		}
		if _, err := strconv.ParseInt(f[0], 10, 64); err != nil {
			continue
		}
		vals := map[string]float64{}
		for i := 1; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				vals = nil
				break
			}
			vals[f[i+1]] = v
		}
		if _, ok := vals["ns/op"]; !ok {
			continue
		}
		res[name] = append(res[name], vals)
	}
	return res, sc.Err()
}

// Row is one figure of the table.
type Row struct {
	File, Bench, Unit string
	Figure            string
	// Scale converts the unit to Show's unit (e.g. ns/op -> ms).
	Scale float64
	Show  string
	// Op is "<=" or ">=" with Goal, or "" with no goal (Source then says
	// so).
	Op     string
	Goal   float64
	Source string
}

// Rows are the figures of `make bench` and their goals: the newest issue's
// that sets one (issue 40 for the aggregator's CPU and RSS, issue 26 for the
// agent and the adapters), else the README's.
func Rows(aggregatorSizes []int) []Row {
	rows := []Row{
		{File: "agent", Bench: "BenchmarkAgentFootprint", Unit: "cpu-millicores", Figure: "agent CPU, 5 s interval, every check", Show: "millicores", Op: "<=", Goal: 2, Source: "issue 26"},
		{File: "agent", Bench: "BenchmarkAgentFootprint", Unit: "rss-max-MiB", Figure: "agent RSS max, 5 s interval, every check", Show: "MiB", Op: "<=", Goal: 20, Source: "issue 26"},
		{File: "ingest", Bench: "BenchmarkIngestPath", Unit: "path-reports/cpu-s", Figure: "ingest: verified+accepted reports per CPU-second", Show: "reports/CPU-s"},
		{File: "ingest", Bench: "BenchmarkIngestPath", Unit: "ratio", Figure: "ingest path vs bare ed25519 verify + decode", Show: "ratio", Op: ">=", Goal: 0.7, Source: "README"},
		{File: "ingest", Bench: "BenchmarkIngestGRPC", Unit: "ratio", Figure: "ingest through gRPC+TLS vs bare verify + decode", Show: "ratio", Op: ">=", Goal: 0.7, Source: "README"},
	}
	for _, n := range aggregatorSizes {
		b := fmt.Sprintf("BenchmarkAggregator/nodes=%d", n)
		at := fmt.Sprintf("aggregator at %s nodes: ", thousands(n))
		cpu := Row{File: "aggregator", Bench: b, Unit: "cpu_%core", Figure: at + "CPU", Show: "% of a core"}
		rss := Row{File: "aggregator", Bench: b, Unit: "peak_rss_MiB", Figure: at + "RSS peak", Show: "MiB"}
		switch n {
		case 5000:
			cpu.Op, cpu.Goal, cpu.Source = "<=", 10, "issue 40"
			rss.Op, rss.Goal, rss.Source = "<=", 300, "issue 40"
		case 10000:
			rss.Op, rss.Goal, rss.Source = "<=", 550, "issue 40"
		}
		rows = append(rows,
			Row{File: "aggregator", Bench: b, Unit: "load1_before", Figure: at + "the machine's load average (1 min) before the run", Show: ""},
			cpu, rss,
			Row{File: "aggregator", Bench: b, Unit: "writes/s", Figure: at + "apiserver writes", Show: "/s", Op: "<=", Goal: 2, Source: "README"},
			Row{File: "aggregator", Bench: b, Unit: "report_to_health_p50_s", Figure: at + "report -> Health p50 (a recovery: published at once)", Show: "s"},
			Row{File: "aggregator", Bench: b, Unit: "report_to_health_max_s", Figure: at + "report -> Health max (a recovery)", Show: "s"},
			Row{File: "aggregator", Bench: b, Unit: "worsening_to_health_p50_s", Figure: at + "report -> Health p50 of a worsening (damper hold included)", Show: "s"},
			Row{File: "aggregator", Bench: b, Unit: "silent_to_unknown_s", Figure: at + "silent -> Unknown", Show: "s", Op: "<=", Goal: 15, Source: "README"},
			Row{File: "aggregator", Bench: b, Unit: "largest_object_KiB", Figure: at + "largest Health object (JSON)", Show: "KiB", Op: "<=", Goal: 1536, Source: "etcd's request limit"},
		)
	}
	return append(rows,
		Row{File: "adapters", Bench: "BenchmarkAdapters", Unit: "change_to_health_p99_ms", Figure: "adapters (5,000 HelmReleases + 2,000 CNPG Clusters): status change -> Health p99", Scale: 1e-3, Show: "s", Op: "<=", Goal: 1, Source: "issue 26"},
		Row{File: "adapters", Bench: "BenchmarkAdapters", Unit: "change_to_health_p50_ms", Figure: "adapters: status change -> Health p50", Scale: 1e-3, Show: "s"},
		Row{File: "adapters", Bench: "BenchmarkAdapters", Unit: "live_KiB_per_1000_objects", Figure: "adapters: live memory per watched object", Scale: 1e-3, Show: "KiB", Op: "<=", Goal: 2, Source: "README"},
		Row{File: "adapters", Bench: "BenchmarkAdapters", Unit: "millicores_per_1000_objects", Figure: "adapters: CPU per 1,000 objects at rest", Show: "millicores"},
		Row{File: "drain", Bench: "BenchmarkDrainCheck", Unit: "p99-cpu-ms", Figure: "drain-check evaluation p99 (5,000 nodes)", Show: "ms", Op: "<=", Goal: 5, Source: "README"},
		Row{File: "drain", Bench: "BenchmarkDrainCheckHTTP", Unit: "p99-ms", Figure: "drain-check over HTTP p99 (5,000 nodes)", Show: "ms", Op: "<=", Goal: 5, Source: "README"},
		Row{File: "drain", Bench: "BenchmarkSnapshot5000Nodes", Unit: "ns/op", Figure: "drain snapshot of 5,000 nodes (mean)", Scale: 1e-6, Show: "ms"},
	)
}

// agentSplitPrefix is the unit prefix of the agent's CPU by check
// (test/bench/agent: cpu-millicores:<check or part>).
const agentSplitPrefix = "cpu-millicores:"

// WithAgentSplit is rows with the agent's CPU by check (and by its own parts,
// the runtime and the collector) after the agent's own rows, most first: no
// goal each, they say where the agent's CPU goes.
func WithAgentSplit(rows []Row, agent Results) []Row {
	const bench = "BenchmarkAgentFootprint"
	var units []string
	var first Figures
	if runs := agent[bench]; len(runs) > 0 {
		first = runs[0]
	}
	for u := range first {
		if strings.HasPrefix(u, agentSplitPrefix) {
			units = append(units, u)
		}
	}
	slices.SortFunc(units, func(a, b string) int {
		if va, vb := first[a], first[b]; va != vb {
			if va > vb {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	var split []Row
	for _, u := range units {
		split = append(split, Row{File: "agent", Bench: bench, Unit: u, Figure: "agent CPU split: " + strings.TrimPrefix(u, agentSplitPrefix), Show: "millicores"})
	}
	at := 0
	for i, r := range rows {
		if r.File == "agent" {
			at = i + 1
		}
	}
	return slices.Concat(rows[:at:at], split, rows[at:])
}

// AggregatorSizes are the node counts the aggregator ran at, ascending.
func AggregatorSizes(r Results) []int { return sizes(r, aggregatorBench) }

// FaultSizes are the node counts the aggregator under faults ran at,
// ascending.
func FaultSizes(r Results) []int { return sizes(r, faultsBench) }

// The benchmarks whose names carry their node count.
const (
	aggregatorBench = "BenchmarkAggregator"
	faultsBench     = "BenchmarkAggregatorFaults"
)

func sizes(r Results, bench string) []int {
	var sizes []int
	for name := range r {
		if n, ok := strings.CutPrefix(name, bench+"/nodes="); ok {
			if v, err := strconv.Atoi(n); err == nil {
				sizes = append(sizes, v)
			}
		}
	}
	slices.Sort(sizes)
	return sizes
}

// Table is the Markdown table of rows against the results per file: one
// value column, or one per run when a row's benchmark ran more than once
// (a benchmark with fewer runs leaves the later columns empty); the ratio
// of each run to the goal, met only when every run meets it.
func Table(rows []Row, results map[string]Results) string {
	runs := 1
	for _, r := range rows {
		runs = max(runs, len(results[r.File][r.Bench]))
	}
	var sb strings.Builder
	if runs == 1 {
		sb.WriteString("| figure | goal | measured | ratio |\n|---|---|---|---|\n")
	} else {
		sb.WriteString("| figure | goal |")
		for i := range runs {
			fmt.Fprintf(&sb, " run %d |", i+1)
		}
		sb.WriteString(" ratio |\n|---|---|" + strings.Repeat("---|", runs) + "---|\n")
	}
	for _, r := range rows {
		goal := "none (current figure)"
		if r.Op != "" {
			goal = strings.TrimSpace(r.Op+" "+num(r.Goal)+" "+r.Show) + " (" + r.Source + ")"
		}
		var cells, ratios []string
		measured, met := 0, true
		for run := range runs {
			v, ok := results[r.File].Get(r.Bench, r.Unit, run)
			if !ok {
				cells = append(cells, "")
				continue
			}
			measured++
			if r.Scale != 0 {
				v *= r.Scale
			}
			cells = append(cells, strings.TrimSpace(num(v)+" "+r.Show))
			if r.Op == "" {
				continue
			}
			if r.Goal != 0 {
				ratios = append(ratios, fmt.Sprintf("%.2f", v/r.Goal))
			}
			met = met && ((r.Op == "<=" && v <= r.Goal) || (r.Op == ">=" && v >= r.Goal))
		}
		if measured == 0 {
			cells[0] = "not measured"
		}
		ratio := ""
		if r.Op != "" && measured > 0 {
			verdict := "(met)"
			if !met {
				verdict = "(**not met**)"
			}
			ratio = strings.TrimSpace(strings.Join(ratios, " / ") + " " + verdict)
		}
		fmt.Fprintf(&sb, "| %s | %s | %s | %s |\n", r.Figure, goal, strings.Join(cells, " | "), ratio)
	}
	return sb.String()
}

// FaultRows are the figures of the aggregator under faults (issue 40 item
// 3) at each node count it ran at, with the goals.
func FaultRows(sizes []int) []Row {
	var rows []Row
	for _, n := range sizes {
		b := fmt.Sprintf("%s/nodes=%d", faultsBench, n)
		at := fmt.Sprintf("%s nodes under faults: ", thousands(n))
		row := func(unit, figure, show string) Row {
			return Row{File: "faults", Bench: b, Unit: unit, Figure: at + figure, Show: show}
		}
		goal := func(r Row, op string, v float64, source string) Row {
			r.Op, r.Goal, r.Source = op, v, source
			return r
		}
		rows = append(rows,
			row("load1_before", "the machine's load average (1 min) before the run", ""),
			row("replicas", "aggregator replicas (the Lease holder killed)", ""),
			goal(row("silent_to_unknown_max_s", "silent -> Unknown, max over the nodes silent at once", "s"), "<=", 15, "issue 40"),
			row("silent_to_unknown_p50_s", "silent -> Unknown p50", "s"),
			goal(row("worsening_to_health_p50_s", "worsening -> Health p50 of the flapping nodes (damper hold included)", "s"), "<=", 15, "issue 40"),
			row("worsening_to_health_p90_s", "worsening -> Health p90", "s"),
			row("worsenings_missed", "degraded spells never shown (in the p50 as infinite)", ""),
			goal(row("lost_writes", "lost writes: entries not as they must be, the settle bound after the kill", ""), "<=", 0, "issue 40"),
			goal(row("writes/s", "apiserver writes of Health objects (the apiserver's count)", "/s"), "<=", 2, "issue 40"),
			goal(row("largest_object_KiB", "largest Health object (JSON)", "KiB"), "<=", 1536, "etcd's request limit"),
			row("lease_takeover_s", "leader killed -> Lease taken by another replica", "s"),
			row("failover_first_write_s", "leader killed -> the next leader's first write", "s"),
			row("failover_worsening_p50_s", "worsening begun at the kill -> Health p50", "s"),
			row("false_unknown_nodes", "nodes read Unknown that never went silent", ""),
			row("replicas_cpu_%core", "CPU of the replicas together", "% of a core"),
			row("apiserver_cpu_%core", "CPU of the apiserver", "% of a core"),
			row("etcd_cpu_%core", "CPU of etcd", "% of a core"),
			row("simulator_cpu_%core", "CPU of the simulated agents", "% of a core"),
			row("machine_busy_%", "the machine's CPU busy", "%"),
			row("sim_late_p99_s", "simulated reports late against their schedule, p99 (bucket bound; +Inf: over 2.5 s)", "s"),
			row("replica_peak_rss_MiB", "RSS peak of a replica", "MiB"),
			row("leader_apply_mean_s", "the next leader's mean status apply", "s"),
		)
	}
	return rows
}

// growthFigures are the aggregator's figures the growth table shows;
// perNode says whether a figure per 1,000 nodes means something (a rate or
// a size does, a latency does not).
var growthFigures = []struct {
	Unit, Name, Show string
	PerNode          bool
}{
	{"cpu_%core", "CPU", "% of a core", true},
	{"peak_rss_MiB", "RSS peak", "MiB", true},
	{"state_heap_MiB", "live state without connections", "MiB", true},
	{"reports/s", "reports accepted", "/s", true},
	{"writes/s", "apiserver writes", "/s", true},
	{"report_to_health_p50_s", "report -> Health p50", "s", false},
	{"report_to_health_max_s", "report -> Health max", "s", false},
	{"worsening_to_health_p50_s", "worsening -> Health p50", "s", false},
	{"silent_to_unknown_s", "silent -> Unknown", "s", false},
	{"largest_object_KiB", "largest Health object", "KiB", true},
}

// Growth is the Markdown table of the aggregator's figures at each node
// count (the mean of its runs): the value, the value per 1,000 nodes, the marginal cost of each
// further 1,000 nodes between consecutive sizes, and the growth from the
// smallest to the largest size next to the growth of the node count. Linear
// growth shows as a marginal per 1,000 that stays flat.
func Growth(r Results) string {
	sizes := AggregatorSizes(r)
	if len(sizes) < 2 {
		return ""
	}
	var sb strings.Builder
	sb.WriteString("| figure |")
	for _, n := range sizes {
		fmt.Fprintf(&sb, " %s nodes |", thousands(n))
	}
	first, last := sizes[0], sizes[len(sizes)-1]
	fmt.Fprintf(&sb, " per 1k nodes | marginal per 1k (between sizes) | growth %s -> %s (nodes x%s) |\n|---|", thousands(first), thousands(last), num(float64(last)/float64(first)))
	for range sizes {
		sb.WriteString("---|")
	}
	sb.WriteString("---|---|---|\n")
	for _, g := range growthFigures {
		vals := make([]float64, len(sizes))
		ok := true
		for i, n := range sizes {
			v, found := r.Mean(fmt.Sprintf("BenchmarkAggregator/nodes=%d", n), g.Unit)
			ok = ok && found
			vals[i] = v
		}
		if !ok {
			continue
		}
		fmt.Fprintf(&sb, "| %s (%s) |", g.Name, g.Show)
		for _, v := range vals {
			fmt.Fprintf(&sb, " %s |", num(v))
		}
		var per, marg []string
		if g.PerNode {
			for i, n := range sizes {
				per = append(per, num(vals[i]/float64(n)*1000))
				if i > 0 {
					marg = append(marg, num((vals[i]-vals[i-1])/float64(n-sizes[i-1])*1000))
				}
			}
		}
		growth := "n/a"
		if vals[0] != 0 {
			growth = "x" + num(vals[len(vals)-1]/vals[0])
		}
		fmt.Fprintf(&sb, " %s | %s | %s |\n", strings.Join(per, " / "), strings.Join(marg, " / "), growth)
	}
	return sb.String()
}

// num prints v with three significant digits, without an exponent.
func num(v float64) string {
	switch a := max(v, -v); {
	case v == 0:
		return "0"
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
}

// maxRuns is the most runs any benchmark of r has.
func maxRuns(r Results) int {
	n := 0
	for _, runs := range r {
		n = max(n, len(runs))
	}
	return n
}

func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// Files are the results files `make bench` writes, by bench.
var Files = []string{"agent", "ingest", "aggregator", "adapters", "drain", "faults"}

func main() {
	dir := flag.String("dir", "bin/bench", "the results directory (one <bench>.txt per bench)")
	machine := flag.String("machine", "", "the machine the figures were measured on, printed above the table")
	only := flag.String("only", "", "one bench (e.g. aggregator): only its results file and its rows; the table goes to <dir>/<bench>-table.md")
	flag.Parse()
	files, out := Files, "table.md"
	if *only != "" {
		if !slices.Contains(Files, *only) {
			fmt.Fprintf(os.Stderr, "-only %q: not one of %s\n", *only, strings.Join(Files, ", "))
			os.Exit(2)
		}
		files, out = []string{*only}, *only+"-table.md"
	}
	results := map[string]Results{}
	for _, name := range files {
		f, err := os.Open(filepath.Join(*dir, name+".txt"))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		r, err := Parse(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			os.Exit(1)
		}
		results[name] = r
	}
	if len(results) == 0 {
		fmt.Fprintf(os.Stderr, "no results in %s (run make bench)\n", *dir)
		os.Exit(1)
	}
	var sb strings.Builder
	if *machine != "" {
		fmt.Fprintf(&sb, "Measured on %s.\n\n", *machine)
	}
	var rows []Row
	for _, r := range Rows(AggregatorSizes(results["aggregator"])) {
		if slices.Contains(files, r.File) {
			rows = append(rows, r)
		}
	}
	if len(rows) > 0 {
		sb.WriteString(Table(WithAgentSplit(rows, results["agent"]), results))
	}
	if g := Growth(results["aggregator"]); g != "" {
		label := "The aggregator by node count"
		if runs := maxRuns(results["aggregator"]); runs > 1 {
			label += fmt.Sprintf(" (each figure the mean of its size's %d runs)", runs)
		}
		sb.WriteString("\n" + label + ":\n\n" + g)
	}
	if fr := FaultRows(FaultSizes(results["faults"])); len(fr) > 0 {
		if sb.Len() > 0 {
			sb.WriteString("\n")
		}
		sb.WriteString("The aggregator under faults (BenchmarkAggregatorFaults, issue 40): replicas on a Lease, " +
			"a tenth of the nodes flapping, many nodes silent at once, the Lease holder killed:\n\n" + Table(fr, results))
	}
	fmt.Print(sb.String())
	if err := os.WriteFile(filepath.Join(*dir, out), []byte(sb.String()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
