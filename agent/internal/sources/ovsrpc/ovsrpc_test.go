package ovsrpc

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// serveRaw answers each request line-less with the raw bytes reply returns,
// as ovsdb-server writes them (objects back to back).
func serveRaw(t *testing.T, reply func(req map[string]any) string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				dec := json.NewDecoder(bufio.NewReader(c))
				for {
					var req map[string]any
					if dec.Decode(&req) != nil {
						return
					}
					if req["method"] == nil {
						continue // the client's answer to our echo
					}
					_, _ = c.Write([]byte(reply(req)))
				}
			}()
		}
	}()
	return path
}

func TestCallShapes(t *testing.T) {
	path := serveRaw(t, func(req map[string]any) string {
		switch req["method"] {
		case "list_dbs":
			// An inactivity probe first (ovsdb-server's "echo" request),
			// then a notification, then the reply: RFC 7047 4.1.11, 4.1.6.
			return `{"id":"echo","method":"echo","params":[]}{"id":null,"method":"update","params":[null,{}]}{"id":0,"result":["Open_vSwitch","_Server"],"error":null}`
		case "transact":
			return `{"id":0,"result":null,"error":{"error":"unknown database","details":"Nope is not a valid database"}}`
		case "cluster/status":
			return `{"id":0,"result":null,"error":"unknown cluster\n"}`
		}
		return `{"id":0,"result":"` + strings.Repeat("x", 10) + `\n","error":null}`
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var dbs []string
	require.NoError(t, Call(ctx, path, "list_dbs", nil, &dbs))
	assert.Equal(t, []string{"Open_vSwitch", "_Server"}, dbs)

	err := Call(ctx, path, "transact", []any{"Nope"}, nil)
	var rpcErr *Error
	require.ErrorAs(t, err, &rpcErr)
	assert.Equal(t, "unknown database: Nope is not a valid database", rpcErr.Message)

	_, err = Appctl(ctx, path, "cluster/status", "OVN_Northbound")
	require.ErrorAs(t, err, &rpcErr)
	assert.Equal(t, "unknown cluster", rpcErr.Message)

	out, err := Appctl(ctx, path, "version")
	require.NoError(t, err)
	assert.Equal(t, "xxxxxxxxxx\n", out)
}

func TestCallRefusesGarbageAndHugeReplies(t *testing.T) {
	garbage := serveRaw(t, func(map[string]any) string { return "\x00<html>" })
	_, err := Appctl(context.Background(), garbage, "version")
	require.Error(t, err)

	huge := serveRaw(t, func(map[string]any) string { return `{"id":0,"result":"` + strings.Repeat("a", MaxMessage+10) + `"}` })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = Appctl(ctx, huge, "version")
	require.ErrorContains(t, err, "larger than")

	silent := serveRaw(t, func(map[string]any) string { return "" })
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	_, err = Appctl(ctx2, silent, "version")
	require.ErrorIs(t, err, context.DeadlineExceeded)
}
