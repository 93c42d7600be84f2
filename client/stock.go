package client

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/seckill/stock/internal/api"
)

// Stock is a SKU's stock row.
type Stock struct {
	SKU       string `json:"sku"`
	Available int64  `json:"available"`
	Reserved  int64  `json:"reserved"` // units of reserved orders
	Sold      int64  `json:"sold"`     // units of confirmed orders
	Version   int64  `json:"version"`
	// PerBuyerLimit caps one buyer's reserved and confirmed units; 0: none.
	PerBuyerLimit int64 `json:"per_buyer_limit"`
	// PaymentWindowSeconds is how long a new order stays reserved; 0:
	// orders are confirmed at once.
	PaymentWindowSeconds int64 `json:"payment_window_seconds"`
	// SaleStartsAt and SaleEndsAt are the sale's schedule; nil: open from
	// the start, never closed.
	SaleStartsAt *time.Time `json:"sale_starts_at"`
	SaleEndsAt   *time.Time `json:"sale_ends_at"`
	// MaxUnpaidPerBuyer is the cap in force on one buyer's reserved,
	// unpaid units (the default or the one set); nil: none.
	MaxUnpaidPerBuyer *int64 `json:"max_unpaid_per_buyer"`
	// Now is the service's clock (its database's) at the read, the clock
	// the schedule is decided by; set by Stock only.
	Now time.Time `json:"now,omitzero"`
}

// StockSetting is what an admin sets on a SKU; a zero PerBuyerLimit or
// PaymentWindowSeconds means none. A nil SaleStartsAt or SaleEndsAt keeps
// the stored value, unless ClearStart or ClearEnd says to clear it. A zero
// MaxUnpaidPerBuyer is the default cap on a buyer's unpaid units, unless
// NoUnpaidCap asks for none.
type StockSetting struct {
	Available            int64
	PerBuyerLimit        int64
	PaymentWindowSeconds int64
	SaleStartsAt         *time.Time
	SaleEndsAt           *time.Time
	ClearStart, ClearEnd bool
	MaxUnpaidPerBuyer    int64
	NoUnpaidCap          bool
}

// MarshalJSON is the PUT's body: a schedule field is left out (kept),
// null (cleared) or a time; max_unpaid_per_buyer is left out (the
// default), null (NoUnpaidCap) or the cap.
func (s StockSetting) MarshalJSON() ([]byte, error) {
	body := map[string]any{"available": s.Available}
	if s.PerBuyerLimit != 0 {
		body["per_buyer_limit"] = s.PerBuyerLimit
	}
	if s.PaymentWindowSeconds != 0 {
		body["payment_window_seconds"] = s.PaymentWindowSeconds
	}
	switch {
	case s.NoUnpaidCap:
		body["max_unpaid_per_buyer"] = nil
	case s.MaxUnpaidPerBuyer != 0:
		body["max_unpaid_per_buyer"] = s.MaxUnpaidPerBuyer
	}
	for _, f := range []struct {
		name  string
		at    *time.Time
		clear bool
	}{{"sale_starts_at", s.SaleStartsAt, s.ClearStart}, {"sale_ends_at", s.SaleEndsAt, s.ClearEnd}} {
		switch {
		case f.at != nil:
			body[f.name] = f.at.UTC().Format(time.RFC3339Nano)
		case f.clear:
			body[f.name] = nil
		}
	}
	return json.Marshal(body)
}

// SetStock creates or changes a SKU, with the admin token (PUT
// /v1/admin/stock/{sku}), and returns its row as it is now.
func (c *Client) SetStock(ctx context.Context, sku string, set StockSetting) (Stock, error) {
	var s Stock
	_, err := c.call(ctx, http.MethodPut, api.Path(api.AdminStock, sku), nil, set, &s)
	return s, err
}

// Stock is a SKU's stock (GET /v1/stock/{sku}); no token needed.
func (c *Client) Stock(ctx context.Context, sku string) (Stock, error) {
	var s Stock
	_, err := c.call(ctx, http.MethodGet, api.Path(api.Stock, sku), nil, nil, &s)
	return s, err
}

// Audit is the reconciliation of a SKU from MySQL's rows: the stock row,
// its orders and the buyers' ledger (GET /v1/admin/stock/{sku}/audit).
type Audit struct {
	SKU                  string `json:"sku"`
	Available            int64  `json:"available"`
	Reserved             int64  `json:"reserved"`
	Sold                 int64  `json:"sold"`
	Stocked              int64  `json:"stocked"`
	PaymentWindowSeconds int64  `json:"payment_window_seconds"`
	Orders               int64  `json:"orders"`
	// OrdersByStatus counts the orders in each status.
	OrdersByStatus    map[string]int64 `json:"orders_by_status"`
	OrderedQuantity   int64            `json:"ordered_quantity"`
	ReservedQuantity  int64            `json:"reserved_quantity"`
	ConfirmedQuantity int64            `json:"confirmed_quantity"`
	ReturnedQuantity  int64            `json:"returned_quantity"`
	DistinctKeys      int64            `json:"distinct_keys"`
	PerBuyerLimit     int64            `json:"per_buyer_limit"`
	MaxBuyerHolds     int64            `json:"max_buyer_holds"`
	BuyersOverLimit   int64            `json:"buyers_over_limit"`
	LedgerMismatch    int64            `json:"buyer_ledger_mismatch"`
	UnpaidMismatch    int64            `json:"unpaid_mismatch"`
	LedgerRestocked   int64            `json:"ledger_restocked"`
	LedgerSold        int64            `json:"ledger_sold"`
	LedgerReturned    int64            `json:"ledger_returned"`
	ReturnMismatch    int64            `json:"return_mismatch"`
	Oversold          int64            `json:"oversold"`
	// Consistent: every check held; Problems says which did not.
	Consistent bool     `json:"consistent"`
	Problems   []string `json:"problems"`
}

// Audit reconciles sku, with the admin token.
func (c *Client) Audit(ctx context.Context, sku string) (Audit, error) {
	var a Audit
	_, err := c.call(ctx, http.MethodGet, api.Path(api.AdminAudit, sku), nil, nil, &a)
	return a, err
}
