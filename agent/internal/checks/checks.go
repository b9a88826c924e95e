// Package checks lists every node-local check in one table. Each check's
// package owns its flags and how it is built (its Plugin, the way
// node_exporter's collectors declare their flags beside themselves); the
// node-local sources several checks share are opened once by
// agent/internal/sources. Adding a check is its package under checks/, its
// test, one line in Table and its rows in docs/reference/checks.md
// (TestChecksReference compares them).
package checks

import (
	"errors"
	"flag"
	"fmt"

	"go.uber.org/zap"

	"github.com/cozystack/cozy-health/agent/internal/checkkit"
	"github.com/cozystack/cozy-health/agent/internal/checks/ciliumagent"
	"github.com/cozystack/cozy-health/agent/internal/checks/ciliumnodes"
	"github.com/cozystack/cozy-health/agent/internal/checks/diskstats"
	"github.com/cozystack/cozy-health/agent/internal/checks/drbd"
	"github.com/cozystack/cozy-health/agent/internal/checks/etcdalarms"
	"github.com/cozystack/cozy-health/agent/internal/checks/etcdmember"
	"github.com/cozystack/cozy-health/agent/internal/checks/etcdmembership"
	"github.com/cozystack/cozy-health/agent/internal/checks/fsynclatency"
	"github.com/cozystack/cozy-health/agent/internal/checks/fsyncprobe"
	"github.com/cozystack/cozy-health/agent/internal/checks/kubeovn"
	"github.com/cozystack/cozy-health/agent/internal/checks/ovncentral"
	"github.com/cozystack/cozy-health/agent/internal/checks/ovs"
	"github.com/cozystack/cozy-health/agent/internal/checks/talosservices"
	"github.com/cozystack/cozy-health/agent/internal/sources"
)

// Plugin is one check as the agent wires it. A check package exports one
// (conventionally named Plugin, in its plugin.go); a check with flags also
// implements FlagPlugin.
type Plugin interface {
	// Build builds the check from the node's shared sources, once per
	// agent, after the flags are parsed and validated.
	Build(src *sources.Set) (checkkit.Check, error)
}

// FlagPlugin is a Plugin with flags of its own.
type FlagPlugin interface {
	Plugin
	// RegisterFlags binds the check's flags, with their defaults, to fs.
	RegisterFlags(fs *flag.FlagSet)
}

// Validator is a Plugin that rejects flag values it cannot run with.
type Validator interface {
	Validate() error
}

// Table is every check the agent runs, in report order: one line each. A
// source that is absent or unconfigured makes a check not applicable at run
// time, never absent here.
func Table() []Plugin {
	return []Plugin{
		talosservices.Plugin{},
		&etcdmember.Plugin{},
		etcdmembership.Plugin{},
		etcdalarms.Plugin{},
		&fsynclatency.Plugin{},
		&fsyncprobe.Plugin{},
		&diskstats.Plugin{},
		&ciliumagent.Plugin{},
		&ciliumnodes.Plugin{},
		&kubeovn.Plugin{},
		&ovs.Plugin{},
		&ovncentral.Plugin{},
		&drbd.Plugin{},
	}
}

// Config is the flags of every check in Table and of the shared sources.
type Config struct {
	Sources sources.Config
	plugins []Plugin
}

// NewConfig returns a Config of Table's checks; RegisterFlags sets its
// defaults.
func NewConfig() *Config { return &Config{plugins: Table()} }

// RegisterFlags binds the sources' and every check's flags to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Sources.RegisterFlags(fs)
	for _, p := range c.plugins {
		if fp, ok := p.(FlagPlugin); ok {
			fp.RegisterFlags(fs)
		}
	}
}

// Validate rejects values the sources or a check cannot run with.
func (c *Config) Validate() error {
	errs := []error{c.Sources.Validate()}
	for _, p := range c.plugins {
		if v, ok := p.(Validator); ok {
			errs = append(errs, v.Validate())
		}
	}
	return errors.Join(errs...)
}

// Set is the built checks and the sources they share.
type Set struct {
	Checks  []checkkit.Check
	sources *sources.Set
}

// Close releases the shared sources.
func (s *Set) Close() error { return s.sources.Close() }

// Build opens the shared sources and builds every check of a validated
// configuration for node.
func (c *Config) Build(node string, log *zap.Logger) (*Set, error) {
	src, err := sources.Open(c.Sources, node, log)
	if err != nil {
		return nil, err
	}
	s := &Set{sources: src}
	for _, p := range c.plugins {
		ck, err := p.Build(src)
		if err != nil {
			_ = src.Close()
			return nil, fmt.Errorf("build check: %w", err)
		}
		s.Checks = append(s.Checks, ck)
	}
	return s, nil
}
