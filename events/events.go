// Package events is what the stock service tells other systems: the event
// every order and stock change writes (its JSON, the same in the feed, on
// NATS JetStream and in webhooks) and the signature of a webhook, with
// Verify for Go receivers. It needs only the standard library.
//
// Delivery is at least once: an event may come again, always with the same
// ID, so a receiver drops the IDs it has handled. Per SKU, Seq counts 1, 2,
// 3, ... in the order the changes committed; a receiver that sees a Seq
// more than one past the last it handled has missed one (or got them out
// of order) and can read the feed to fill the gap.
package events

import (
	"encoding/json"
	"time"
)

// The event types.
const (
	OrderPlaced    = "order.placed"    // a new order, reserved (with its deadline) or confirmed
	OrderConfirmed = "order.confirmed" // a reserved order paid (with its payment reference)
	OrderCancelled = "order.cancelled" // a reserved order cancelled (CancelledBy says by whom), units back
	OrderExpired   = "order.expired"   // a reserved order past its deadline, units back
	StockChanged   = "stock.changed"   // an admin changed a SKU's units, limit or payment window
)

// Types returns every event type.
func Types() []string {
	return []string{OrderPlaced, OrderConfirmed, OrderCancelled, OrderExpired, StockChanged}
}

// Event is one change, as every sink sends it.
type Event struct {
	// ID is unique and the same on every delivery of this event.
	ID   string `json:"id"`
	Type string `json:"type"`
	// OccurredAt is when the change was written (UTC, microseconds).
	OccurredAt time.Time `json:"occurred_at"`
	SKU        string    `json:"sku"`
	// Seq numbers the SKU's events 1, 2, 3, ... in commit order, no gaps.
	Seq int64 `json:"seq"`
	// Order is set on the order events, Stock on stock.changed.
	Order *Order `json:"order,omitempty"`
	Stock *Stock `json:"stock,omitempty"`
}

// Order is an order as the event left it.
type Order struct {
	ID       int64  `json:"id"`
	Buyer    string `json:"buyer"`
	Quantity int    `json:"quantity"`
	// Status is the order's status after the change: reserved or confirmed
	// on order.placed, then confirmed, cancelled or expired.
	Status string `json:"status"`
	// ExpiresAt is the payment deadline of an order placed reserved.
	ExpiresAt  *time.Time `json:"expires_at"`
	PaymentRef *string    `json:"payment_ref"`
	// CancelledBy is "buyer" or "admin" on order.cancelled.
	CancelledBy string `json:"cancelled_by,omitempty"`
}

// Stock is a SKU's stock row after an admin change.
type Stock struct {
	Available            int64 `json:"available"`
	Reserved             int64 `json:"reserved"`
	Sold                 int64 `json:"sold"`
	PerBuyerLimit        int64 `json:"per_buyer_limit"`
	PaymentWindowSeconds int64 `json:"payment_window_seconds"`
}

// FeedEvent is an event as the feed answers it: with its position and,
// per sink, its delivery state ("pending", "delivered", "failed" or
// "redelivering").
type FeedEvent struct {
	Event
	Position int64             `json:"position"`
	Delivery map[string]string `json:"delivery,omitempty"`
}

// Page is one answer of the feed: its events in commit order and the
// cursor to pass as after for the next (always set; an empty page means
// nothing newer yet).
type Page struct {
	Events []FeedEvent `json:"events"`
	Next   string      `json:"next"`
}

// TimeFormat is how an event writes its times: RFC 3339 in UTC with
// exactly six fractional digits (microseconds).
const TimeFormat = "2006-01-02T15:04:05.000000Z07:00"

// MarshalJSON writes e with its times in TimeFormat, fields in the order
// of Event; any RFC 3339 reader (time.Time's UnmarshalJSON too) reads them
// back.
func (e Event) MarshalJSON() ([]byte, error) {
	out := eventJSON{ID: e.ID, Type: e.Type, OccurredAt: e.OccurredAt.UTC().Format(TimeFormat), SKU: e.SKU, Seq: e.Seq, Stock: e.Stock}
	if o := e.Order; o != nil {
		out.Order = &orderJSON{ID: o.ID, Buyer: o.Buyer, Quantity: o.Quantity, Status: o.Status, PaymentRef: o.PaymentRef, CancelledBy: o.CancelledBy}
		if o.ExpiresAt != nil {
			s := o.ExpiresAt.UTC().Format(TimeFormat)
			out.Order.ExpiresAt = &s
		}
	}
	return json.Marshal(out)
}

// eventJSON and orderJSON are Event and Order as written, times formatted.
type eventJSON struct {
	ID         string     `json:"id"`
	Type       string     `json:"type"`
	OccurredAt string     `json:"occurred_at"`
	SKU        string     `json:"sku"`
	Seq        int64      `json:"seq"`
	Order      *orderJSON `json:"order,omitempty"`
	Stock      *Stock     `json:"stock,omitempty"`
}

type orderJSON struct {
	ID          int64   `json:"id"`
	Buyer       string  `json:"buyer"`
	Quantity    int     `json:"quantity"`
	Status      string  `json:"status"`
	ExpiresAt   *string `json:"expires_at"`
	PaymentRef  *string `json:"payment_ref"`
	CancelledBy string  `json:"cancelled_by,omitempty"`
}

// MarshalJSON writes f as its Event does, with its position and delivery.
func (f FeedEvent) MarshalJSON() ([]byte, error) {
	ev, err := f.Event.MarshalJSON()
	if err != nil {
		return nil, err
	}
	extra, err := json.Marshal(struct {
		Position int64             `json:"position"`
		Delivery map[string]string `json:"delivery,omitempty"`
	}{f.Position, f.Delivery})
	if err != nil {
		return nil, err
	}
	return append(append(ev[:len(ev)-1], ','), extra[1:]...), nil
}
