//go:build tools

// Package vmalert pins VictoriaMetrics's vmalert and victoria-metrics
// (single-node), which the alert evaluation test (test/monitoring) runs to
// evaluate the shipped rules as Cozystack's VictoriaMetrics does. They are
// built from the Go module proxy at the version in this module's go.mod
// (the newest whose go directive this repository's Go toolchain meets) by
// `make vmalert`.
package vmalert

import (
	_ "github.com/VictoriaMetrics/VictoriaMetrics/app/victoria-metrics"
	_ "github.com/VictoriaMetrics/VictoriaMetrics/app/vmalert"
)
