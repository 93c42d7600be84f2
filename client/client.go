// Package client is a typed Go client of the stock service's HTTP API: one
// method per route, each answer decoded into its type, and every problem
// document (RFC 9457) returned as a *Problem error that errors.As finds.
//
// A Client is safe for concurrent use. It carries one bearer token (a
// buyer's JWT, the admin token or the payment token); As gives a copy with
// another token that shares the connections, so a load test can act as many
// buyers over one pool.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/seckill/stock/internal/api"
)

// maxAnswer bounds the answer body a call reads.
const maxAnswer = 4 << 20

// Client calls one instance (or one load balancer) of the service.
type Client struct {
	base  string
	http  *http.Client
	token string
}

// Option configures New.
type Option func(*Client)

// WithHTTPClient sends the requests with hc (default http.DefaultClient).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// WithToken sends tok as the bearer token of every request.
func WithToken(tok string) Option { return func(c *Client) { c.token = tok } }

// New returns a client of the service at baseURL (scheme://host[:port],
// with an optional path prefix). It returns an error for a URL that is not
// absolute http or https.
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("client: base URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q: want http(s)://host[:port]", baseURL)
	}
	c := &Client{base: strings.TrimRight(baseURL, "/"), http: http.DefaultClient}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// As returns a copy of c that sends tok as its bearer token ("" sends
// none); the copy shares c's HTTP client.
func (c *Client) As(tok string) *Client {
	cc := *c
	cc.token = tok
	return &cc
}

// BaseURL is the URL the client was made with, without a trailing slash.
func (c *Client) BaseURL() string { return c.base }

// call is one request: method on path, with in (if not nil) as its JSON
// body and header's values. A 2xx answer is decoded into out (if not nil;
// a *[]byte takes the body as it is, a *rawAnswer the body and headers);
// any other is returned as a *Problem. It returns the answer's status.
func (c *Client) call(ctx context.Context, method, path string, header http.Header, in, out any) (int, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, fmt.Errorf("client: %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return 0, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("client: %s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, problemOf(resp, raw)
	}
	switch o := out.(type) {
	case nil:
	case *[]byte:
		*o = raw
	case *rawAnswer:
		o.body, o.header = raw, resp.Header
	default:
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, fmt.Errorf("client: %s %s: decoding the answer: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// rawAnswer is an answer's body as it is, and its headers.
type rawAnswer struct {
	body   []byte
	header http.Header
}

// Healthz asks whether the process is up: nil for a 200.
func (c *Client) Healthz(ctx context.Context) error {
	_, err := c.call(ctx, http.MethodGet, api.Healthz, nil, nil, nil)
	return err
}

// Readyz asks whether the instance can serve (its MySQL and Redis checks
// pass): nil for a 200, a *Problem with status 503 otherwise.
func (c *Client) Readyz(ctx context.Context) error {
	_, err := c.call(ctx, http.MethodGet, api.Readyz, nil, nil, nil)
	return err
}

// IsKind reports whether err is a *Problem of that kind (e.g. KindSoldOut).
func IsKind(err error, kind string) bool {
	var p *Problem
	return errors.As(err, &p) && p.Kind() == kind
}

// Metrics is the instance's Prometheus metrics in the text format, read
// from the client's base URL (the metrics listener, STOCK_METRICS_ADDR,
// unless the public port serves them).
func (c *Client) Metrics(ctx context.Context) ([]byte, error) {
	var raw []byte
	_, err := c.call(ctx, http.MethodGet, api.Metrics, nil, nil, &raw)
	return raw, err
}

// CPUProfile records the instance's CPU for seconds and returns the pprof
// profile; the client's base URL must be the instance's STOCK_PPROF_ADDR
// listener (the API port does not serve it).
func (c *Client) CPUProfile(ctx context.Context, seconds int) ([]byte, error) {
	var raw []byte
	_, err := c.call(ctx, http.MethodGet, api.CPUProfile+"?seconds="+strconv.Itoa(seconds), nil, nil, &raw)
	return raw, err
}

// AllocProfile returns the allocations the instance made over the next
// seconds (a pprof allocation profile of that span only); like CPUProfile,
// from the STOCK_PPROF_ADDR listener.
func (c *Client) AllocProfile(ctx context.Context, seconds int) ([]byte, error) {
	var raw []byte
	_, err := c.call(ctx, http.MethodGet, api.AllocProfile+"?seconds="+strconv.Itoa(seconds), nil, nil, &raw)
	return raw, err
}

// ExecutionTrace records the instance's execution trace (`go tool trace`)
// for seconds and returns it; like CPUProfile, from the STOCK_PPROF_ADDR
// listener.
func (c *Client) ExecutionTrace(ctx context.Context, seconds int) ([]byte, error) {
	var raw []byte
	_, err := c.call(ctx, http.MethodGet, api.ExecutionTrace+"?seconds="+strconv.Itoa(seconds), nil, nil, &raw)
	return raw, err
}
