// Package ovsrpc is a minimal client of the JSON-RPC 1.0 dialect Open vSwitch
// and OVN speak on their unix sockets: the OVSDB management protocol of
// ovsdb-server (RFC 7047: list_dbs, transact, echo) and the unixctl control
// protocol that ovs-appctl / ovn-appctl speak to a daemon's .ctl socket
// (a request {"method": "cluster/status", "params": ["OVN_Northbound"],
// "id": 0} answered {"result": "<text>", "error": null, "id": 0}, or an error
// string). Both are a stream of JSON objects with no framing
// (lib/jsonrpc.c, lib/unixctl.c of Open vSwitch).
//
// A full OVSDB library (github.com/ovn-org/libovsdb) needs a generated model
// of every schema and keeps a monitored cache of the database; the agent
// asks two one-shot questions per interval and runs within 20 MiB, and
// libovsdb has no unixctl client at all, so one small client serves both.
package ovsrpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"
)

// MaxMessage caps one message read from a socket.
const MaxMessage = 16 << 20

// Error is an error reply: unixctl answers a string, ovsdb-server an object
// {"error": ..., "details": ...}.
type Error struct {
	Method  string
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Method, e.Message) }

// Conn is one connection to a socket. Not safe for concurrent use.
type Conn struct {
	c      net.Conn
	dec    *json.Decoder
	lim    *limitedReader
	nextID int
}

// Dial connects to the unix socket at path.
func Dial(ctx context.Context, path string) (*Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	lim := &limitedReader{r: c}
	return &Conn{c: c, dec: json.NewDecoder(lim), lim: lim}, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

type request struct {
	ID     int    `json:"id"`
	Method string `json:"method"`
	Params []any  `json:"params"`
}

type message struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

// Call sends method with params and decodes the result into result (nil to
// discard it). It honours ctx's deadline and cancellation; the server's own
// "echo" requests (its inactivity probe) are answered while waiting.
func (c *Conn) Call(ctx context.Context, method string, params []any, result any) error {
	if params == nil {
		params = []any{}
	}
	stop := context.AfterFunc(ctx, func() { _ = c.c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.c.SetDeadline(dl)
	}
	id := c.nextID
	c.nextID++
	if err := json.NewEncoder(c.c).Encode(request{ID: id, Method: method, Params: params}); err != nil {
		return c.ctxErr(ctx, fmt.Errorf("send %s: %w", method, err))
	}
	want := []byte(fmt.Sprint(id))
	for {
		var m message
		c.lim.n = MaxMessage
		if err := c.dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return c.ctxErr(ctx, fmt.Errorf("read %s reply: %w", method, err))
		}
		if m.Method == "echo" && len(m.ID) > 0 && !isNull(m.ID) {
			if err := json.NewEncoder(c.c).Encode(map[string]json.RawMessage{"id": m.ID, "result": orNull(m.Params), "error": json.RawMessage("null")}); err != nil {
				return c.ctxErr(ctx, fmt.Errorf("answer echo: %w", err))
			}
			continue
		}
		if m.Method != "" || !bytes.Equal(bytes.TrimSpace(m.ID), want) {
			continue // a notification (update, ...) or another reply
		}
		if len(m.Error) > 0 && !isNull(m.Error) {
			return &Error{Method: method, Message: errorText(m.Error)}
		}
		if result == nil {
			return nil
		}
		if err := json.Unmarshal(orNull(m.Result), result); err != nil {
			return fmt.Errorf("decode %s result: %w", method, err)
		}
		return nil
	}
}

// ctxErr says a failure caused by ctx as ctx's error. The socket's
// deadline is ctx's, and may fire a moment before ctx reports it.
func (c *Conn) ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	if _, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return err
}

// Call dials path, makes one call and closes the connection.
func Call(ctx context.Context, path, method string, params []any, result any) error {
	c, err := Dial(ctx, path)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Call(ctx, method, params, result)
}

// Appctl runs one unixctl command on the daemon's control socket, as
// `ovs-appctl -t <ctl> command args...` does, and returns its text.
func Appctl(ctx context.Context, ctl, command string, args ...string) (string, error) {
	params := make([]any, len(args))
	for i, a := range args {
		params[i] = a
	}
	var out string
	if err := Call(ctx, ctl, command, params, &out); err != nil {
		return "", err
	}
	return out, nil
}

func isNull(b json.RawMessage) bool { return string(bytes.TrimSpace(b)) == "null" }

func orNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

func errorText(b json.RawMessage) string {
	var s string
	if json.Unmarshal(b, &s) == nil {
		return strings.TrimSpace(s)
	}
	var o struct {
		Error   string `json:"error"`
		Details string `json:"details"`
	}
	if json.Unmarshal(b, &o) == nil && o.Error != "" {
		if o.Details != "" {
			return o.Error + ": " + o.Details
		}
		return o.Error
	}
	return string(b)
}

// limitedReader fails a message larger than n bytes instead of reading on.
type limitedReader struct {
	r io.Reader
	n int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, fmt.Errorf("message larger than %d bytes", MaxMessage)
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}
