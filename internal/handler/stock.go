package handler

import (
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/seckill/stock/internal/service"
)

func (h *Handler) getStock(c *gin.Context) {
	st, err := h.svc.Stock(c.Request.Context(), c.Param("sku"))
	if err != nil {
		_ = c.Error(err)
		return
	}
	c.JSON(http.StatusOK, st)
}

type setStockRequest struct {
	Available *int64 `json:"available"`
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
	st, err := h.svc.SetStock(c.Request.Context(), c.Param("sku"), *req.Available)
	if err != nil {
		_ = c.Error(err)
		return
	}
	c.JSON(http.StatusOK, st)
}

func (h *Handler) audit(c *gin.Context) {
	a, err := h.svc.Audit(c.Request.Context(), c.Param("sku"))
	if err != nil {
		_ = c.Error(err)
		return
	}
	c.JSON(http.StatusOK, a)
}

// admin guards the admin routes: 403 when no token is configured, 401 unless
// the bearer token matches (compared in constant time).
func (h *Handler) admin(c *gin.Context) {
	if h.adminToken == "" {
		_ = c.Error(errAdminDisabled)
		c.Abort()
		return
	}
	got, ok := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(h.adminToken)) != 1 {
		c.Header("WWW-Authenticate", `Bearer realm="stock-admin"`)
		_ = c.Error(errUnauthorized)
		c.Abort()
		return
	}
	c.Next()
}
