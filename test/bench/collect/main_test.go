package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// aggregatorOut is `go test -bench` output in its real shape: a benchmark
// that prints while it runs has its name on one line and its result on a
// later one.
const aggregatorOut = `goos: linux
goarch: amd64
pkg: github.com/cozystack/cozy-health/test/bench/aggregator
BenchmarkAggregator/nodes=1000-2         	    warm-up: 1000 nodes in the Health objects after 9s
    aggregator with 1000 nodes on 1000 connections, 1m0s steady-state window:
       1	91000000000 ns/op	         5.000 cpu_%core	       100.0 peak_rss_MiB	         0.5000 writes/s	         0.3000 report_to_health_p50_s	  0.6000 report_to_health_max_s	        10.50 silent_to_unknown_s	       200.0 reports/s	  10.00 state_heap_MiB
BenchmarkAggregator/nodes=5000-2         	       1	180000000000 ns/op	        20.00 cpu_%core	       300.0 peak_rss_MiB	         0.7000 writes/s	         0.4000 report_to_health_p50_s	  0.9000 report_to_health_max_s	        10.60 silent_to_unknown_s	      1000 reports/s	  50.00 state_heap_MiB
BenchmarkAggregator/nodes=10000-2        	       1	300000000000 ns/op	        40.00 cpu_%core	       550.0 peak_rss_MiB	         0.8000 writes/s	         0.5000 report_to_health_p50_s	  1.100 report_to_health_max_s	        10.80 silent_to_unknown_s	      2000 reports/s	 100.0 state_heap_MiB
PASS
ok  	github.com/cozystack/cozy-health/test/bench/aggregator	600.1s
`

const agentOut = `BenchmarkAgentFootprint-2   	       1	70000000000 ns/op	         2.500 cpu-millicores	         0.2500 cpu-millicores:drbd-resource	         0.9000 cpu-millicores:gc	         4.0 reports	        19.00 rss-max-MiB
    agent_bench_test.go:219: agent over 1m0s
PASS
`

func TestParseAttributesResultLinesToTheLastName(t *testing.T) {
	r, err := Parse(strings.NewReader(aggregatorOut))
	require.NoError(t, err)
	require.Len(t, r, 3)
	v, _ := r.Get("BenchmarkAggregator/nodes=1000", "cpu_%core", 0)
	assert.Equal(t, 5.0, v)
	v, _ = r.Get("BenchmarkAggregator/nodes=10000", "reports/s", 0)
	assert.Equal(t, 2000.0, v)
	assert.Equal(t, []int{1000, 5000, 10000}, AggregatorSizes(r))
}

func TestParseIgnoresLinesThatAreNotResults(t *testing.T) {
	r, err := Parse(strings.NewReader("BenchmarkX-2 \t some output 1 2\n  3 not a result\nok  \tpkg\t1.0s\n"))
	require.NoError(t, err)
	assert.Empty(t, r)
}

func TestTableRatiosAgainstGoals(t *testing.T) {
	agg, err := Parse(strings.NewReader(aggregatorOut))
	require.NoError(t, err)
	agent, err := Parse(strings.NewReader(agentOut))
	require.NoError(t, err)
	tab := Table(Rows(AggregatorSizes(agg)), map[string]Results{"aggregator": agg, "agent": agent})
	lines := strings.Split(tab, "\n")
	find := func(prefix string) string {
		for _, l := range lines {
			if strings.HasPrefix(l, "| "+prefix+" |") {
				return l
			}
		}
		t.Fatalf("no row %q in\n%s", prefix, tab)
		return ""
	}
	assert.Equal(t, "| agent CPU, 5 s interval, every check | <= 2.00 millicores (issue 26) | 2.50 millicores | 1.25 (**not met**) |", find("agent CPU, 5 s interval, every check"))
	assert.Equal(t, "| agent RSS max, 5 s interval, every check | <= 20.0 MiB (issue 26) | 19.0 MiB | 0.95 (met) |", find("agent RSS max, 5 s interval, every check"))
	// The CPU goal is issue 40's at 5,000 nodes; other sizes state the figure.
	assert.Equal(t, "| aggregator at 5,000 nodes: CPU | <= 10.0 % of a core (issue 40) | 20.0 % of a core | 2.00 (**not met**) |", find("aggregator at 5,000 nodes: CPU"))
	assert.Equal(t, "| aggregator at 1,000 nodes: CPU | none (current figure) | 5.00 % of a core |  |", find("aggregator at 1,000 nodes: CPU"))
	// The agent's CPU by check follows its own rows, most first, without
	// a goal.
	split := Table(WithAgentSplit(Rows(nil), agent), map[string]Results{"agent": agent})
	assert.Contains(t, split, "| agent RSS max, 5 s interval, every check | <= 20.0 MiB (issue 26) | 19.0 MiB | 0.95 (met) |\n"+
		"| agent CPU split: gc | none (current figure) | 0.900 millicores |  |\n"+
		"| agent CPU split: drbd-resource | none (current figure) | 0.250 millicores |  |\n"+
		"| ingest: ")
	// A bench that did not run says so.
	assert.Contains(t, find("drain-check over HTTP p99 (5,000 nodes)"), "not measured")
}

func TestGrowthShowsPerThousandAndMarginalCost(t *testing.T) {
	agg, err := Parse(strings.NewReader(aggregatorOut))
	require.NoError(t, err)
	g := Growth(agg)
	// CPU: 5 / 20 / 40 % -> per 1k 5, 4, 4; marginal (20-5)/4 = 3.75, (40-20)/5 = 4.
	assert.Contains(t, g, "| CPU (% of a core) | 5.00 | 20.0 | 40.0 | 5.00 / 4.00 / 4.00 | 3.75 / 4.00 | x8.00 |")
	// A latency has no per-node figure, only its growth.
	assert.Contains(t, g, "| silent -> Unknown (s) | 10.5 | 10.6 | 10.8 |  |  | x1.03 |")
	one, err := Parse(strings.NewReader(agentOut))
	require.NoError(t, err)
	assert.Empty(t, Growth(one), "no growth table from one size")
}

// twoRunsOut is `go test -bench -count 2` output: each size's runs one
// after the other under the same name, each with the load it started at.
const twoRunsOut = `BenchmarkAggregator/nodes=1000-2         	    load average before this run: 0.50 0.40 0.30 (1, 5, 15 min)
       1	91000000000 ns/op	         5.000 cpu_%core	         0.5000 writes/s	  0.5000 load1_before
BenchmarkAggregator/nodes=1000-2         	    load average before this run: 1.20 0.60 0.40 (1, 5, 15 min)
       1	92000000000 ns/op	         7.000 cpu_%core	         0.6000 writes/s	  1.200 load1_before
BenchmarkAggregator/nodes=5000-2         	       1	180000000000 ns/op	         9.00 cpu_%core	         2.500 writes/s	  2.000 load1_before
BenchmarkAggregator/nodes=5000-2         	       1	180000000000 ns/op	        21.00 cpu_%core	         1.500 writes/s	  3.000 load1_before
PASS
`

func TestTwoRunsAColumnEach(t *testing.T) {
	agg, err := Parse(strings.NewReader(twoRunsOut))
	require.NoError(t, err)
	require.Len(t, agg["BenchmarkAggregator/nodes=1000"], 2)
	v, ok := agg.Get("BenchmarkAggregator/nodes=1000", "cpu_%core", 1)
	require.True(t, ok)
	assert.Equal(t, 7.0, v)
	m, _ := agg.Mean("BenchmarkAggregator/nodes=5000", "cpu_%core")
	assert.Equal(t, 15.0, m)
	tab := Table(Rows(AggregatorSizes(agg)), map[string]Results{"aggregator": agg})
	assert.True(t, strings.HasPrefix(tab, "| figure | goal | run 1 | run 2 | ratio |\n|---|---|---|---|---|\n"), tab)
	assert.Contains(t, tab, "| aggregator at 1,000 nodes: the machine's load average (1 min) before the run | none (current figure) | 0.500 | 1.20 |  |\n")
	assert.Contains(t, tab, "| aggregator at 5,000 nodes: CPU | <= 10.0 % of a core (issue 40) | 9.00 % of a core | 21.0 % of a core | 0.90 / 2.10 (**not met**) |\n",
		"met only when every run meets it")
	assert.Contains(t, tab, "| aggregator at 1,000 nodes: apiserver writes | <= 2.00 /s (README) | 0.500 /s | 0.600 /s | 0.25 / 0.30 (met) |\n")
	// A bench that ran once fills the first column.
	assert.Contains(t, tab, "| drain-check over HTTP p99 (5,000 nodes) | <= 5.00 ms (README) | not measured |  |  |\n")
	// The growth table is of each size's mean.
	assert.Contains(t, Growth(agg), "| CPU (% of a core) | 6.00 | 15.0 |")
}

const faultsOut = `BenchmarkAggregatorFaults/nodes=1000-2   	    load average before this run: 0.80 0.40 0.30 (1, 5, 15 min)
       1	400000000000 ns/op	  11.20 silent_to_unknown_max_s	  10.10 silent_to_unknown_p50_s	  12.40 worsening_to_health_p50_s	  0 lost_writes	  1.800 writes/s	  120.0 largest_object_KiB	  3.000 replicas	  0.8000 load1_before	  16.90 lease_takeover_s
PASS
`

func TestFaultRowsAgainstIssue40(t *testing.T) {
	f, err := Parse(strings.NewReader(faultsOut))
	require.NoError(t, err)
	assert.Equal(t, []int{1000}, FaultSizes(f))
	tab := Table(FaultRows(FaultSizes(f)), map[string]Results{"faults": f})
	assert.Contains(t, tab, "| 1,000 nodes under faults: silent -> Unknown, max over the nodes silent at once | <= 15.0 s (issue 40) | 11.2 s | 0.75 (met) |\n")
	assert.Contains(t, tab, "| 1,000 nodes under faults: lost writes: entries not as they must be, the settle bound after the kill | <= 0 (issue 40) | 0 | (met) |\n")
	assert.Contains(t, tab, "| 1,000 nodes under faults: apiserver writes of Health objects (the apiserver's count) | <= 2.00 /s (issue 40) | 1.80 /s | 0.90 (met) |\n")
	assert.Contains(t, tab, "| 1,000 nodes under faults: leader killed -> the next leader's first write | none (current figure) | not measured |  |\n")
	lost := strings.Replace(faultsOut, "0 lost_writes", "2 lost_writes", 1)
	f, err = Parse(strings.NewReader(lost))
	require.NoError(t, err)
	assert.Contains(t, Table(FaultRows(FaultSizes(f)), map[string]Results{"faults": f}), "| 2.00 | (**not met**) |\n")
}
