package rollup_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cozystack/cozy-health/aggregator/internal/rollup"
	"github.com/cozystack/cozy-health/pkg/doctable"
)

// conditionsPage is the reference page of condition types and reasons.
const conditionsPage = "docs/reference/conditions.md"

// camel is what a condition type and a reason look like (the CRD's
// pattern for a type); lower-case reasons are metric labels, not these.
var camel = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)

// TestConditionsReference: the code's constants are the one list of
// condition types and reasons. The reference page's type table names every
// Type* constant of the aggregator and the condition type of every check
// name of pkg/report (ConditionType), no more; its reason table names every
// CamelCase Reason* constant of agent/, aggregator/ and pkg/, and no reason
// the code does not write anywhere (a constant, a string literal, or for
// "Prefix<Part>" a literal prefix the rest is appended to).
func TestConditionsReference(t *testing.T) {
	code := readCode(t, "agent", "aggregator", "pkg")
	page := doctable.Read(t, conditionsPage)

	types := code.consts("aggregator/", "Type")
	for _, check := range code.consts("pkg/report", "Check") {
		types = append(types, rollup.ConditionType(check))
	}
	doctable.SameSet(t, "the Type* constants and rollup.ConditionType of pkg/report's Check* constants", doctable.Unique(types),
		conditionsPage+"'s condition types", doctable.Column(t, page, "| condition type |", 0, doctable.Code))

	var reasons []string
	for _, cells := range doctable.Rows(t, page, "| reason | judged |") {
		reasons = append(reasons, doctable.Codes(cells[0])...)
	}
	want := doctable.Unique(code.consts("", "Reason"))
	if m := doctable.Missing(reasons, want); len(m) > 0 {
		t.Errorf("%s's reasons lack these Reason* constants: %v", conditionsPage, m)
	}
	var unknown []string
	for _, r := range reasons {
		name, _, pattern := strings.Cut(r, "<")
		switch {
		case pattern && strings.HasSuffix(r, ">") && code.literals[name]:
		case !pattern && code.literals[r]:
		default:
			unknown = append(unknown, r)
		}
	}
	if len(unknown) > 0 {
		t.Errorf("%s names reasons the code does not write: %v", conditionsPage, unknown)
	}
	if tw := doctable.Twice(reasons); len(tw) > 0 {
		t.Errorf("%s lists these reasons more than once: %v", conditionsPage, tw)
	}
}

// code is what the non-test Go files of the repository declare.
type code struct {
	// constant is every CamelCase string constant by name, with the
	// directory (slash-separated, relative to the root) it is declared in.
	constant []constant
	// literals is every CamelCase string literal, constants' values too.
	literals map[string]bool
}

type constant struct{ dir, name, value string }

// consts is the values of the constants named prefix... declared in the
// directory dir, or under it when dir ends in a slash ("" for all).
func (c *code) consts(dir, prefix string) []string {
	var out []string
	for _, k := range c.constant {
		in := k.dir == dir || strings.HasSuffix(dir, "/") && strings.HasPrefix(k.dir+"/", dir) || dir == ""
		if in && strings.HasPrefix(k.name, prefix) {
			out = append(out, k.value)
		}
	}
	return out
}

// readCode parses every non-test Go file under the roots.
func readCode(t *testing.T, roots ...string) *code {
	t.Helper()
	base := doctable.Root(t)
	c := &code{literals: map[string]bool{}}
	for _, root := range roots {
		err := filepath.WalkDir(filepath.Join(base, root), func(path string, d fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return err
			case d.IsDir() && d.Name() == "testdata":
				return filepath.SkipDir
			case d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go"):
				return nil
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(base, filepath.Dir(path))
			c.add(filepath.ToSlash(rel), f)
			return nil
		})
		if err != nil {
			t.Fatalf("read the code under %s: %v", root, err)
		}
	}
	return c
}

func (c *code) add(dir string, f *ast.File) {
	ast.Inspect(f, func(n ast.Node) bool {
		if l, ok := n.(*ast.BasicLit); ok && l.Kind == token.STRING {
			if v, err := strconv.Unquote(l.Value); err == nil && camel.MatchString(v) {
				c.literals[v] = true
			}
		}
		return true
	})
	for _, decl := range f.Decls {
		g, ok := decl.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if i >= len(vs.Values) {
					continue
				}
				l, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || l.Kind != token.STRING {
					continue
				}
				if v, err := strconv.Unquote(l.Value); err == nil && (camel.MatchString(v) || strings.HasPrefix(name.Name, "Check")) {
					c.constant = append(c.constant, constant{dir: dir, name: name.Name, value: v})
				}
			}
		}
	}
}
