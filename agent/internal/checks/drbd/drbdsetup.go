package drbd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
)

// Resource is the part of one `drbdsetup status --json` element read here.
type Resource struct {
	Name        string       `json:"name"`
	Role        string       `json:"role"`
	Suspended   bool         `json:"suspended"`
	Devices     []Device     `json:"devices"`
	Connections []Connection `json:"connections"`
}

// Device is a local DRBD volume.
type Device struct {
	Volume    int    `json:"volume"`
	Minor     int    `json:"minor"`
	DiskState string `json:"disk-state"`
	Client    bool   `json:"client"`
	Quorum    *bool  `json:"quorum,omitempty"`
}

// Connection is a connection to a peer.
type Connection struct {
	PeerNodeID      int          `json:"peer-node-id"`
	Name            string       `json:"name"`
	ConnectionState string       `json:"connection-state"`
	PeerRole        string       `json:"peer-role"`
	PeerDevices     []PeerDevice `json:"peer_devices"`
}

// PeerDevice is a peer's volume.
type PeerDevice struct {
	Volume           int    `json:"volume"`
	ReplicationState string `json:"replication-state"`
	PeerDiskState    string `json:"peer-disk-state"`
	PeerClient       bool   `json:"peer-client"`
}

// ParseStatus decodes `drbdsetup status --json` output.
func ParseStatus(out []byte) ([]Resource, error) {
	var rs []Resource
	if err := json.Unmarshal(out, &rs); err != nil {
		return nil, fmt.Errorf("decode drbdsetup status: %w", err)
	}
	for i, r := range rs {
		if r.Name == "" {
			return nil, fmt.Errorf("decode drbdsetup status: resource %d has no name", i)
		}
	}
	return rs, nil
}

// maxOutput caps drbdsetup's output.
const maxOutput = 16 << 20

// Resources runs `<path> status --json` (no shell) under ctx and returns
// every resource it lists.
func Resources(ctx context.Context, path string) ([]Resource, error) {
	cmd := exec.CommandContext(ctx, path, "status", "--json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &limitedWriter{w: &stdout, n: maxOutput}
	cmd.Stderr = &limitedWriter{w: &stderr, n: 4096}
	cmd.WaitDelay = 0
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("run drbdsetup status: %w", ctx.Err())
		}
		return nil, fmt.Errorf("run drbdsetup status: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	return ParseStatus(stdout.Bytes())
}

type limitedWriter struct {
	w interface{ Write([]byte) (int, error) }
	n int
}

var errTooLong = errors.New("output too long")

func (l *limitedWriter) Write(p []byte) (int, error) {
	if len(p) > l.n {
		return 0, errTooLong
	}
	l.n -= len(p)
	return l.w.Write(p)
}
