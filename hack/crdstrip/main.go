// Command crdstrip prints a CustomResourceDefinition YAML file without its
// description fields (the schema, validation and printer columns stay), so
// the adapters' test fixtures stay small. Used by hack/adapter-crds.sh.
package main

import (
	"bytes"
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: crdstrip CRD.yaml")
		os.Exit(2)
	}
	data, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, doc := range bytes.Split(data, []byte("\n---")) {
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			fmt.Fprintf(os.Stderr, "parse %s: %v\n", os.Args[1], err)
			os.Exit(1)
		}
		if len(obj) == 0 {
			continue
		}
		strip(obj, false)
		out, err := yaml.Marshal(obj)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("---\n%s", out)
	}
}

// strip removes "description" keys; under "properties" a key is a field
// name, so a field called description is kept.
func strip(v any, properties bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if k == "description" && !properties {
				if _, isString := val.(string); isString {
					delete(x, k)
					continue
				}
			}
			strip(val, k == "properties" && !properties)
		}
	case []any:
		for _, e := range x {
			strip(e, false)
		}
	}
}
