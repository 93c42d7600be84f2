package client

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The kinds of problem the service answers with (the last segment of a
// problem's type URI); the API reference lists what each means.
const (
	KindInvalidRequest       = "invalid-request"
	KindRequestTimeout       = "request-timeout"
	KindBodyTooLarge         = "body-too-large"
	KindUnsupportedMediaType = "unsupported-media-type"
	KindInvalidToken         = "invalid-token"
	KindUnauthorized         = "unauthorized"
	KindAdminDisabled        = "admin-disabled"
	KindCORSOriginRefused    = "cors-origin-refused"
	KindPaymentUnauthorized  = "payment-unauthorized"
	KindPaymentDisabled      = "payment-disabled"
	KindNotFound             = "not-found"
	KindMethodNotAllowed     = "method-not-allowed"
	KindUnknownSKU           = "unknown-sku"
	KindOrderNotFound        = "order-not-found"
	KindSoldOut              = "sold-out"
	KindLimitExceeded        = "limit-exceeded"
	KindUnpaidLimit          = "unpaid-limit"
	KindSaleNotStarted       = "sale-not-started"
	KindSaleEnded            = "sale-ended"
	KindOrderExpired         = "order-expired"
	KindOrderCancelled       = "order-cancelled"
	KindOrderConfirmed       = "order-confirmed"
	KindOrderAlreadyPaid     = "order-already-paid"
	KindKeyReused            = "idempotency-key-reused"
	KindRateLimited          = "rate-limited"
	KindOverloaded           = "overloaded"
	KindRequestInProgress    = "request-in-progress"
	KindBusy                 = "busy"
	KindLockLost             = "lock-lost"
	KindUnavailable          = "unavailable"
	KindInternal             = "internal"
	KindEventNotFound        = "event-not-found"
	KindEventNotDelivered    = "event-not-delivered"
	KindWebhookDisabled      = "webhook-disabled"
)

// Problem is a non-2xx answer: the service's problem document, or, for an
// answer that is not one (a proxy's 502 page, say), its status alone with
// Type "about:blank" and the status text as Title.
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
	// Limit and Remaining come with limit-exceeded: the SKU's per-buyer
	// limit and what the buyer may still order.
	Limit     *int64 `json:"limit,omitempty"`
	Remaining *int64 `json:"remaining,omitempty"`
	// MaxUnpaidPerBuyer and Unpaid come with unpaid-limit: the SKU's cap on
	// one buyer's reserved, unpaid units and what the buyer has unpaid.
	MaxUnpaidPerBuyer *int64 `json:"max_unpaid_per_buyer,omitempty"`
	Unpaid            *int64 `json:"unpaid,omitempty"`
	// StartsAt comes with sale-not-started: when the sale opens.
	StartsAt *time.Time `json:"starts_at,omitempty"`
	// RetryAfter is the answer's Retry-After in whole seconds (0: none).
	RetryAfter time.Duration `json:"-"`
}

// Error is the status, the kind and the detail.
func (p *Problem) Error() string {
	s := fmt.Sprintf("stock: %d %s", p.Status, p.Kind())
	if p.Detail != "" {
		s += ": " + p.Detail
	}
	return s
}

// Kind is the last segment of the type URI (e.g. "sold-out"), or
// "about:blank" for an answer that was not a problem document.
func (p *Problem) Kind() string { return p.Type[strings.LastIndexByte(p.Type, '/')+1:] }

// Temporary reports whether the same request may succeed later, sent
// again with the same Idempotency-Key: the answers that carry Retry-After
// (busy, in progress, rate-limited, overloaded, lock lost, unavailable)
// and a gateway's 502, 503 or 504; and sale-not-started, once its
// RetryAfter has passed.
func (p *Problem) Temporary() bool {
	switch p.Status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return p.Kind() == KindRequestInProgress || p.Kind() == KindSaleNotStarted
}

// problemOf reads a non-2xx answer whose body is raw.
func problemOf(resp *http.Response, raw []byte) *Problem {
	p := &Problem{}
	if json.Unmarshal(raw, p) != nil || p.Type == "" {
		p = &Problem{Type: "about:blank", Title: http.StatusText(resp.StatusCode)}
	}
	p.Status = resp.StatusCode
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		p.RetryAfter = time.Duration(s) * time.Second
	}
	return p
}
