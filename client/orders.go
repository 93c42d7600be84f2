package client

import (
	"context"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/seckill/stock/internal/api"
)

// The statuses of an order.
const (
	StatusReserved  = "reserved"  // placed under a payment window, awaiting payment
	StatusConfirmed = "confirmed" // paid, or placed on a SKU without a window
	StatusCancelled = "cancelled" // given up by its buyer or the admin; its units went back
	StatusExpired   = "expired"   // not paid within the window; its units went back
)

// Order is an order as the API shows it.
type Order struct {
	ID       int64  `json:"id"`
	Buyer    string `json:"buyer"`
	Key      string `json:"idempotency_key"`
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
	Status   string `json:"status"`
	// ExpiresAt is the payment deadline of a reserved order; nil for an
	// order confirmed at once.
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	PaymentRef string     `json:"payment_ref,omitempty"`
	// Fence is the lock's fencing token the order was placed under, when
	// the strategy takes a lock.
	Fence     *int64    `json:"fence,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// Placed is the answer to Place.
type Placed struct {
	Order
	// Replayed: the key had placed this order before (200, not 201); the
	// answer is the stored order, and nothing new was charged.
	Replayed bool
}

// Place orders quantity units of sku under the idempotency key (POST
// /v1/orders, as the buyer of the client's token). Sending the same key
// again, after an error or a lost answer, returns the same order, never a
// second one; a *Problem that is Temporary is worth that retry.
func (c *Client) Place(ctx context.Context, key, sku string, quantity int) (Placed, error) {
	var p Placed
	in := struct {
		SKU      string `json:"sku"`
		Quantity int    `json:"quantity"`
	}{sku, quantity}
	status, err := c.call(ctx, http.MethodPost, api.Orders, http.Header{"Idempotency-Key": {key}}, in, &p.Order)
	p.Replayed = err == nil && status == http.StatusOK
	return p, err
}

// Order is one of the buyer's orders (GET /v1/orders/{id}).
func (c *Client) Order(ctx context.Context, id int64) (Order, error) {
	return c.order(ctx, http.MethodGet, api.Order, id, nil)
}

// AdminOrder is any buyer's order, with the admin token (GET
// /v1/admin/orders/{id}).
func (c *Client) AdminOrder(ctx context.Context, id int64) (Order, error) {
	return c.order(ctx, http.MethodGet, api.AdminOrder, id, nil)
}

// Cancel gives up one of the buyer's reserved orders; its units go back on
// sale (POST /v1/orders/{id}/cancel). Cancelling a cancelled order again
// answers it as it is.
func (c *Client) Cancel(ctx context.Context, id int64) (Order, error) {
	return c.order(ctx, http.MethodPost, api.OrderCancel, id, nil)
}

// AdminCancel cancels any buyer's reserved order, with the admin token.
func (c *Client) AdminCancel(ctx context.Context, id int64) (Order, error) {
	return c.order(ctx, http.MethodPost, api.AdminCancel, id, nil)
}

// Confirm records the payment of a reserved order, with the payment (or
// admin) token; paymentRef "" sends none. Confirming a confirmed order
// again answers it as it is, unless both have a paymentRef and they
// differ: that is KindOrderAlreadyPaid (refund the second payment).
func (c *Client) Confirm(ctx context.Context, id int64, paymentRef string) (Order, error) {
	var in any
	if paymentRef != "" {
		in = struct {
			PaymentRef string `json:"payment_ref"`
		}{paymentRef}
	}
	return c.order(ctx, http.MethodPost, api.AdminConfirm, id, in)
}

func (c *Client) order(ctx context.Context, method, route string, id int64, in any) (Order, error) {
	var o Order
	_, err := c.call(ctx, method, api.Path(route, strconv.FormatInt(id, 10)), nil, in, &o)
	return o, err
}

// OrdersQuery selects a page of the buyer's orders; zero fields select
// nothing (every SKU, every status, the newest page, the server's default
// size).
type OrdersQuery struct {
	SKU    string
	Status string
	Cursor string // OrderPage.NextCursor of the page before
	Limit  int
}

// OrderPage is a page of orders, newest first.
type OrderPage struct {
	Orders []Order `json:"orders"`
	// NextCursor fetches the next (older) page; "" on the last one.
	NextCursor string `json:"next_cursor,omitempty"`
}

// Orders is a page of the buyer's orders (GET /v1/orders).
func (c *Client) Orders(ctx context.Context, q OrdersQuery) (OrderPage, error) {
	path := pagePath(api.Orders, map[string]string{"sku": q.SKU, "status": q.Status, "cursor": q.Cursor}, q.Limit)
	var p OrderPage
	_, err := c.call(ctx, http.MethodGet, path, nil, nil, &p)
	return p, err
}

// AdminOrdersQuery selects a page of every buyer's orders; zero fields
// select nothing (every SKU, every status, from the oldest order, the
// server's default size).
type AdminOrdersQuery struct {
	SKU    string
	Status string
	After  string // AdminOrderPage.Next of the page before
	Limit  int
}

// AdminOrderPage is a page of every buyer's orders, oldest first.
type AdminOrderPage struct {
	Orders []Order `json:"orders"`
	// Next is the After of the next page; "" on the last one.
	Next string `json:"next"`
}

// AdminOrders is a page of every buyer's orders, with the admin token (GET
// /v1/admin/orders). A status or cursor the server cannot take, or a Limit
// out of 1..100, is a *Problem of KindInvalidRequest.
func (c *Client) AdminOrders(ctx context.Context, q AdminOrdersQuery) (AdminOrderPage, error) {
	var p AdminOrderPage
	_, err := c.call(ctx, http.MethodGet, q.path(), nil, nil, &p)
	return p, err
}

// AdminOrdersCSV is AdminOrders' page as CSV (RFC 4180): a header row
// id,sku,buyer,quantity,status,created_at,expires_at,payment_ref, then a
// row per order; next is the After of the next page ("" on the last one).
func (c *Client) AdminOrdersCSV(ctx context.Context, q AdminOrdersQuery) (csv []byte, next string, err error) {
	var a rawAnswer
	if _, err = c.call(ctx, http.MethodGet, q.path(), http.Header{"Accept": {"text/csv"}}, nil, &a); err != nil {
		return nil, "", err
	}
	if mt, _, _ := mime.ParseMediaType(a.header.Get("Content-Type")); mt != "text/csv" {
		return nil, "", fmt.Errorf("client: GET %s: answered %q, not text/csv", api.AdminOrders, a.header.Get("Content-Type"))
	}
	return a.body, a.header.Get(api.NextCursor), nil
}

// path is the query's URL path.
func (q AdminOrdersQuery) path() string {
	return pagePath(api.AdminOrders, map[string]string{"sku": q.SKU, "status": q.Status, "after": q.After}, q.Limit)
}

// pagePath is route with a query of the params that are set and limit
// when it is not 0.
func pagePath(route string, params map[string]string, limit int) string {
	v := url.Values{}
	for k, s := range params {
		if s != "" {
			v.Set(k, s)
		}
	}
	if limit != 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	if len(v) == 0 {
		return route
	}
	return route + "?" + v.Encode()
}
