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
	key := c.GetHeader("Idempotency-Key")
	if key == "" {
		_ = c.Error(fmt.Errorf("%w: the Idempotency-Key header is required", service.ErrInvalid))
		return
	}
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
	case *req.Quantity < 1 || *req.Quantity > 1<<31-1:
		_ = c.Error(fmt.Errorf("%w: quantity must be a positive integer", service.ErrInvalid))
		return
	}
	o, replayed, err := h.svc.Place(c.Request.Context(), service.PlaceRequest{Key: key, SKU: *req.SKU, Quantity: int(*req.Quantity)})
	if err != nil {
		_ = c.Error(err)
		return
	}
	c.Header("Location", "/v1/orders/"+strconv.FormatInt(o.ID, 10))
	if replayed {
		c.Header("Idempotent-Replayed", "true")
		c.JSON(http.StatusOK, o)
		return
	}
	c.JSON(http.StatusCreated, o)
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
	c.JSON(http.StatusOK, o)
}
