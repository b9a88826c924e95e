package main

import (
	"bytes"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// value is one key of a values file: its dotted path, its value when it is
// a leaf (a scalar, or an empty or flow-rendered collection), and the
// comment written above it (and beside it).
type value struct {
	path, value, comment string
	leaf                 bool
}

// readValues walks a values file's keys in their order.
func readValues(data []byte) ([]value, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("not a mapping")
	}
	var out []value
	var walk func(prefix string, m *yaml.Node) error
	walk = func(prefix string, m *yaml.Node) error {
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := m.Content[i], m.Content[i+1]
			path := prefix + k.Value
			comment := strings.Join(strings.Fields(comments(k.HeadComment)+" "+comments(k.LineComment)+" "+comments(v.LineComment)), " ")
			if v.Kind == yaml.MappingNode && len(v.Content) > 0 && v.Style&yaml.FlowStyle == 0 {
				out = append(out, value{path: path, comment: comment})
				if err := walk(path+".", v); err != nil {
					return err
				}
				continue
			}
			rendered, err := flow(v)
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			out = append(out, value{path: path, value: rendered, comment: comment, leaf: true})
		}
		return nil
	}
	return out, walk("", doc.Content[0])
}

// comments is a YAML comment block as one line of text, without the #.
func comments(c string) string {
	var parts []string
	for _, line := range strings.Split(c, "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "#"))
		if line != "" {
			parts = append(parts, line)
		}
	}
	return strings.Join(parts, " ")
}

// flow renders a value on one line: a scalar as written, a collection in
// YAML's flow style, without comments.
func flow(v *yaml.Node) (string, error) {
	if v.Kind == yaml.ScalarNode {
		return v.Value, nil
	}
	c := *v
	stripComments(&c)
	setFlow(&c)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&c); err != nil {
		return "", err
	}
	return strings.TrimSpace(buf.String()), nil
}

func stripComments(n *yaml.Node) {
	n.HeadComment, n.LineComment, n.FootComment = "", "", ""
	for i, c := range n.Content {
		cc := *c
		stripComments(&cc)
		n.Content[i] = &cc
	}
}

func setFlow(n *yaml.Node) {
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		n.Style |= yaml.FlowStyle
	}
	for _, c := range n.Content {
		setFlow(c)
	}
}

func valuesPage(chart, pkg []byte) (string, error) {
	cv, err := readValues(chart)
	if err != nil {
		return "", fmt.Errorf("%s: %w", chartValues, err)
	}
	pv, err := readValues(pkg)
	if err != nil {
		return "", fmt.Errorf("%s: %w", packageValues, err)
	}
	var b strings.Builder
	b.WriteString(header(chartValues + " and " + packageValues + ", their keys and the comments above them"))
	b.WriteString(`# Chart values

Every value of the Helm chart (` + "`" + chartValues + "`" + `), in the file's order, with
its default and the comment written above it; ` + "`values.schema.json`" + ` refuses what the
binaries would refuse. A section (a key holding other keys) has no default of its
own. The binaries' flags the values become: [flags.md](flags.md).

| value | default | description |
|---|---|---|
`)
	for _, v := range cv {
		def := ""
		if v.leaf {
			def = code(v.value)
			if v.value == "" {
				def = `""`
			}
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", v.path, def, cell(v.comment))
	}
	b.WriteString(`
## The Cozystack package

What the Cozystack package (` + "`" + packageValues + "`" + `) sets over the chart's
defaults: the chart is its subchart, so its values sit under ` + "`cozy-health.`" + `.

| value | package's value | why |
|---|---|---|
`)
	for _, v := range pv {
		def := ""
		if v.leaf {
			def = code(v.value)
			if v.value == "" {
				def = `""`
			}
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", v.path, def, cell(v.comment))
	}
	return b.String(), nil
}
