// Package cli is how both cozy-health binaries read their configuration and
// end: flags, then an optional YAML file named by --config whose keys are
// the flag names (the command line wins over the file), then the caller's
// Validate; and the same exit code for the same failure.
package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"sigs.k8s.io/yaml"
)

// Exit codes shared by the binaries.
const (
	// ExitOK: done, or --help.
	ExitOK = 0
	// ExitFailure: the configuration was valid but running failed.
	ExitFailure = 1
	// ExitUsage: a bad command line, configuration file or value: an
	// unknown flag or key, a missing file, a value Validate refuses.
	ExitUsage = 2
)

// ConfigFlag is the flag naming the optional YAML file.
const ConfigFlag = "config"

// Repeatable is implemented by a flag.Value that may be set more than once
// (each Set adds): in the file, such a flag may be given a YAML list.
type Repeatable interface {
	flag.Value
	Repeatable()
}

// Load parses args (without the program name) with the flags bind
// registers, then, when --config names a file, reads it and parses args
// again over it so that the command line wins. bind is called once per
// pass on a fresh FlagSet and must reset what it binds to the defaults,
// then register every flag, --config included. Usage errors (with
// flag.ErrHelp for -h) are printed to stderr by the flag package;
// ExitCode maps any error to the exit code.
func Load(name string, args []string, stderr io.Writer, bind func(fs *flag.FlagSet)) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	bind(fs)
	if fs.Lookup(ConfigFlag) == nil {
		return fmt.Errorf("%s: no --%s flag bound", name, ConfigFlag)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	path := fs.Lookup(ConfigFlag).Value.String()
	if path == "" {
		return nil
	}
	fs = flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the first pass already reported usage errors
	bind(fs)
	if err := applyFile(fs, path); err != nil {
		return err
	}
	return fs.Parse(args)
}

// ExitCode is the exit code for an error of Load or Validate: ExitOK for
// --help, ExitUsage for anything else (nil is ExitOK).
func ExitCode(err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	return ExitUsage
}

// applyFile sets every key of the YAML file at path as the flag of the
// same name.
func applyFile(fs *flag.FlagSet, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--%s: read config file: %w", ConfigFlag, err)
	}
	var values map[string]any
	useNumber := func(d *json.Decoder) *json.Decoder { d.UseNumber(); return d }
	if err := yaml.UnmarshalStrict(data, &values, useNumber); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	for key, v := range values {
		f := fs.Lookup(key)
		if key == ConfigFlag || f == nil {
			return fmt.Errorf("config file %s: unknown key %q (keys are flag names)", path, key)
		}
		if list, ok := v.([]any); ok {
			if _, ok := f.Value.(Repeatable); !ok {
				return fmt.Errorf("config file %s: --%s: want a single value, got a list", path, key)
			}
			for _, e := range list {
				if err := set(fs, key, e); err != nil {
					return fmt.Errorf("config file %s: %w", path, err)
				}
			}
			continue
		}
		if err := set(fs, key, v); err != nil {
			return fmt.Errorf("config file %s: %w", path, err)
		}
	}
	return nil
}

func set(fs *flag.FlagSet, key string, v any) error {
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case json.Number:
		s = x.String()
	case bool:
		s = fmt.Sprint(x)
	case nil:
		s = ""
	default:
		return fmt.Errorf("--%s: want a scalar, got %T", key, v)
	}
	if err := fs.Set(key, s); err != nil {
		return fmt.Errorf("--%s: %w", key, err)
	}
	return nil
}
