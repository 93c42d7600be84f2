// Package hooksink is the webhook sink of the outbox relay: it POSTs each
// event's JSON to one URL, signed with [events.Sign], and reports whether
// the receiver took it. Start at [New], with the URL, secret and timeout of
// STOCK_WEBHOOK_URL, STOCK_WEBHOOK_SECRET and STOCK_WEBHOOK_TIMEOUT.
//
// A 2xx answer is a delivery. Any other status (a redirect too: none is
// followed, so an event never lands somewhere the operator did not name),
// a transport error or no answer within the timeout is a failed attempt;
// retrying it, with backoff, is the relay's part. Receivers check the
// signature with [events.Verify] and drop the IDs they have handled, since
// delivery is at least once.
package hooksink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/seckill/stock/events"
)

// userAgent names the sender and the version of the webhook format.
const userAgent = "stock-webhook/1"

// drainLimit is how much of an answer's body Send reads, so that the
// connection can carry the next event; a longer body costs a new
// connection, never an unbounded read.
const drainLimit = 4 << 10

// maxIdle is the idle connections kept to the receiver: the relay sends
// for many SKUs at once, and the default of 2 would redial for most.
const maxIdle = 32

// Config is the webhook sink's configuration.
type Config struct {
	// URL receives the POSTs: an absolute http or https URL.
	URL string
	// Secret keys the signature; at least events.MinSecretLen bytes.
	Secret string
	// Timeout bounds one attempt, from dialling to the end of the answer.
	Timeout time.Duration
}

// Sink POSTs events to a webhook receiver. It is safe for concurrent use.
type Sink struct {
	url    string
	host   string
	secret string
	client *http.Client
}

// StatusError is a receiver's answer other than 2xx; find it with
// errors.As.
type StatusError struct {
	Code int
}

// Error names the status code.
func (e *StatusError) Error() string {
	return "hooksink: receiver answered status " + strconv.Itoa(e.Code)
}

// New returns a sink for cfg. It returns an error naming the variable
// (STOCK_WEBHOOK_URL, STOCK_WEBHOOK_SECRET or STOCK_WEBHOOK_TIMEOUT) whose
// value is unusable; the error never repeats the URL or the secret.
func New(cfg Config) (*Sink, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("hooksink: STOCK_WEBHOOK_URL: must be an absolute http or https URL")
	}
	if len(cfg.Secret) < events.MinSecretLen {
		return nil, fmt.Errorf("hooksink: STOCK_WEBHOOK_SECRET: must be at least %d bytes", events.MinSecretLen)
	}
	if cfg.Timeout <= 0 {
		return nil, errors.New("hooksink: STOCK_WEBHOOK_TIMEOUT: must be more than 0")
	}
	// The client's Timeout bounds each attempt whole (dial, TLS, headers
	// and the drained body), so the transport sets no timeouts of its own
	// that could end an attempt with a different error.
	transport := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        maxIdle,
		MaxIdleConnsPerHost: maxIdle,
		IdleConnTimeout:     90 * time.Second,
	}
	return &Sink{
		url:    cfg.URL,
		host:   u.Host,
		secret: cfg.Secret,
		client: &http.Client{
			Transport: transport,
			Timeout:   cfg.Timeout,
			// A redirect is answered as it came: Send counts it a failure.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}, nil
}

// Name returns "webhook".
func (s *Sink) Name() string { return "webhook" }

// Send POSTs body, the JSON of e, signed now, and returns nil when the
// receiver answered 2xx. Any other answer is a *StatusError; a transport
// error, or no answer within the timeout or before ctx ends, is returned
// wrapped (errors.Is finds context.DeadlineExceeded on a timeout). The
// error names the receiver's host, never its path or query, which may
// hold a token.
func (s *Sink) Send(ctx context.Context, e events.Event, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("hooksink: event %s: %w", e.ID, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set(events.HeaderID, e.ID)
	req.Header.Set(events.HeaderSignature, events.Sign(s.secret, body, time.Now()))

	resp, err := s.client.Do(req)
	if err != nil {
		// *url.Error repeats the whole URL; keep only what went wrong.
		if uerr, ok := errors.AsType[*url.Error](err); ok {
			err = uerr.Err
		}
		return fmt.Errorf("hooksink: POST event %s to %s: %w", e.ID, s.host, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &StatusError{Code: resp.StatusCode}
	}
	return nil
}

// Close closes the idle connections to the receiver; call it once the
// relay has stopped. A Send after Close still works, on a new connection.
func (s *Sink) Close() { s.client.CloseIdleConnections() }
