package handler

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/seckill/stock/internal/service"
)

// Problem is an RFC 9457 problem details body.
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
	// Limit and Remaining, for limit-exceeded: the SKU's per-buyer limit and
	// what the buyer may still order.
	Limit     *int64 `json:"limit,omitempty"`
	Remaining *int64 `json:"remaining,omitempty"`
	// MaxUnpaidPerBuyer and Unpaid, for unpaid-limit: the SKU's cap on one
	// buyer's reserved, unpaid units and what the buyer has unpaid now.
	MaxUnpaidPerBuyer *int64 `json:"max_unpaid_per_buyer,omitempty"`
	Unpaid            *int64 `json:"unpaid,omitempty"`
	// StartsAt, for sale-not-started: when the sale opens (RFC 3339 UTC).
	StartsAt string `json:"starts_at,omitempty"`
}

// ProblemBase prefixes every problem type URI; the last segment is the stable kind.
const ProblemBase = "https://stock.example/problems/"

// Errors of the HTTP layer itself.
var (
	errMalformed           = errors.New("handler: malformed request body")
	errTooLarge            = errors.New("handler: request body too large")
	errMediaType           = errors.New("handler: unsupported media type")
	errUnauthorized        = errors.New("handler: missing or wrong admin token")
	errAdminDisabled       = errors.New("handler: admin API disabled (no STOCK_ADMIN_TOKEN)")
	errPaymentUnauthorized = errors.New("handler: missing or wrong payment token")
	errPaymentDisabled     = errors.New("handler: confirm disabled (no STOCK_PAYMENT_TOKEN or STOCK_ADMIN_TOKEN)")
	errRouteNotFound       = errors.New("handler: no such route")
	errMethodNotAllow      = errors.New("handler: method not allowed")
	errBodyTimeout         = errors.New("handler: request body not received in time")
	errOverloaded          = errors.New("handler: too many requests in flight")
	errRateLimited         = errors.New("handler: rate limit exceeded")
)

type kind struct {
	err       error
	status    int
	kind      string
	title     string
	retry     bool // send Retry-After
	close     bool // close the connection after the answer
	showCause bool // the error text is safe and useful for the client
}

// problems is the one table from error to status and problem type. The first
// match wins; anything unmatched is a 500 whose detail is logged, not sent.
var problems = []kind{
	{err: service.ErrInvalid, status: http.StatusBadRequest, kind: "invalid-request", title: "The request is invalid", showCause: true},
	{err: errMalformed, status: http.StatusBadRequest, kind: "invalid-request", title: "The request is invalid", showCause: true},
	{err: errBodyTimeout, status: http.StatusRequestTimeout, kind: "request-timeout", title: "The request body was not received in time", close: true},
	{err: errTooLarge, status: http.StatusRequestEntityTooLarge, kind: "body-too-large", title: "The request body is too large", showCause: true},
	{err: errMediaType, status: http.StatusUnsupportedMediaType, kind: "unsupported-media-type", title: "The body must be application/json", showCause: true},
	{err: errInvalidToken, status: http.StatusUnauthorized, kind: "invalid-token", title: "A valid buyer bearer token is required"},
	{err: errUnauthorized, status: http.StatusUnauthorized, kind: "unauthorized", title: "Admin token missing or wrong"},
	{err: errAdminDisabled, status: http.StatusForbidden, kind: "admin-disabled", title: "The admin API is disabled"},
	{err: errCORSRefused, status: http.StatusForbidden, kind: "cors-origin-refused", title: "This origin may not call the API from a browser"},
	{err: errPaymentUnauthorized, status: http.StatusUnauthorized, kind: "payment-unauthorized", title: "Payment or admin token missing or wrong"},
	{err: errPaymentDisabled, status: http.StatusForbidden, kind: "payment-disabled", title: "Confirming payments is disabled"},
	{err: errRouteNotFound, status: http.StatusNotFound, kind: "not-found", title: "No such resource"},
	{err: errMethodNotAllow, status: http.StatusMethodNotAllowed, kind: "method-not-allowed", title: "Method not allowed"},
	{err: service.ErrUnknownSKU, status: http.StatusNotFound, kind: "unknown-sku", title: "Unknown SKU"},
	{err: service.ErrOrderNotFound, status: http.StatusNotFound, kind: "order-not-found", title: "No such order"},
	{err: service.ErrSoldOut, status: http.StatusConflict, kind: "sold-out", title: "Sold out"},
	{err: service.ErrLimitExceeded, status: http.StatusConflict, kind: "limit-exceeded", title: "The order would exceed the per-buyer limit of this SKU"},
	{err: service.ErrUnpaidLimit, status: http.StatusConflict, kind: "unpaid-limit", title: "The order would exceed the unpaid units one buyer may have of this SKU"},
	{err: service.ErrSaleNotStarted, status: http.StatusConflict, kind: "sale-not-started", title: "The sale has not started", showCause: true},
	{err: service.ErrSaleEnded, status: http.StatusConflict, kind: "sale-ended", title: "The sale has ended", showCause: true},
	{err: service.ErrOrderExpired, status: http.StatusConflict, kind: "order-expired", title: "The order expired before it was paid", showCause: true},
	{err: service.ErrOrderCancelled, status: http.StatusConflict, kind: "order-cancelled", title: "The order was cancelled", showCause: true},
	{err: service.ErrOrderConfirmed, status: http.StatusConflict, kind: "order-confirmed", title: "The order is confirmed (paid) and cannot be cancelled"},
	{err: service.ErrOrderAlreadyPaid, status: http.StatusConflict, kind: "order-already-paid", title: "The order is already paid by another payment", showCause: true},
	{err: service.ErrKeyReused, status: http.StatusUnprocessableEntity, kind: "idempotency-key-reused", title: "Idempotency-Key reused with a different request"},
	{err: errRateLimited, status: http.StatusTooManyRequests, kind: "rate-limited", title: "Too many requests from this client, retry later"},
	{err: errOverloaded, status: http.StatusServiceUnavailable, kind: "overloaded", title: "The instance is serving too many requests, retry later", retry: true},
	{err: service.ErrInProgress, status: http.StatusConflict, kind: "request-in-progress", title: "A request with this Idempotency-Key is in progress; retry with the same key", retry: true},
	{err: service.ErrBusy, status: http.StatusTooManyRequests, kind: "busy", title: "Too busy, retry later", retry: true},
	{err: service.ErrLockLost, status: http.StatusServiceUnavailable, kind: "lock-lost", title: "The stock lock was lost; the order was not placed, retry with the same key", retry: true},
	{err: service.ErrUnavailable, status: http.StatusServiceUnavailable, kind: "unavailable", title: "A dependency is unavailable, retry later", retry: true},
}

var internalProblem = kind{status: http.StatusInternalServerError, kind: "internal", title: "Internal error"}

func classify(err error) kind {
	for _, k := range eventProblems {
		if errors.Is(err, k.err) {
			return k
		}
	}
	for _, k := range problems {
		if errors.Is(err, k.err) {
			return k
		}
	}
	return internalProblem
}

// problemMiddleware turns the error a handler attached with c.Error into a
// problem response: the only place errors become HTTP statuses.
func problemMiddleware(log *slog.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		c.Next()
		if len(c.Errors) == 0 || c.Writer.Written() {
			return
		}
		err := c.Errors.Last().Err
		k := classify(err)
		p := Problem{Type: ProblemBase + k.kind, Title: k.title, Status: k.status, Instance: instance(c)}
		if k.showCause {
			p.Detail = cut(clientDetail(err, k.err), maxEcho)
		}
		var le *service.LimitError
		if errors.As(err, &le) {
			limit, left := le.Limit, le.Remaining()
			p.Limit, p.Remaining = &limit, &left
			p.Detail = fmt.Sprintf("at most %d per buyer; %d left for you", limit, left)
		}
		var ue *service.UnpaidError
		if errors.As(err, &ue) {
			capUnits, unpaid := ue.Cap, ue.Unpaid
			p.MaxUnpaidPerBuyer, p.Unpaid = &capUnits, &unpaid
			p.Detail = fmt.Sprintf("at most %d unpaid units per buyer and you have %d: pay or cancel an order first", capUnits, unpaid)
		}
		var closed *service.SaleClosedError
		if errors.As(err, &closed) && !closed.Ended {
			p.StartsAt = closed.StartsAt.Format(time.RFC3339Nano)
			c.Header("Retry-After", strconv.FormatInt(closed.RetryAfter(), 10))
		}
		if k.status >= 500 && !errors.Is(err, errOverloaded) {
			log.ErrorContext(c.Request.Context(), "request failed", "method", methodLabel(c.Request.Method), "route", c.FullPath(), "status", k.status,
				"request_id", RequestID(c.Request.Context()), "err", err)
		}
		if k.retry {
			c.Header("Retry-After", "1")
		}
		if k.close {
			c.Header("Connection", "close")
		}
		writeProblem(c, p)
	}
}

// clientDetail is the part of err written for the client: the text after
// the sentinel's own message (errors here are built as "<sentinel>: <detail>"),
// so no package prefix or internal error reaches the client.
func clientDetail(err, sentinel error) string {
	msg, prefix := err.Error(), sentinel.Error()
	if i := strings.Index(msg, prefix+": "); i >= 0 {
		return msg[i+len(prefix)+2:]
	}
	return ""
}

// writeProblem writes p as the answer. A problem with no detail on a route
// without parameters (its path is the route) is encoded once and then
// served from problemBodies: a flood of the same refusal (sold out, busy)
// does not encode it again.
func writeProblem(c *gin.Context, p Problem) {
	c.Header("Content-Type", "application/problem+json")
	c.Status(p.Status)
	if p.Detail != "" || p.Limit != nil || p.Remaining != nil || p.StartsAt != "" || p.Instance != c.FullPath() {
		_ = jsonEncoder(c.Writer).Encode(p)
		return
	}
	key := problemKey{p.Type, p.Status, p.Instance}
	body, ok := problemBodies.Load(key)
	if !ok {
		var b bytes.Buffer
		_ = jsonEncoder(&b).Encode(p)
		body, _ = problemBodies.LoadOrStore(key, b.Bytes())
	}
	b, _ := body.([]byte)
	_, _ = c.Writer.Write(b)
}

// problemKey names a problem body without detail: its type (which fixes the
// title), status and route.
type problemKey struct {
	typ    string
	status int
	route  string
}

// problemBodies caches the encoded problem bodies without detail, by
// problemKey: bounded by the problem types times the routes.
var problemBodies sync.Map

// maxEcho is the longest `instance` or `detail` a problem carries (the API
// document's bound): both may echo what the client sent.
const maxEcho = 2048

// instance is a problem's `instance`: the request's path as a URI reference
// (escaped, as it was sent), at most maxEcho bytes, never ending inside a
// %XX escape.
func instance(c *gin.Context) string {
	p := c.Request.URL.EscapedPath()
	if len(p) <= maxEcho {
		return p
	}
	p = p[:maxEcho]
	if i := strings.LastIndexByte(p, '%'); i >= len(p)-2 {
		p = p[:i]
	}
	return p
}

// cut is s in at most n bytes, cut at a character boundary, with any
// invalid UTF-8 replaced first.
func cut(s string, n int) string {
	s = strings.ToValidUTF8(s, "\ufffd")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
