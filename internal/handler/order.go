package handler

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/seckill/stock/internal/api"
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
	o, replayed, err := h.svc.Place(c.Request.Context(), service.PlaceRequest{Buyer: buyer(c), Key: key, SKU: *req.SKU, Quantity: q})
	if err != nil {
		_ = c.Error(err)
		return
	}
	c.Header("Location", api.Path(api.Order, strconv.FormatInt(o.ID, 10)))
	if replayed {
		c.Header("Idempotent-Replayed", "true")
		writeJSON(c, http.StatusOK, o)
		return
	}
	writeJSON(c, http.StatusCreated, o)
}

// orderID is the route's order id, or an ErrInvalid it attached.
func orderID(c *gin.Context) (int64, bool) {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id <= 0 {
		_ = c.Error(fmt.Errorf("%w: order id must be a positive integer", service.ErrInvalid))
		return 0, false
	}
	return id, true
}

func (h *Handler) getOrder(c *gin.Context) {
	id, ok := orderID(c)
	if !ok {
		return
	}
	o, err := h.svc.Order(c.Request.Context(), buyer(c), id)
	if err != nil {
		_ = c.Error(err)
		return
	}
	writeJSON(c, http.StatusOK, o)
}

// orderPage is a page of the caller's orders; NextCursor, when set, fetches
// the next (older) page.
type orderPage struct {
	Orders     []service.Order `json:"orders"`
	NextCursor string          `json:"next_cursor,omitempty"`
}

func (h *Handler) listOrders(c *gin.Context) {
	limit := 20
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			_ = c.Error(fmt.Errorf("%w: limit must be an integer from 1 to %d", service.ErrInvalid, service.MaxPage))
			return
		}
		limit = n
	}
	var before int64
	if v := c.Query("cursor"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			_ = c.Error(fmt.Errorf("%w: the cursor is not valid", service.ErrInvalid))
			return
		}
		before = n
	}
	os, err := h.svc.Orders(c.Request.Context(), buyer(c),
		service.OrderFilter{SKU: c.Query("sku"), Status: service.Status(c.Query("status")), Before: before, Limit: limit})
	if err != nil {
		_ = c.Error(err)
		return
	}
	page := orderPage{Orders: os}
	if page.Orders == nil {
		page.Orders = []service.Order{}
	}
	if len(os) == limit {
		page.NextCursor = strconv.FormatInt(os[len(os)-1].ID, 10)
	}
	writeJSON(c, http.StatusOK, page)
}

// confirmRequest is confirm's optional body.
type confirmRequest struct {
	PaymentRef *string `json:"payment_ref"`
}

// confirmOrder records a payment: the body is optional, and without one
// (no Content-Length, or 0) no Content-Type is needed.
func (h *Handler) confirmOrder(c *gin.Context) {
	id, ok := orderID(c)
	if !ok {
		return
	}
	var req confirmRequest
	if c.Request.ContentLength != 0 {
		if err := decodeJSON(c, h.maxBody, &req); err != nil {
			_ = c.Error(err)
			return
		}
	}
	ref := ""
	if req.PaymentRef != nil {
		if ref = *req.PaymentRef; ref == "" {
			_ = c.Error(fmt.Errorf("%w: payment_ref must be 1-64 characters of [A-Za-z0-9._:-]", service.ErrInvalid))
			return
		}
	}
	o, err := h.svc.Confirm(c.Request.Context(), id, ref)
	if err != nil {
		_ = c.Error(err)
		return
	}
	writeJSON(c, http.StatusOK, o)
}

// cancelOrder gives up a reserved order of the caller (any buyer's, for
// the admin). A body, if any, is not read.
func (h *Handler) cancelOrder(c *gin.Context) {
	id, ok := orderID(c)
	if !ok {
		return
	}
	o, err := h.svc.Cancel(c.Request.Context(), buyer(c), id)
	if err != nil {
		_ = c.Error(err)
		return
	}
	writeJSON(c, http.StatusOK, o)
}
