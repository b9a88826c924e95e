package push

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// SetValues sets each dotted key of set (an existing string value) in the
// YAML file at path to its new value, in place, as `yq -i` does: only the
// value's text changes; comments, order and blank lines stay. A key that is
// missing or not a single-line string is an error and the file is left as
// it was.
func SetValues(path string, set map[string]string) error {
	src, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read values: %w", err)
	}
	out, err := setValues(src, set)
	if err != nil {
		return fmt.Errorf("values file %s: %w", path, err)
	}
	return writeFile(path, out)
}

// writeFile replaces path with data atomically, keeping its mode.
func writeFile(path string, out []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".values-*.yaml")
	if err != nil {
		return fmt.Errorf("write values: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(out); err != nil {
		tmp.Close()
		return fmt.Errorf("write values: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write values: %w", err)
	}
	if st, err := os.Stat(path); err == nil {
		_ = os.Chmod(tmp.Name(), st.Mode().Perm())
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write values: %w", err)
	}
	return nil
}

func setValues(src []byte, set map[string]string) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, fmt.Errorf("want one YAML document")
	}
	lines := strings.SplitAfter(string(src), "\n")
	for key, value := range set {
		n, err := lookup(doc.Content[0], key)
		if err != nil {
			return nil, err
		}
		if n.Kind != yaml.ScalarNode || n.Tag != "!!str" || strings.Contains(n.Value, "\n") {
			return nil, fmt.Errorf("%s is not a single-line string (want the image reference REGISTRY/NAME:TAG@DIGEST)", key)
		}
		i, col := n.Line-1, n.Column-1
		line := lines[i]
		end, err := scalarEnd(line, col, n.Style)
		if err != nil {
			return nil, fmt.Errorf("%s (line %d): %w", key, n.Line, err)
		}
		lines[i] = line[:col] + value + line[end:]
	}
	out := []byte(strings.Join(lines, ""))
	// The result says exactly what was asked and nothing else changed.
	var before, after any
	if err := yaml.Unmarshal(src, &before); err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal(out, &after); err != nil {
		return nil, fmt.Errorf("edited values do not parse: %w", err)
	}
	for key, value := range set {
		if err := assign(before, strings.Split(key, "."), value); err != nil {
			return nil, err
		}
	}
	if !reflect.DeepEqual(before, after) {
		return nil, fmt.Errorf("editing %v changed more than those keys", keys(set))
	}
	return out, nil
}

// lookup finds the value node of a dotted key in a mapping.
func lookup(n *yaml.Node, key string) (*yaml.Node, error) {
	cur := n
	parts := strings.Split(key, ".")
	for i, p := range parts {
		if cur.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("%s is not a mapping", strings.Join(parts[:i], "."))
		}
		var next *yaml.Node
		for j := 0; j+1 < len(cur.Content); j += 2 {
			if cur.Content[j].Value == p {
				next = cur.Content[j+1]
			}
		}
		if next == nil {
			return nil, fmt.Errorf("no key %s", strings.Join(parts[:i+1], "."))
		}
		cur = next
	}
	return cur, nil
}

// scalarEnd is the index in line just past the scalar that starts at col.
func scalarEnd(line string, col int, style yaml.Style) (int, error) {
	if col > len(line) {
		return 0, fmt.Errorf("value outside its line")
	}
	rest := line[col:]
	switch style {
	case yaml.DoubleQuotedStyle:
		for i := 1; i < len(rest); i++ {
			switch rest[i] {
			case '\\':
				i++
			case '"':
				return col + i + 1, nil
			}
		}
		return 0, fmt.Errorf("unterminated double-quoted value")
	case yaml.SingleQuotedStyle:
		for i := 1; i < len(rest); i++ {
			if rest[i] == '\'' {
				if i+1 < len(rest) && rest[i+1] == '\'' {
					i++
					continue
				}
				return col + i + 1, nil
			}
		}
		return 0, fmt.Errorf("unterminated single-quoted value")
	case 0:
		end := len(strings.TrimRight(rest, "\r\n"))
		if c := strings.Index(rest, " #"); c >= 0 && c < end {
			end = c
		}
		if c := strings.IndexAny(rest, ",}]"); c >= 0 && c < end {
			end = c // in a flow mapping
		}
		return col + len(strings.TrimRight(rest[:end], " \t")), nil
	default:
		return 0, fmt.Errorf("a block scalar, want a plain or quoted string")
	}
}

func assign(v any, path []string, value string) error {
	m, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("%s: not a mapping", strings.Join(path, "."))
	}
	if len(path) == 1 {
		m[path[0]] = value
		return nil
	}
	return assign(m[path[0]], path[1:], value)
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
