package handler

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/seckill/stock/internal/service"
)

type orderRequest struct {
	SKU      *string `json:"sku"`
	Quantity *int64  `json:"quantity"`
}

func (h *Handler) placeOrder(c *gin.Context) {
	keys := c.Request.Header.Values("Idempotency-Key")
	switch {
	case len(keys) == 0 || keys[0] == "":
		_ = c.Error(fmt.Errorf("%w: the Idempotency-Key header is required", service.ErrInvalid))
		return
	case len(keys) > 1:
		// A proxy may keep the first or the last: refuse rather than guess.
		_ = c.Error(fmt.Errorf("%w: send the Idempotency-Key header once", service.ErrInvalid))
		return
	}
	key := keys[0]
	var req orderRequest
	if err := decodeJSON(c, h.maxBody, &req); err != nil {
		_ = c.Error(err)
		return
	}
	switch {
	case req.SKU == nil:
		_ = c.Error(fmt.Errorf("%w: sku is required", service.ErrInvalid))
		return
	case req.Quantity == nil:
		_ = c.Error(fmt.Errorf("%w: quantity is required", service.ErrInvalid))
		return
	}
	// Out-of-range values are clamped into one the service refuses with its
	// own rule (1..STOCK_MAX_QUANTITY), so the client is told the real range.
	q := int(min(max(*req.Quantity, 0), 1<<31))
	o, replayed, err := h.svc.Place(c.Request.Context(), service.PlaceRequest{Key: key, SKU: *req.SKU, Quantity: q})
	if err != nil {
		_ = c.Error(err)
		return
	}
	c.Header("Location", "/v1/orders/"+strconv.FormatInt(o.ID, 10))
	if replayed {
		c.Header("Idempotent-Replayed", "true")
		writeJSON(c, http.StatusOK, o)
		return
	}
	writeJSON(c, http.StatusCreated, o)
}

func (h *Handler) getOrder(c *gin.Context) {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id <= 0 {
		_ = c.Error(fmt.Errorf("%w: order id must be a positive integer", service.ErrInvalid))
		return
	}
	o, err := h.svc.Order(c.Request.Context(), id)
	if err != nil {
		_ = c.Error(err)
		return
	}
	writeJSON(c, http.StatusOK, o)
}
