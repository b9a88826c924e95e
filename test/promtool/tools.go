//go:build tools

// Package promtool pins Prometheus's promtool, which the rule unit tests run
// (`promtool check rules`, `promtool test rules`). It is built from the Go
// module proxy at the version in this module's go.mod, without the service
// discovery plugins (build tag remove_all_sd), by `make promtool`.
package promtool

import (
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
