package soak

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// phase is a stretch of the schedule with one truth: a fault on (after its
// Apply) or its repair (after its Repair, truth Baseline).
type phase struct {
	truth Truth
	// prev is the truth before this phase; until windowEnd a reading that
	// matches it is accepted too (the detection window).
	prev Truth
	// start is when the fault (or repair) began; windowEnd is when its
	// action returned plus the bound.
	start, windowEnd time.Time
	bound            time.Duration
	// Results.
	reachedAt  time.Time
	falseGreen float64
	falseRed   float64
	wrong      float64
	last       time.Time
	// lastOff is the last sample's readings outside the truth.
	lastOff string
	// greens and reds: what was read, in which source, for how long.
	greens map[string]float64
	reds   map[string]float64
	// gateGreen and gateRed are the seconds the drain guard alone read
	// green (let an eviction through) or red (refused it as blocked)
	// against the truth: counted in falseGreen and falseRed too.
	gateGreen, gateRed float64
}

func newPhase(truth, prev Truth, start time.Time, bound time.Duration) *phase {
	return &phase{truth: truth, prev: prev, start: start, windowEnd: start.Add(bound), bound: bound,
		greens: map[string]float64{}, reds: map[string]float64{}}
}

// judgement is one sample scored against a phase.
type judgement struct {
	greens, reds []string
	// off lists the readings outside the new truth.
	off     []string
	atTruth bool
}

// judge scores s against p. A reading is a false green when it is Healthy
// (or safe) and the truth does not accept Healthy (safe); a false red
// when it is Down (or blocked) and the truth does not accept Down
// (blocked). Inside the detection window the previous truth is accepted
// as well. Unknown, Degraded, unknown verdicts and failed reads are
// neither green nor red; they only keep the sample off the truth. The
// truth is reached when every Health object and every drain verdict is in
// the new truth's set (the series are scored for green and red only).
func judge(p *phase, s Sample) judgement {
	var j judgement
	window := s.At.Before(p.windowEnd)
	j.atTruth = true
	check := func(source, what, obs string, truth, prev Set, green, red string) {
		accepted := truth
		if window {
			accepted = truth.union(prev)
		}
		switch {
		case obs == green && !accepted.Has(green):
			j.greens = append(j.greens, fmt.Sprintf("%s %s read %s, truth %s", source, what, obs, truth))
		case obs == red && !accepted.Has(red):
			j.reds = append(j.reds, fmt.Sprintf("%s %s read %s, truth %s", source, what, obs, truth))
		}
	}
	for _, c := range Components {
		obs := s.Health[c]
		check("Health", c, obs, p.truth.Component(c), p.prev.Component(c), Healthy, Down)
		if !p.truth.Component(c).Has(obs) {
			j.atTruth = false
			j.off = append(j.off, fmt.Sprintf("%s=%s (truth %s)", c, obs, p.truth.Component(c)))
		}
		if m, ok := s.Metric[c]; ok {
			check("series", c, m, p.truth.Component(c), p.prev.Component(c), Healthy, Down)
		}
		for _, n := range sortedKeys(p.truth.Entries[c]) {
			want := p.truth.Entry(c, n)
			obs, ok := s.Entries[c][n]
			if !ok {
				obs = NoAnswer
			}
			prev := p.prev.Entry(c, n)
			if prev == nil {
				prev = Set{Healthy}
			}
			check("Health", c+" nodes["+n+"]", obs, want, prev, Healthy, Down)
			if !want.Has(obs) {
				j.atTruth = false
				j.off = append(j.off, fmt.Sprintf("%s nodes[%s]=%s (truth %s)", c, n, obs, want))
			} else if why, ok := p.truth.Reasons[n]; ok && s.Reasons[c][n] != why {
				// The right state for the wrong reason: off the truth,
				// neither green nor red.
				j.atTruth = false
				j.off = append(j.off, fmt.Sprintf("%s nodes[%s] reason %q (truth %s)", c, n, s.Reasons[c][n], why))
			}
		}
	}
	nodes := make([]string, 0, len(s.Drain))
	for n := range s.Drain {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, n := range nodes {
		obs := s.Drain[n]
		what := n
		if from := s.DrainFrom[n]; from != "" {
			what += " (from " + from + ")"
		}
		check("drain", what, obs, p.truth.DrainOf(n), p.prev.DrainOf(n), Safe, Blocked)
		if !p.truth.DrainOf(n).Has(obs) {
			j.atTruth = false
			j.off = append(j.off, fmt.Sprintf("drain %s=%s (truth %s)", what, obs, p.truth.DrainOf(n)))
		}
	}
	// The gate's answers are scored as the drain verdicts are (an
	// eviction let through while the truth has no safe drain is a false
	// green; one refused as blocked while every drain is safe, a false
	// red), but do not hold the time to truth: the lab calls every
	// replica's webhook, a warming one too, where a Service routes only
	// to ready replicas.
	for _, n := range sortedKeys(s.Gate) {
		check("gate", n, s.Gate[n], p.truth.DrainOf(n), p.prev.DrainOf(n), Safe, Blocked)
	}
	return j
}

// record adds s to p's results: the seconds since the previous sample
// (at most 3 s; the first sample of a phase counts 1 s) go to false
// green, false red, or off-truth.
func (p *phase) record(s Sample) judgement {
	j := judge(p, s)
	dt := 1.0
	if !p.last.IsZero() {
		dt = s.At.Sub(p.last).Seconds()
		if dt > 3 {
			dt = 3
		}
	}
	p.last = s.At
	if len(j.greens) > 0 {
		p.falseGreen += dt
		for _, g := range j.greens {
			p.greens[g] += dt
		}
		if slices.ContainsFunc(j.greens, fromGate) {
			p.gateGreen += dt
		}
	}
	if len(j.reds) > 0 {
		p.falseRed += dt
		for _, r := range j.reds {
			p.reds[r] += dt
		}
		if slices.ContainsFunc(j.reds, fromGate) {
			p.gateRed += dt
		}
	}
	if j.atTruth {
		if p.reachedAt.IsZero() {
			p.reachedAt = s.At
		}
	} else {
		p.wrong += dt
		p.lastOff = strings.Join(j.off, ", ")
	}
	return j
}

// fromGate tells whether a green or red reading is the drain guard's.
func fromGate(reading string) bool { return strings.HasPrefix(reading, "gate ") }

// timeToTruth is how long after start the truth was first read, or -1.
func (p *phase) timeToTruth() time.Duration {
	if p.reachedAt.IsZero() {
		return -1
	}
	return p.reachedAt.Sub(p.start)
}

// met tells whether the truth was read within the bound.
func (p *phase) met() bool {
	t := p.timeToTruth()
	return t >= 0 && t <= p.bound
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
