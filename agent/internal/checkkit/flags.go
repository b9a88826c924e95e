package checkkit

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// The helpers below are for the checks' and sources' own flags (each
// package registers and validates its flags beside its code).

// ListFlag is a repeatable flag that also splits comma lists.
type ListFlag []string

func (l *ListFlag) String() string { return strings.Join(*l, ",") }

// Repeatable lets the --config file give the flag a YAML list.
func (l *ListFlag) Repeatable() {}

// Set implements flag.Value.
func (l *ListFlag) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*l = append(*l, part)
		}
	}
	return nil
}

// ValidateURL rejects raw, the value of --flag, unless it is empty or an
// http:// or https:// URL with a host.
func ValidateURL(flag, raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("--%s %q: %w", flag, raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("--%s %q: want an http:// or https:// URL with a host", flag, raw)
	}
	return nil
}

// ValidateDurations rejects a --<name>-degraded / --<name>-down pair unless
// 0 < degraded <= down.
func ValidateDurations(name string, degraded, down time.Duration) error {
	if degraded <= 0 || down < degraded {
		return fmt.Errorf("--%s-degraded %s / --%s-down %s: want 0 < degraded <= down", name, degraded, name, down)
	}
	return nil
}
