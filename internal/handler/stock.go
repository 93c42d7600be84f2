package handler

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill/stock/internal/service"
)

func (h *Handler) getStock(c *gin.Context) {
	st, err := h.svc.Stock(c.Request.Context(), c.Param("sku"))
	if err != nil {
		_ = c.Error(err)
		return
	}
	writeJSON(c, http.StatusOK, st)
}

type setStockRequest struct {
	Available            *int64     `json:"available"`
	PerBuyerLimit        *int64     `json:"per_buyer_limit"`
	PaymentWindowSeconds *int64     `json:"payment_window_seconds"`
	SaleStartsAt         setInstant `json:"sale_starts_at"`
	SaleEndsAt           setInstant `json:"sale_ends_at"`
	MaxUnpaidPerBuyer    setUnpaid  `json:"max_unpaid_per_buyer"`
}

// setInstant is a schedule field of a PUT: left out, it keeps the stored
// value (Set false); null clears it; an RFC 3339 time sets it.
type setInstant service.TimeSetting

func (s *setInstant) UnmarshalJSON(b []byte) error {
	s.Set = true
	if err := s.At.UnmarshalJSON(b); err != nil {
		return fmt.Errorf("%w: sale_starts_at and sale_ends_at must be RFC 3339 times or null", service.ErrInvalid)
	}
	return nil
}

// setUnpaid is max_unpaid_per_buyer of a PUT: left out, the default (Set
// false); null, no cap (Set, Cap 0); an integer from 1 to
// service.MaxUnpaidCap, that cap.
type setUnpaid service.UnpaidSetting

func (s *setUnpaid) UnmarshalJSON(b []byte) error {
	s.Set, s.Cap = true, 0
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	if err := json.Unmarshal(b, &s.Cap); err != nil || s.Cap < 1 || s.Cap > service.MaxUnpaidCap {
		return fmt.Errorf("%w: max_unpaid_per_buyer must be an integer from 1 to %d, or null (no cap)", service.ErrInvalid, service.MaxUnpaidCap)
	}
	return nil
}

func (h *Handler) setStock(c *gin.Context) {
	var req setStockRequest
	if err := decodeJSON(c, h.maxBody, &req); err != nil {
		_ = c.Error(err)
		return
	}
	if req.Available == nil {
		_ = c.Error(fmt.Errorf("%w: available is required", service.ErrInvalid))
		return
	}
	set := service.StockSetting{Available: *req.Available} // absent: no limit, no payment window
	if req.PerBuyerLimit != nil {
		set.PerBuyerLimit = *req.PerBuyerLimit
	}
	if req.PaymentWindowSeconds != nil {
		set.PaymentWindowSeconds = *req.PaymentWindowSeconds
	}
	set.StartsAt, set.EndsAt = service.TimeSetting(req.SaleStartsAt), service.TimeSetting(req.SaleEndsAt)
	set.MaxUnpaid = service.UnpaidSetting(req.MaxUnpaidPerBuyer)
	st, err := h.svc.SetStock(c.Request.Context(), c.Param("sku"), set)
	if err != nil {
		_ = c.Error(err)
		return
	}
	h.log.InfoContext(c.Request.Context(), "admin: stock set", "sku", c.Param("sku"), "available", st.Available, "per_buyer_limit", st.PerBuyerLimit,
		"payment_window_seconds", st.PaymentWindowSeconds, "sale_starts_at", st.SaleStartsAt, "sale_ends_at", st.SaleEndsAt,
		"max_unpaid_per_buyer", int64(st.MaxUnpaidPerBuyer), "sold", st.Sold, "version", st.Version,
		"request_id", RequestID(c.Request.Context()), "client_ip", c.ClientIP())
	writeJSON(c, http.StatusOK, st)
}

func (h *Handler) audit(c *gin.Context) {
	a, err := h.svc.Audit(c.Request.Context(), c.Param("sku"))
	if err != nil {
		_ = c.Error(err)
		return
	}
	if a.Problems == nil {
		a.Problems = []string{} // none: [], not null
	}
	writeJSON(c, http.StatusOK, a)
}

// admin guards the admin routes: 403 when no token is configured, 401 unless
// the bearer token matches (compared in constant time; the scheme name is
// case-insensitive, RFC 9110), 429 for a client past its budget of failed
// token checks (see throttled). Each failed authentication is logged (within
// the 4xx log budget).
func (h *Handler) admin(c *gin.Context) {
	if h.adminToken == "" {
		_ = c.Error(errAdminDisabled)
		c.Abort()
		return
	}
	got, sent := bearer(c.GetHeader("Authorization"))
	ok := sent && tokenIs(got, h.adminToken)
	if h.throttled(c, sent && !ok) {
		return
	}
	if !ok {
		h.refuse(c, "admin", got, errUnauthorized)
		return
	}
	c.Next()
}

// payment guards confirm: 403 when neither the payment nor the admin token
// is configured, 401 unless the bearer token is one of them (each compared
// in constant time), 429 as the admin routes. Buyer tokens are never
// accepted.
func (h *Handler) payment(c *gin.Context) {
	if h.paymentToken == "" && h.adminToken == "" {
		_ = c.Error(errPaymentDisabled)
		c.Abort()
		return
	}
	got, sent := bearer(c.GetHeader("Authorization"))
	ok := sent && (tokenIs(got, h.paymentToken) || tokenIs(got, h.adminToken))
	if h.throttled(c, sent && !ok) {
		return
	}
	if !ok {
		h.refuse(c, "payment", got, errPaymentUnauthorized)
		return
	}
	c.Next()
}

// refuse answers a failed authentication of realm ("admin", "payment") with
// err (a 401) and its WWW-Authenticate, logged within the 4xx log budget.
func (h *Handler) refuse(c *gin.Context, realm, got string, err error) {
	if ok, n := h.budget.take(time.Now()); ok {
		h.log.WarnContext(c.Request.Context(), realm+": authentication failed", "route", c.FullPath(), "method", methodLabel(c.Request.Method),
			"token_sent", got != "", "request_id", RequestID(c.Request.Context()), "client_ip", c.ClientIP(),
			"suppressed_4xx_lines", n)
	}
	c.Header("WWW-Authenticate", `Bearer realm="stock-`+realm+`"`)
	_ = c.Error(err)
	c.Abort()
}

// tokenIs reports whether got is want, a configured (non-empty) token,
// compared in constant time.
func tokenIs(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// bearer returns the credentials of an Authorization header with the Bearer
// scheme, matched case-insensitively.
func bearer(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimLeft(token, " ")
	return token, token != ""
}
