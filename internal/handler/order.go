package handler

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"

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
	limit, before, ok := pageQuery(c, "cursor")
	if !ok {
		return
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

// pageQuery is a list's `limit` (default 20) and its cursor, the query
// parameter named cursor (0 when absent), or false with an ErrInvalid
// attached. The limit's range is the service's to check.
func pageQuery(c *gin.Context, cursor string) (limit int, id int64, ok bool) {
	limit = 20
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			_ = c.Error(fmt.Errorf("%w: limit must be an integer from 1 to %d", service.ErrInvalid, service.MaxPage))
			return 0, 0, false
		}
		limit = n
	}
	if v := c.Query(cursor); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			_ = c.Error(fmt.Errorf("%w: the cursor is not valid", service.ErrInvalid))
			return 0, 0, false
		}
		id = n
	}
	return limit, id, true
}

// allOrdersPage is a page of every buyer's orders, oldest first; Next,
// null on the last page, is the `after` of the next.
type allOrdersPage struct {
	Orders []service.Order `json:"orders"`
	Next   *string         `json:"next"`
}

// listAllOrders answers GET /v1/admin/orders: every buyer's orders of `sku`
// and `status` (if given) above the cursor `after`, oldest first, `limit`
// at a time as the buyer's list; in CSV (ordersCSV) when Accept prefers
// text/csv to JSON.
func (h *Handler) listAllOrders(c *gin.Context) {
	limit, after, ok := pageQuery(c, "after")
	if !ok {
		return
	}
	os, next, err := h.svc.AllOrders(c.Request.Context(),
		service.AllOrdersFilter{SKU: c.Query("sku"), Status: service.Status(c.Query("status")), After: after, Limit: limit})
	if err != nil {
		_ = c.Error(err)
		return
	}
	c.Header("Vary", "Accept")
	if prefersCSV(c.Request.Header.Values("Accept")) {
		if next > 0 {
			c.Header(api.NextCursor, strconv.FormatInt(next, 10))
		}
		c.Data(http.StatusOK, "text/csv; charset=utf-8", ordersCSV(os))
		return
	}
	page := allOrdersPage{Orders: os}
	if page.Orders == nil {
		page.Orders = []service.Order{}
	}
	if next > 0 {
		cursor := strconv.FormatInt(next, 10)
		page.Next = &cursor
	}
	writeJSON(c, http.StatusOK, page)
}

// csvTime is the layout of the times in CSV: RFC 3339 in UTC, to the
// microsecond (the JSON deadline's).
const csvTime = "2006-01-02T15:04:05.000000Z07:00"

// ordersCSV is os as RFC 4180 CSV (CRLF line ends): a header row, then one
// row per order; an empty cell is a value the order has not.
func ordersCSV(os []service.Order) []byte {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	w.UseCRLF = true
	_ = w.Write([]string{"id", "sku", "buyer", "quantity", "status", "created_at", "expires_at", "payment_ref"})
	for _, o := range os {
		expires := ""
		if o.ExpiresAt != nil {
			expires = o.ExpiresAt.UTC().Format(csvTime)
		}
		_ = w.Write([]string{strconv.FormatInt(o.ID, 10), o.SKU, o.Buyer, strconv.Itoa(o.Quantity), string(o.Status),
			o.CreatedAt.UTC().Format(csvTime), expires, o.PaymentRef})
	}
	w.Flush() // a bytes.Buffer takes every write: no error to check
	return b.Bytes()
}

// prefersCSV reports whether the Accept header values give text/csv a
// higher q than JSON (application/json, application/* or */*): without an
// Accept, or on a tie, the answer is JSON.
func prefersCSV(accept []string) bool {
	var csvQ, jsonQ float64
	for _, v := range accept {
		for part := range strings.SplitSeq(v, ",") {
			typ, params, err := mime.ParseMediaType(part)
			if err != nil {
				continue
			}
			q := 1.0
			if qs, ok := params["q"]; ok {
				if q, err = strconv.ParseFloat(qs, 64); err != nil {
					continue
				}
			}
			switch typ {
			case "text/csv":
				csvQ = max(csvQ, q)
			case "application/json", "application/*", "*/*":
				jsonQ = max(jsonQ, q)
			}
		}
	}
	return csvQ > jsonQ
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
