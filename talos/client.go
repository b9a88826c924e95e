// Package talos wraps the Talos machine API client (pkg/machinery) for the
// agent: it builds the client from a talosconfig file, rebuilds it when the
// file changes (the Talos ServiceAccount's client certificate is re-issued
// every few hours and the mounted Secret rewritten in place), and targets
// this node. The machine-config patch and the Talos ServiceAccount manifest
// that grant the agent read-only access live beside it (see README.md).
package talos

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrNoConfig is wrapped by the *ConfigError returned when the talosconfig
// file does not exist (its Secret is not mounted).
var ErrNoConfig = errors.New("talosconfig not found")

// ConfigError is returned when the talosconfig file cannot be used: it is
// missing (wrapping ErrNoConfig and fs.ErrNotExist), unreadable, malformed,
// or names no usable context. Nothing was dialled.
type ConfigError struct {
	// Path is the talosconfig path.
	Path string
	// Err is what went wrong.
	Err error
}

func (e *ConfigError) Error() string { return fmt.Sprintf("talosconfig %s: %v", e.Path, e.Err) }
func (e *ConfigError) Unwrap() error { return e.Err }

// Config configures a Client.
type Config struct {
	// ConfigFile is the talosconfig path.
	ConfigFile string
	// Endpoints, when set, override the talosconfig's endpoints.
	Endpoints []string
	// Node, when set, is sent as the "node" metadata: the endpoint's apid
	// proxies the request to that node.
	Node string
}

// Client is a Talos API client that follows its talosconfig file.
type Client struct {
	cfg Config
	log *zap.Logger

	// mu guards the fields below: the current client and the file state it
	// was built from.
	mu      sync.Mutex
	c       *client.Client
	modTime time.Time
	size    int64
	sum     [sha256.Size]byte

	services shared[[]*machine.ServiceInfo]
	alarms   shared[[]*machine.EtcdMemberAlarm]
}

// New returns a Client; nothing is read or dialled until the first call.
func New(cfg Config, log *zap.Logger) (*Client, error) {
	if cfg.ConfigFile == "" {
		return nil, errors.New("talos: empty talosconfig path")
	}
	return &Client{cfg: cfg, log: log.With(zap.String("component", "talos-client"))}, nil
}

// current returns a client built from the talosconfig as it is now.
func (c *Client) current(ctx context.Context) (*client.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()

	cfgErr := func(err error) error { return &ConfigError{Path: c.cfg.ConfigFile, Err: err} }
	st, err := os.Stat(c.cfg.ConfigFile)
	if errors.Is(err, fs.ErrNotExist) {
		c.closeLocked()
		return nil, cfgErr(fmt.Errorf("%w: %w", ErrNoConfig, err))
	}
	if err != nil {
		return nil, cfgErr(err)
	}
	if c.c != nil && st.ModTime().Equal(c.modTime) && st.Size() == c.size {
		return c.c, nil
	}
	raw, err := os.ReadFile(c.cfg.ConfigFile)
	if err != nil {
		return nil, cfgErr(err)
	}
	sum := sha256.Sum256(raw)
	if c.c != nil && bytes.Equal(sum[:], c.sum[:]) {
		c.modTime, c.size = st.ModTime(), st.Size()
		return c.c, nil
	}
	tc, err := clientconfig.FromBytes(raw)
	if err != nil {
		return nil, cfgErr(fmt.Errorf("parse: %w", err))
	}
	opts := []client.OptionFunc{client.WithConfig(tc)}
	if len(c.cfg.Endpoints) > 0 {
		opts = append(opts, client.WithEndpoints(c.cfg.Endpoints...))
	}
	nc, err := client.New(ctx, opts...)
	if err != nil {
		return nil, cfgErr(fmt.Errorf("build client: %w", err))
	}
	reloaded := c.c != nil
	c.closeLocked()
	c.c, c.modTime, c.size, c.sum = nc, st.ModTime(), st.Size(), sum
	if reloaded {
		c.log.Info("talosconfig changed; client rebuilt", zap.String("path", c.cfg.ConfigFile))
	}
	return nc, nil
}

func (c *Client) closeLocked() {
	c.services.reset()
	c.alarms.reset()
	if c.c != nil {
		if err := c.c.Close(); err != nil {
			c.log.Debug("close talos client", zap.Error(err))
		}
		c.c = nil
	}
}

// Close releases the connection.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closeLocked()
	return nil
}

// rpcError wraps an RPC error; a gRPC DeadlineExceeded also wraps
// context.DeadlineExceeded, so callers see a timeout as a timeout.
func rpcError(what string, err error) error {
	if status.Code(err) == codes.DeadlineExceeded && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w (%w)", what, context.DeadlineExceeded, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func (c *Client) nodeCtx(ctx context.Context) context.Context {
	if c.cfg.Node != "" {
		return client.WithNode(ctx, c.cfg.Node)
	}
	return ctx
}

// ServiceList returns this node's Talos services (one call shared by the
// checks of one interval).
func (c *Client) ServiceList(ctx context.Context) ([]*machine.ServiceInfo, error) {
	if _, err := c.current(ctx); err != nil {
		return nil, err
	}
	return c.services.do(ctx, c.serviceList)
}

func (c *Client) serviceList(ctx context.Context) ([]*machine.ServiceInfo, error) {
	tc, err := c.current(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := tc.ServiceList(c.nodeCtx(ctx))
	if err != nil {
		return nil, rpcError("talos ServiceList", err)
	}
	var out []*machine.ServiceInfo
	for _, m := range resp.GetMessages() {
		out = append(out, m.GetServices()...)
	}
	return out, nil
}

// EtcdMemberList returns the etcd members as this node's member sees them
// (query_local).
func (c *Client) EtcdMemberList(ctx context.Context) ([]*machine.EtcdMember, error) {
	tc, err := c.current(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := tc.EtcdMemberList(c.nodeCtx(ctx), &machine.EtcdMemberListRequest{QueryLocal: true})
	if err != nil {
		return nil, rpcError("talos EtcdMemberList", err)
	}
	var out []*machine.EtcdMember
	for _, m := range resp.GetMessages() {
		out = append(out, m.GetMembers()...)
	}
	return out, nil
}

// EtcdStatus returns the status of this node's etcd member.
func (c *Client) EtcdStatus(ctx context.Context) (*machine.EtcdMemberStatus, error) {
	tc, err := c.current(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := tc.EtcdStatus(c.nodeCtx(ctx))
	if err != nil {
		return nil, rpcError("talos EtcdStatus", err)
	}
	for _, m := range resp.GetMessages() {
		if st := m.GetMemberStatus(); st != nil {
			return st, nil
		}
	}
	return nil, errors.New("talos EtcdStatus: empty response")
}

// EtcdAlarmList returns the cluster's active etcd alarms (one call shared
// by the checks of one interval).
func (c *Client) EtcdAlarmList(ctx context.Context) ([]*machine.EtcdMemberAlarm, error) {
	if _, err := c.current(ctx); err != nil {
		return nil, err
	}
	return c.alarms.do(ctx, c.etcdAlarmList)
}

func (c *Client) etcdAlarmList(ctx context.Context) ([]*machine.EtcdMemberAlarm, error) {
	tc, err := c.current(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := tc.EtcdAlarmList(c.nodeCtx(ctx))
	if err != nil {
		return nil, rpcError("talos EtcdAlarmList", err)
	}
	var out []*machine.EtcdMemberAlarm
	for _, m := range resp.GetMessages() {
		out = append(out, m.GetMemberAlarms()...)
	}
	return out, nil
}
