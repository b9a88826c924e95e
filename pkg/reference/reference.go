// Package reference reads what the generated reference pages
// (docs/reference/flags.md, metrics.md) say from the binaries' own tables:
// a command's flag set, with each flag's help and default, and the metric
// descriptors registered on a Registry, with their type, help and labels.
// A small main beside each binary's wiring (it may import that binary's
// internal packages) prints its Binary as JSON; hack/reference renders the
// pages from them, and `make verify-generate` fails when a page is stale.
package reference

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Binary is one program's reference: its commands' flags and the metrics
// it serves.
type Binary struct {
	// Name is the program as it is run ("cozy-health-agent").
	Name string `json:"name"`
	// Commands are its commands, the root first.
	Commands []Command `json:"commands"`
	// Metrics are the metrics it registers, by name.
	Metrics []Metric `json:"metrics,omitempty"`
}

// Command is one command of a program and the flags it takes.
type Command struct {
	// Name is the command line up to the flags ("cozy-health-agent
	// run-once").
	Name string `json:"name"`
	// Usage is how it is typed, when it takes arguments ("kubectl health
	// node NAME").
	Usage string `json:"usage,omitempty"`
	// Short says what it does, in one line.
	Short string `json:"short,omitempty"`
	// Flags are its own flags, by name.
	Flags []Flag `json:"flags,omitempty"`
	// Inherited are the flags it takes from its parent (cobra's persistent
	// flags), by name.
	Inherited []Flag `json:"inherited,omitempty"`
}

// Flag is one flag as its flag set registers it.
type Flag struct {
	Name string `json:"name"`
	// Shorthand is its one-letter form, if any (cobra's).
	Shorthand string `json:"shorthand,omitempty"`
	// Type is the kind of value ("string", "duration", "bool", "int",
	// "float", "value" for a flag.Value of its own).
	Type string `json:"type"`
	// Default is the value it starts from, as the flag set prints it.
	Default string `json:"default"`
	// Usage is its help text.
	Usage string `json:"usage"`
}

// GoFlags is every flag of a standard library flag set, by name.
func GoFlags(fs *flag.FlagSet) []Flag {
	var out []Flag
	fs.VisitAll(func(f *flag.Flag) {
		typ, usage := flag.UnquoteUsage(f)
		if typ == "" {
			typ = "bool"
		}
		out = append(out, Flag{Name: f.Name, Type: typ, Default: f.DefValue, Usage: usage})
	})
	return out
}

// Metric is one metric's descriptor.
type Metric struct {
	Name string `json:"name"`
	// Type is counter, gauge, histogram, summary or untyped.
	Type string `json:"type"`
	Help string `json:"help"`
	// Labels are its variable labels, in the descriptor's order.
	Labels []string `json:"labels,omitempty"`
	// ConstLabels are its constant labels, "name=value".
	ConstLabels []string `json:"constLabels,omitempty"`
}

// Registry is a prometheus.Registry that keeps every collector registered
// on it, so that Metrics can describe them: a vector with no series yet
// is described all the same.
type Registry struct {
	*prometheus.Registry
	collectors []prometheus.Collector
}

var _ interface {
	prometheus.Registerer
	prometheus.Gatherer
} = (*Registry)(nil)

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry { return &Registry{Registry: prometheus.NewRegistry()} }

// Register implements prometheus.Registerer.
func (r *Registry) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	r.collectors = append(r.collectors, c)
	return nil
}

// MustRegister implements prometheus.Registerer.
func (r *Registry) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// Unregister implements prometheus.Registerer.
func (r *Registry) Unregister(c prometheus.Collector) bool {
	if !r.Registry.Unregister(c) {
		return false
	}
	r.collectors = slices.DeleteFunc(r.collectors, func(x prometheus.Collector) bool { return x == c })
	return true
}

// Typed is implemented by a collector of its own whose metrics have no
// series until there is something to say (a gather shows a metric's type
// only with a series): it names each descriptor's type.
type Typed interface {
	MetricTypes() map[*prometheus.Desc]prometheus.ValueType
}

// valueTypes names client_golang's value types as the exposition does.
var valueTypes = map[prometheus.ValueType]string{prometheus.CounterValue: "counter", prometheus.GaugeValue: "gauge", prometheus.UntypedValue: "untyped"}

// Metrics describes every metric registered, sorted by name. A metric's
// type is what a gather says of it, or, without series yet, its vector's
// or what its collector says (Typed); a metric of none of these is an
// error naming it, and so is a Typed collector a gather contradicts.
func (r *Registry) Metrics() ([]Metric, error) {
	mfs, err := r.Gather()
	if err != nil {
		return nil, fmt.Errorf("gather: %w", err)
	}
	gathered := map[string]string{}
	for _, mf := range mfs {
		gathered[mf.GetName()] = strings.ToLower(mf.GetType().String())
	}
	var out []Metric
	var errs []error
	for _, c := range r.collectors {
		ch := make(chan *prometheus.Desc)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m, err := ParseDesc(d.String())
			if err != nil {
				errs = append(errs, err)
				continue
			}
			said := ""
			if tc, ok := c.(Typed); ok {
				said = valueTypes[tc.MetricTypes()[d]]
			}
			switch m.Type = gathered[m.Name]; {
			case m.Type != "" && said != "" && said != m.Type:
				errs = append(errs, fmt.Errorf("metric %s: gathered as %s, its collector says %s", m.Name, m.Type, said))
			case m.Type == "" && said != "":
				m.Type = said
			case m.Type == "":
				m.Type = vectorType(c)
			}
			if m.Type == "" {
				errs = append(errs, fmt.Errorf("metric %s: no series and no vector type to read its type from", m.Name))
			}
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b Metric) int { return strings.Compare(a.Name, b.Name) })
	return out, errors.Join(errs...)
}

// vectorType is the type of a client_golang vector, "" for another
// collector.
func vectorType(c prometheus.Collector) string {
	switch c.(type) {
	case *prometheus.CounterVec:
		return "counter"
	case *prometheus.GaugeVec:
		return "gauge"
	case *prometheus.HistogramVec:
		return "histogram"
	case *prometheus.SummaryVec:
		return "summary"
	}
	return ""
}

// ParseDesc reads a descriptor's String() (client_golang keeps its fields
// unexported): `Desc{fqName: "x", help: "y", unit: "", constLabels: {a="b"},
// variableLabels: {c,d}}`. A constrained variable label "c(l)" is read as
// l.
func ParseDesc(s string) (Metric, error) {
	var m Metric
	rest, ok := strings.CutPrefix(s, "Desc{fqName: ")
	if !ok {
		return m, fmt.Errorf("descriptor %q: not Desc{fqName: ...}", s)
	}
	var err error
	if m.Name, rest, err = quoted(rest, ""); err != nil {
		return m, fmt.Errorf("descriptor %q: fqName: %w", s, err)
	}
	if m.Help, rest, err = quoted(rest, ", help: "); err != nil {
		return m, fmt.Errorf("descriptor %q: help: %w", s, err)
	}
	if _, rest, err = quoted(rest, ", unit: "); err != nil {
		return m, fmt.Errorf("descriptor %q: unit: %w", s, err)
	}
	consts, rest, ok := strings.Cut(strings.TrimPrefix(rest, ", constLabels: {"), "}, variableLabels: {")
	vars, ok2 := strings.CutSuffix(rest, "}}")
	if !ok || !ok2 {
		return m, fmt.Errorf("descriptor %q: labels not as expected", s)
	}
	if consts != "" {
		m.ConstLabels = strings.Split(consts, ",")
	}
	for _, v := range strings.Split(vars, ",") {
		if v == "" {
			continue
		}
		if inner, ok := strings.CutPrefix(v, "c("); ok {
			v = strings.TrimSuffix(inner, ")")
		}
		m.Labels = append(m.Labels, v)
	}
	return m, nil
}

// quoted reads the Go-quoted string after prefix at the start of s.
func quoted(s, prefix string) (value, rest string, err error) {
	s, ok := strings.CutPrefix(s, prefix)
	if !ok {
		return "", "", fmt.Errorf("want %q", prefix)
	}
	q, err := strconv.QuotedPrefix(s)
	if err != nil {
		return "", "", err
	}
	value, err = strconv.Unquote(q)
	return value, s[len(q):], err
}

// Write prints b as indented JSON.
func Write(w io.Writer, b Binary) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(b)
}

// Read reads a Binary Write printed.
func Read(r io.Reader) (Binary, error) {
	var b Binary
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return Binary{}, fmt.Errorf("read reference data: %w", err)
	}
	return b, nil
}
