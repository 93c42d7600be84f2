package driver

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/seckill/stock/client"
)

// Audit is the body of GET /v1/admin/stock/{sku}/audit, as the client reads it.
type Audit = client.Audit

// newTransport is the HTTP transport of a run: never through a proxy
// (loopback only), conns connections kept per instance, and the
// X-Forwarded-For a buyer's context carries (withClientIP).
func newTransport(conns int) *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        2 * conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     60 * time.Second,
		DisableCompression:  true,
	}
}

// newClients is one client per base URL, without a token, all sending over
// tr with the per-request timeout.
func newClients(urls []string, tr http.RoundTripper, timeout time.Duration) ([]*client.Client, error) {
	hc := &http.Client{Transport: clientIPTransport{tr}, Timeout: timeout}
	out := make([]*client.Client, len(urls))
	for i, u := range urls {
		c, err := client.New(u, client.WithHTTPClient(hc))
		if err != nil {
			return nil, err
		}
		out[i] = c
	}
	return out, nil
}

// clientIPKey carries the address a request claims to come from.
type clientIPKey struct{}

// withClientIP makes the requests sent with ctx claim to come from ip
// (X-Forwarded-For, as a proxy in front of the instances would set it);
// "" claims nothing. The load pretends to be many clients this way; the
// API itself has no such parameter.
func withClientIP(ctx context.Context, ip string) context.Context {
	if ip == "" {
		return ctx
	}
	return context.WithValue(ctx, clientIPKey{}, ip)
}

// clientIPTransport sets X-Forwarded-For from the request's context.
type clientIPTransport struct{ next http.RoundTripper }

func (t clientIPTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ip, ok := req.Context().Value(clientIPKey{}).(string)
	if !ok {
		return t.next.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	req.Header.Set("X-Forwarded-For", ip)
	return t.next.RoundTrip(req)
}

// answer is what a request's answer counts as: its status, the kind of
// its problem document ("" for none) and its Retry-After.
type answer struct {
	status     int
	problem    string
	retryAfter time.Duration
}

// answerOf reads a client call's outcome: a nil error is ok (the status of
// the call's 2xx answer); a *client.Problem is its status, kind and
// Retry-After (an answer that was not a problem document has no kind); any
// other error is no answer, and answered is false.
func answerOf(ok int, err error) (a answer, answered bool) {
	if err == nil {
		return answer{status: ok}, true
	}
	var p *client.Problem
	if !errors.As(err, &p) {
		return answer{}, false
	}
	a = answer{status: p.Status, retryAfter: p.RetryAfter}
	if p.Type != "about:blank" {
		a.problem = p.Kind()
	}
	return a, true
}

// PlacedStatus is the status of a placed order's answer: 200 for a replay
// of an order placed before, 201 for a new one.
func PlacedStatus(p client.Placed) int {
	if p.Replayed {
		return http.StatusOK
	}
	return http.StatusCreated
}
