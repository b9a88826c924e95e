package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cozystack/cozy-health/hack/image/push"
)

// valuesFlag is -values FILE[=PREFIX], repeated.
type valuesFlag []push.ValuesFile

func (v *valuesFlag) String() string { return fmt.Sprint(*v) }

func (v *valuesFlag) Set(s string) error {
	path, prefix, _ := strings.Cut(s, "=")
	if path == "" {
		return fmt.Errorf("want FILE[=PREFIX], got %q", s)
	}
	*v = append(*v, push.ValuesFile{Path: path, Prefix: prefix})
	return nil
}

// pushMain is `image push`: it returns the exit code.
func pushMain(args []string) int {
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	var (
		o      push.Options
		values valuesFlag
	)
	fs.StringVar(&o.Images, "in", "bin/images", "the directory `make image` wrote")
	fs.StringVar(&o.Registry, "registry", "", "REGISTRY[/NAMESPACE]: images go to REGISTRY/NAME:TAG (required)")
	fs.StringVar(&o.Tag, "tag", "", "tag to push (default: the chart's appVersion)")
	fs.BoolVar(&o.DryRun, "dry-run", false, "write the values with the references a push would make, push nothing")
	fs.Var(&values, "values", "values file to pin the references in, FILE[=KEY-PREFIX] (repeatable)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.Registry == "" {
		fmt.Fprintln(os.Stderr, "push: -registry is required (make push REGISTRY=...)")
		return 2
	}
	if o.Tag == "" {
		tag, err := chartAppVersion()
		if err != nil {
			fmt.Fprintf(os.Stderr, "push: %v\n", err)
			return 1
		}
		o.Tag = tag
	}
	o.Values = values
	// Credentials as docker and crane keep them (~/.docker/config.json).
	o.Remote = []remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pushed, err := push.Push(ctx, o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "push: %v\n", err)
		return 1
	}
	verb := "pushed"
	if o.DryRun {
		verb = "not pushed (dry run)"
	}
	for _, p := range pushed {
		fmt.Printf("%s %s\n", p.Ref, verb)
		arches := make([]string, 0, len(p.Platforms))
		for a := range p.Platforms {
			arches = append(arches, a)
		}
		sort.Strings(arches)
		for _, a := range arches {
			fmt.Printf("  linux/%-6s %s\n", a, p.Platforms[a])
		}
	}
	for _, v := range values {
		fmt.Printf("pinned in %s\n", v.Path)
	}
	return 0
}
