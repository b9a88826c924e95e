// Package httpsource fetches a local source's HTTP payload with a size cap
// and classifies "nothing listens here" (the source is absent on this node)
// apart from real failures.
package httpsource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"syscall"
)

// MaxBody caps a payload; larger ones are rejected, not truncated.
const MaxBody = 16 << 20

// NewClient is a client for scraping metrics: http.DefaultTransport's
// settings without asking for gzip. The sources are on the node (or its pod
// network) and their pages small: compressing costs both sides CPU, and
// each gzip reader the client takes allocates its window anew (about a
// tenth of the agent's steady allocations went there).
func NewClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DisableCompression = true
	return &http.Client{Transport: t}
}

// Get fetches url and returns its body; a non-2xx status is an error.
func Get(ctx context.Context, c *http.Client, url string, header http.Header) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("build request %s: %w", url, err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", url, err)
	}
	if len(body) > MaxBody {
		return nil, fmt.Errorf("read %s: body larger than %d bytes", url, MaxBody)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return body, &StatusError{URL: url, Code: resp.StatusCode}
	}
	return body, nil
}

// Stream fetches url and hands the body (capped at MaxBody) to read, which
// must consume what it needs before returning; a non-2xx status is an error.
func Stream(ctx context.Context, c *http.Client, url string, read func(io.Reader) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("build request %s: %w", url, err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return &StatusError{URL: url, Code: resp.StatusCode}
	}
	if err := read(io.LimitReader(resp.Body, MaxBody)); err != nil {
		return fmt.Errorf("read %s: %w", url, err)
	}
	// Drain so the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	return nil
}

// StatusError is a non-2xx answer.
type StatusError struct {
	URL  string
	Code int
}

func (e *StatusError) Error() string { return fmt.Sprintf("get %s: HTTP %d", e.URL, e.Code) }

// IsAbsent reports whether err means nothing listens at the address
// (connection refused, or a unix socket path that does not exist).
func IsAbsent(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT)
}

// IsNotFound reports whether err is an HTTP 404.
func IsNotFound(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == http.StatusNotFound
}
