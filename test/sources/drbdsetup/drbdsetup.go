// Package drbdsetup installs a drbdsetup stand-in: an executable that answers
// `drbdsetup status --json` with the JSON array drbd-utils prints
// (user/v9/drbdsetup.c), from a state file the caller rewrites. It lets the
// agent exec a real binary without DRBD in the kernel.
package drbdsetup

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Resource is one resource of `drbdsetup status --json`.
type Resource struct {
	Name        string       `json:"name"`
	NodeID      int          `json:"node-id"`
	Role        string       `json:"role"`
	Suspended   bool         `json:"suspended"`
	WriteOrder  string       `json:"write-ordering"`
	Devices     []Device     `json:"devices"`
	Connections []Connection `json:"connections"`
}

// Device is a local volume.
type Device struct {
	Volume    int    `json:"volume"`
	Minor     int    `json:"minor"`
	DiskState string `json:"disk-state"`
	Client    bool   `json:"client"`
	Quorum    bool   `json:"quorum"`
	Size      int    `json:"size"`
}

// Connection is a peer connection.
type Connection struct {
	PeerNodeID      int          `json:"peer-node-id"`
	Name            string       `json:"name"`
	ConnectionState string       `json:"connection-state"`
	Congested       bool         `json:"congested"`
	PeerRole        string       `json:"peer-role"`
	PeerDevices     []PeerDevice `json:"peer_devices"`
}

// PeerDevice is a peer's volume.
type PeerDevice struct {
	Volume           int     `json:"volume"`
	ReplicationState string  `json:"replication-state"`
	PeerDiskState    string  `json:"peer-disk-state"`
	PeerClient       bool    `json:"peer-client"`
	ResyncSuspended  string  `json:"resync-suspended"`
	OutOfSync        int     `json:"out-of-sync"`
	PercentInSync    float64 `json:"percent-in-sync"`
}

// Fake is an installed stand-in.
type Fake struct {
	// Path is the executable to pass as --drbdsetup.
	Path  string
	state string
}

// Install writes the executable and an empty state into dir.
func Install(dir string) (*Fake, error) {
	f := &Fake{Path: filepath.Join(dir, "drbdsetup"), state: filepath.Join(dir, "drbdsetup-status.json")}
	script := "#!/bin/sh\n# drbdsetup stand-in: only `status --json` is implemented.\n" +
		"if [ \"$1\" = status ] && [ \"$2\" = --json ]; then exec cat '" + f.state + "'; fi\n" +
		"echo \"drbdsetup stand-in: unsupported arguments: $*\" >&2\nexit 20\n"
	if err := os.WriteFile(f.Path, []byte(script), 0o755); err != nil {
		return nil, fmt.Errorf("install drbdsetup stand-in: %w", err)
	}
	return f, f.Set(nil)
}

// Set replaces the resources the next `status --json` prints.
func (f *Fake) Set(rs []Resource) error {
	if rs == nil {
		rs = []Resource{}
	}
	b, err := json.MarshalIndent(rs, "", "  ")
	if err != nil {
		return fmt.Errorf("encode drbdsetup status: %w", err)
	}
	tmp := f.state + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write drbdsetup status: %w", err)
	}
	return os.Rename(tmp, f.state)
}

// SetRaw makes the next `status --json` print b verbatim (garbage tests).
func (f *Fake) SetRaw(b []byte) error {
	return os.WriteFile(f.state, b, 0o644)
}
