// Package version carries the build version of cozy-health's binaries, set
// at link time with -ldflags "-X github.com/cozystack/cozy-health/pkg/version.Version=...".
package version

// Version is the build version; "dev" when not set at link time.
var Version = "dev"
