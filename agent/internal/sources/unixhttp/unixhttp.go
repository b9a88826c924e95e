// Package unixhttp is the HTTP client of the daemons that serve their REST
// API on a unix socket only (the Cilium agent's cilium.sock, cilium-health's
// health.sock): every request dials the socket, whatever the URL's host, and
// no connection is kept between runs (a restarted daemon's new socket is
// used at once). Payloads are read through httpsource (size cap, status
// errors).
package unixhttp

import (
	"context"
	"net"
	"net/http"

	"github.com/cozystack/cozy-health/agent/internal/sources/httpsource"
)

// Client talks HTTP to one unix socket.
type Client struct {
	socket string
	http   *http.Client
}

// New returns a client of socket; nothing is dialled until a request.
func New(socket string) *Client {
	d := &net.Dialer{}
	return &Client{socket: socket, http: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", socket)
		},
		DisableKeepAlives: true,
	}}}
}

// Socket is the socket's path.
func (c *Client) Socket() string { return c.socket }

// Get fetches url (its host part is ignored) and returns the body; see
// httpsource.Get. A socket nobody listens on fails with an error wrapping
// syscall.ECONNREFUSED, one the agent may not open with fs.ErrPermission.
func (c *Client) Get(ctx context.Context, url string) ([]byte, error) {
	return httpsource.Get(ctx, c.http, url, nil)
}
