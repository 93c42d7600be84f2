package events_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/seckill/stock/events"
)

// The JSON below is the contract every sink sends and receivers parse:
// a change here breaks them, so each field name and omission is pinned.
func TestEventJSON(t *testing.T) {
	at := time.Date(2026, 12, 2, 10, 0, 0, 123456000, time.UTC)
	deadline := time.Date(2026, 12, 2, 10, 15, 0, 0, time.UTC)
	ref := "pay-42"
	tests := []struct {
		name string
		e    events.Event
		want string
	}{
		{
			name: "order placed reserved",
			e: events.Event{
				ID: "ev-1", Type: events.OrderPlaced, OccurredAt: at, SKU: "sku-1", Seq: 1,
				Order: &events.Order{ID: 7, Buyer: "alice", Quantity: 2, Status: "reserved", ExpiresAt: &deadline},
			},
			want: `{"id":"ev-1","type":"order.placed","occurred_at":"2026-12-02T10:00:00.123456Z","sku":"sku-1","seq":1,` +
				`"order":{"id":7,"buyer":"alice","quantity":2,"status":"reserved","expires_at":"2026-12-02T10:15:00.000000Z","payment_ref":null}}`,
		},
		{
			name: "order confirmed",
			e: events.Event{
				ID: "ev-2", Type: events.OrderConfirmed, OccurredAt: at, SKU: "sku-1", Seq: 2,
				Order: &events.Order{ID: 7, Buyer: "alice", Quantity: 2, Status: "confirmed", ExpiresAt: &deadline, PaymentRef: &ref},
			},
			want: `{"id":"ev-2","type":"order.confirmed","occurred_at":"2026-12-02T10:00:00.123456Z","sku":"sku-1","seq":2,` +
				`"order":{"id":7,"buyer":"alice","quantity":2,"status":"confirmed","expires_at":"2026-12-02T10:15:00.000000Z","payment_ref":"pay-42"}}`,
		},
		{
			name: "order cancelled",
			e: events.Event{
				ID: "ev-3", Type: events.OrderCancelled, OccurredAt: at, SKU: "sku-1", Seq: 3,
				Order: &events.Order{ID: 8, Buyer: "bob", Quantity: 1, Status: "cancelled", CancelledBy: "admin"},
			},
			want: `{"id":"ev-3","type":"order.cancelled","occurred_at":"2026-12-02T10:00:00.123456Z","sku":"sku-1","seq":3,` +
				`"order":{"id":8,"buyer":"bob","quantity":1,"status":"cancelled","expires_at":null,"payment_ref":null,"cancelled_by":"admin"}}`,
		},
		{
			name: "stock changed, whole second",
			e: events.Event{
				ID: "ev-4", Type: events.StockChanged, OccurredAt: deadline, SKU: "sku-1", Seq: 4,
				Stock: &events.Stock{Available: 90, Reserved: 3, Sold: 7, PerBuyerLimit: 2, PaymentWindowSeconds: 900},
			},
			want: `{"id":"ev-4","type":"stock.changed","occurred_at":"2026-12-02T10:15:00.000000Z","sku":"sku-1","seq":4,` +
				`"stock":{"available":90,"reserved":3,"sold":7,"per_buyer_limit":2,"payment_window_seconds":900}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(tt.e)
			if err != nil {
				t.Fatalf("Marshal(%+v) = %v", tt.e, err)
			}
			if string(got) != tt.want {
				t.Errorf("Marshal(%s)\n got %s\nwant %s", tt.name, got, tt.want)
			}
			var back events.Event
			if err := json.Unmarshal(got, &back); err != nil {
				t.Fatalf("Unmarshal(%s) = %v", got, err)
			}
			// Times compare by instant; the rest field by field.
			if !back.OccurredAt.Equal(tt.e.OccurredAt) {
				t.Errorf("Unmarshal(%s).OccurredAt = %v; want %v", got, back.OccurredAt, tt.e.OccurredAt)
			}
			back.OccurredAt = tt.e.OccurredAt
			if back.Order != nil && back.Order.ExpiresAt != nil {
				if !back.Order.ExpiresAt.Equal(*tt.e.Order.ExpiresAt) {
					t.Errorf("Unmarshal(%s).Order.ExpiresAt = %v; want %v", got, back.Order.ExpiresAt, tt.e.Order.ExpiresAt)
				}
				back.Order.ExpiresAt = tt.e.Order.ExpiresAt
			}
			if !reflect.DeepEqual(back, tt.e) {
				t.Errorf("Unmarshal(Marshal(%+v)) = %+v", tt.e, back)
			}
		})
	}
}

func TestTypes(t *testing.T) {
	want := []string{"order.placed", "order.confirmed", "order.cancelled", "order.expired", "stock.changed"}
	if got := events.Types(); !slices.Equal(got, want) {
		t.Errorf("Types() = %q; want %q", got, want)
	}
}

// A feed event is its event's JSON with its position and delivery state.
func TestFeedEventJSON(t *testing.T) {
	f := events.FeedEvent{Event: events.Event{ID: "9", Type: events.StockChanged, OccurredAt: time.Date(2026, 12, 2, 10, 0, 0, 5000, time.UTC),
		SKU: "s", Seq: 1, Stock: &events.Stock{Available: 1}}, Position: 4, Delivery: map[string]string{"nats": "delivered"}}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"9","type":"stock.changed","occurred_at":"2026-12-02T10:00:00.000005Z","sku":"s","seq":1,` +
		`"stock":{"available":1,"reserved":0,"sold":0,"per_buyer_limit":0,"payment_window_seconds":0},"position":4,"delivery":{"nats":"delivered"}}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	var back events.FeedEvent
	if err := json.Unmarshal(b, &back); err != nil || back.Position != 4 || back.Delivery["nats"] != "delivered" || !back.OccurredAt.Equal(f.OccurredAt) {
		t.Fatalf("round trip: %+v %v", back, err)
	}
}
