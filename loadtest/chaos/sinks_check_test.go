package chaos

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill/stock/events"
)

// TestCheckDeliveries proves the outbox rows' check catches what it is
// for, on hand-made deliveries: a clean run with duplicates passes, and
// each broken one is named.
func TestCheckDeliveries(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ev := func(id int, seq int64, typ string, order int64, status string) events.Event {
		e := events.Event{ID: strconv.Itoa(id), Type: typ, OccurredAt: t0, SKU: "s", Seq: seq}
		if order == 0 {
			e.Stock = &events.Stock{Available: 3}
		} else {
			e.Order = &events.Order{ID: order, Buyer: "b" + strconv.FormatInt(order, 10), Quantity: 1, Status: status}
		}
		return e
	}
	// MySQL: stock set (1), order 7 placed (2) and confirmed (3), order 8
	// placed (4) and expired (5), order 9 placed (6), still reserved.
	mysql := []events.Event{
		ev(1, 1, events.StockChanged, 0, ""),
		ev(2, 2, events.OrderPlaced, 7, "reserved"),
		ev(3, 3, events.OrderConfirmed, 7, "confirmed"),
		ev(4, 4, events.OrderPlaced, 8, "reserved"),
		ev(5, 5, events.OrderExpired, 8, "expired"),
		ev(6, 6, events.OrderPlaced, 9, "reserved"),
	}
	snap := func() *outboxSnapshot {
		s := &outboxSnapshot{events: map[string]outboxRow{}, eventSeq: map[string]int64{"s": 6}, orders: map[int64]orderRow{
			7: {sku: "s", buyer: "b7", status: "confirmed", quantity: 1},
			8: {sku: "s", buyer: "b8", status: "expired", quantity: 1},
			9: {sku: "s", buyer: "b9", status: "reserved", quantity: 1},
		}}
		for _, e := range mysql {
			s.events[e.ID] = outboxRow{sku: e.SKU, typ: e.Type, seq: e.Seq, orderID: orderID(e), status: orderStatus(e)}
		}
		return s
	}
	deliver := func(evs ...events.Event) []delivery {
		var out []delivery
		for _, e := range evs {
			b, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, delivery{id: e.ID, body: b, at: t0.Add(time.Second)})
		}
		return out
	}
	withDup := append(slices.Clone(mysql[:4]), mysql[2], mysql[3], mysql[4], mysql[5])

	if c := checkDeliveries("clean", deliver(withDup...), snap()); !c.ok() || c.duplicates != 2 || c.distinct != 6 {
		t.Errorf("clean run with 2 duplicates: %v, problems %q; want no problem, 2 duplicates, 6 distinct", c, c.problems)
	}

	changed := mysql[2]
	changed.Order = &events.Order{ID: 7, Buyer: "b7", Quantity: 1, Status: "confirmed", PaymentRef: new("other")}
	stray := ev(99, 7, events.OrderPlaced, 12, "reserved")
	wrongEnd := snap()
	wrongEnd.orders[8] = orderRow{sku: "s", buyer: "b8", status: "cancelled", quantity: 1}
	for _, tc := range []struct {
		name string
		got  []events.Event
		snap *outboxSnapshot
		want string
	}{
		{"gap", []events.Event{mysql[0], mysql[1], mysql[3], mysql[2], mysql[4], mysql[5]}, snap(), "first delivery of seq 4"},
		{"lost", mysql[:5], snap(), "never arrived"},
		{"duplicate with another body", append(slices.Clone(mysql), changed), snap(), "delivered again with another body"},
		{"event of a rolled-back transaction", append(slices.Clone(mysql), stray), snap(), "not in outbox_events"},
		{"end event unlike the order's status", mysql, wrongEnd, "order 8 is cancelled in MySQL; its event is order.expired"},
		{"confirmed without its event", []events.Event{mysql[0], mysql[1], mysql[3], mysql[4], mysql[5]}, snapWithout(snap(), "3"), "order 7 is confirmed in MySQL, with no order.confirmed event"},
		{"two order.placed", append(slices.Clone(mysql), ev(7, 7, events.OrderPlaced, 9, "reserved")), snapWith(snap(), ev(7, 7, events.OrderPlaced, 9, "reserved")), "order 9 (reserved): 2 order.placed events"},
	} {
		c := checkDeliveries(tc.name, deliver(tc.got...), tc.snap)
		if !strings.Contains(strings.Join(c.problems, "\n"), tc.want) {
			t.Errorf("%s: problems %q; want one saying %q", tc.name, c.problems, tc.want)
		}
	}
}

// snapWithout is s without event id (a gap too, which other checks name).
func snapWithout(s *outboxSnapshot, id string) *outboxSnapshot {
	delete(s.events, id)
	return s
}

// snapWith is s with e written last.
func snapWith(s *outboxSnapshot, e events.Event) *outboxSnapshot {
	s.events[e.ID] = outboxRow{sku: e.SKU, typ: e.Type, seq: e.Seq, orderID: orderID(e), status: orderStatus(e)}
	s.eventSeq[e.SKU] = e.Seq
	return s
}
