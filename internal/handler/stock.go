package handler

import (
	"crypto/subtle"
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
	Available     *int64 `json:"available"`
	PerBuyerLimit *int64 `json:"per_buyer_limit"`
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
	var limit int64 // absent: no limit
	if req.PerBuyerLimit != nil {
		limit = *req.PerBuyerLimit
	}
	st, err := h.svc.SetStock(c.Request.Context(), c.Param("sku"), *req.Available, limit)
	if err != nil {
		_ = c.Error(err)
		return
	}
	h.log.InfoContext(c.Request.Context(), "admin: stock set", "sku", c.Param("sku"), "available", st.Available, "per_buyer_limit", st.PerBuyerLimit, "sold", st.Sold, "version", st.Version,
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
// case-insensitive, RFC 9110). Each failed authentication is logged (within
// the 4xx log budget).
func (h *Handler) admin(c *gin.Context) {
	if h.adminToken == "" {
		_ = c.Error(errAdminDisabled)
		c.Abort()
		return
	}
	got, ok := bearer(c.GetHeader("Authorization"))
	if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(h.adminToken)) != 1 {
		if ok, n := h.budget.take(time.Now()); ok {
			h.log.WarnContext(c.Request.Context(), "admin: authentication failed", "route", c.FullPath(), "method", methodLabel(c.Request.Method),
				"token_sent", got != "", "request_id", RequestID(c.Request.Context()), "client_ip", c.ClientIP(),
				"suppressed_4xx_lines", n)
		}
		c.Header("WWW-Authenticate", `Bearer realm="stock-admin"`)
		_ = c.Error(errUnauthorized)
		c.Abort()
		return
	}
	c.Next()
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
