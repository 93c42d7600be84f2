package servicetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill/stock/events"
	"github.com/seckill/stock/internal/service"
)

// EventLog is a store's outbox as the contract reads it.
type EventLog interface {
	// EventsOf returns the events written for sku, in seq order.
	EventsOf(ctx context.Context, sku string) ([]events.Event, error)
}

// contractEvents: every change writes its event in its transaction, numbered
// 1, 2, 3, ... per SKU: the stock set, each order placed (alone or in a
// batch), a confirm, a buyer's and an admin's cancel, an expiry; a refused
// order, a rolled-back one and a no-op change write none.
func contractEvents(t *testing.T, s ContractStore) {
	ctx := context.Background()
	log, ok := s.Store.(EventLog)
	if !ok {
		t.Fatalf("%T keeps no event log", s.Store)
	}
	setWindow(t, s, "EV", 6, 0, 600)
	setWindow(t, s, "EV", 6, 0, 600) // the same values: nothing changes, no event
	a := mustDeduct(t, s, deduction("b1", "k1", "EV", 1, service.WriteVersioned))
	b := mustDeduct(t, s, deduction("b2", "k2", "EV", 2, service.WriteConditional))
	orders, errs, err := s.DeductBatch(ctx, service.Batch{SKU: "EV", Items: []service.BatchItem{
		{Buyer: "b3", Key: "k3", RequestHash: "h", Quantity: 1}, {Buyer: "b4", Key: "k4", RequestHash: "h", Quantity: 9}}})
	if err != nil || errs[0] != nil || !errors.Is(errs[1], service.ErrSoldOut) {
		t.Fatalf("batch: %v %v", err, errs)
	}
	c := orders[0]
	boom := errors.New("boom")
	d := deduction("b5", "k5", "EV", 1, service.WriteVersioned)
	d.BeforeCommit = func() error { return boom }
	if _, err := s.Deduct(ctx, d); !errors.Is(err, boom) {
		t.Fatalf("rolled back: %v", err)
	}
	if _, err := s.Deduct(ctx, deduction("b6", "k6", "EV", 9, service.WriteVersioned)); !errors.Is(err, service.ErrSoldOut) {
		t.Fatalf("refused: %v", err)
	}
	for _, tr := range []service.Transition{{ID: a.ID, Op: service.OpConfirm, PaymentRef: "p1"},
		{ID: b.ID, Op: service.OpCancel, Buyer: "b2"}, {ID: c.ID, Op: service.OpCancel}} {
		if _, err := s.Transition(ctx, tr); err != nil {
			t.Fatalf("transition %+v: %v", tr, err)
		}
	}
	evs, err := log.EventsOf(ctx, "EV")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		typ, status, by string
		order           int64
	}{
		{events.StockChanged, "", "", 0}, {events.OrderPlaced, "reserved", "", a.ID}, {events.OrderPlaced, "reserved", "", b.ID},
		{events.OrderPlaced, "reserved", "", c.ID}, {events.OrderConfirmed, "confirmed", "", a.ID},
		{events.OrderCancelled, "cancelled", "buyer", b.ID}, {events.OrderCancelled, "cancelled", "admin", c.ID},
	}
	if len(evs) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(evs), len(want), evs)
	}
	ids := map[string]bool{}
	for i, e := range evs {
		w := want[i]
		if e.Seq != int64(i+1) || e.Type != w.typ || e.SKU != "EV" || ids[e.ID] || e.OccurredAt.IsZero() {
			t.Errorf("event %d: %s seq %d sku %s id %q, want %s seq %d", i, e.Type, e.Seq, e.SKU, e.ID, w.typ, i+1)
		}
		ids[e.ID] = true
		if w.order == 0 {
			if e.Stock == nil || e.Stock.Available != 6 || e.Stock.PaymentWindowSeconds != 600 || e.Order != nil {
				t.Errorf("stock.changed: %+v %+v", e.Stock, e.Order)
			}
			continue
		}
		if e.Order == nil || e.Order.ID != w.order || e.Order.Status != w.status || e.Order.CancelledBy != w.by || e.Order.ExpiresAt == nil {
			t.Errorf("event %d (%s): order %+v, want id %d status %s by %q", i, e.Type, e.Order, w.order, w.status, w.by)
		}
		if paid := e.Type == events.OrderConfirmed; paid != (e.Order.PaymentRef != nil) || paid && *e.Order.PaymentRef != "p1" {
			t.Errorf("event %d (%s): payment_ref %v", i, e.Type, e.Order.PaymentRef)
		}
	}
	contractExpiryEvent(t, s, log)
}

// contractExpiryEvent: an order past its deadline expires with its event.
func contractExpiryEvent(t *testing.T, s ContractStore, log EventLog) {
	ctx := context.Background()
	setWindow(t, s, "EX", 2, 0, 1)
	o := mustDeduct(t, s, deduction("b1", "x1", "EX", 1, service.WriteVersioned))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := s.ExpireDue(ctx, 10); err != nil {
			t.Fatal(err)
		}
		evs, err := log.EventsOf(ctx, "EX")
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 3 {
			if e := evs[2]; e.Type != events.OrderExpired || e.Seq != 3 || e.Order.ID != o.ID || e.Order.Status != "expired" {
				t.Errorf("expiry event %+v %+v", e, e.Order)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no expiry event within 10s: %+v", evs)
		}
	}
}
