package repo

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/seckill/stock/events"
	"github.com/seckill/stock/internal/service"
)

// The outbox's writes, inside the transactions of the changes they tell
// of. A change numbers its SKU's events in its UPDATE of the stock row:
// event_seq = LAST_INSERT_ID(event_seq + n) leaves the new last number in
// the connection's LAST_INSERT_ID(), which insertEvents, the next INSERT
// on the connection, numbers its rows from. The stock row's lock, held to
// the commit, makes the numbers follow the commit order with no gaps.

// bumpSeq is the SET of event_seq for n events (see above).
func bumpSeq(n int) clause.Expr { return gorm.Expr("LAST_INSERT_ID(event_seq + ?)", n) }

// eventRow is an outbox_events row to write: an order event's order and
// new status, or stock.changed's row after the change.
type eventRow struct {
	typ         string
	orderID     int64
	status      service.Status
	cancelledBy string
	stock       *events.Stock
}

// placedEvents is the order.placed rows of just inserted orders.
func placedEvents(rows []orderModel) []eventRow {
	evs := make([]eventRow, len(rows))
	for i, r := range rows {
		evs[i] = eventRow{typ: events.OrderPlaced, orderID: r.ID, status: r.Status}
	}
	return evs
}

// insertEvents inserts evs of sku numbered after the stock row's UPDATE
// that ran last on the connection (bumpSeq(len(evs))): the last of them
// gets LAST_INSERT_ID(), in one multi-row INSERT.
func insertEvents(exec func(q string, args ...any) error, sku string, evs []eventRow, now time.Time) error {
	if len(evs) == 0 {
		return nil
	}
	q, args := eventsInsert(sku, evs, now, "")
	return exec(q, args...)
}

// eventsInsert is the INSERT of evs, numbered as insertEvents says. With
// firstOrder set (a SQL variable), event j's order is firstOrder + j, not
// its orderID.
func eventsInsert(sku string, evs []eventRow, now time.Time, firstOrder string) (string, []any) {
	var q strings.Builder
	q.WriteString("INSERT INTO outbox_events (sku, seq, type, occurred_at, order_id, status, cancelled_by, stock) VALUES ")
	args := make([]any, 0, 7*len(evs))
	for j, e := range evs {
		if j > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(?, LAST_INSERT_ID() - " + strconv.Itoa(len(evs)-1-j) + ", ?, ?, ")
		args = append(args, sku, e.typ, now)
		if firstOrder != "" {
			q.WriteString(firstOrder + " + " + strconv.Itoa(j))
		} else {
			q.WriteString("?")
			args = append(args, nullID(e.orderID))
		}
		q.WriteString(", ?, ?, ?)")
		args = append(args, nullString(string(e.status)), nullString(e.cancelledBy), stockJSON(e.stock))
	}
	return q.String(), args
}

// nullID is id, or NULL for 0.
func nullID(id int64) any {
	if id == 0 {
		return nil
	}
	return id
}

// nullString is s, or NULL for "".
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// stockJSON is st as the stock column holds it (NULL for nil).
func stockJSON(st *events.Stock) any {
	if st == nil {
		return nil
	}
	b, _ := json.Marshal(st) // plain integers: cannot fail
	return string(b)
}

// stockEvent is the stock part of stock.changed for a row.
func stockEvent(s service.Stock) *events.Stock {
	return &events.Stock{Available: s.Available, Reserved: s.Reserved, Sold: s.Sold,
		PerBuyerLimit: s.PerBuyerLimit, PaymentWindowSeconds: s.PaymentWindowSeconds}
}

// transitionEvents is the events of rows moved to status to: confirmed,
// or cancelled (by buyer or admin) or expired.
func transitionEvents(rows []orderModel, to service.Status, cancelledBy string) []eventRow {
	typ := map[service.Status]string{service.StatusConfirmed: events.OrderConfirmed,
		service.StatusCancelled: events.OrderCancelled, service.StatusExpired: events.OrderExpired}[to]
	evs := make([]eventRow, len(rows))
	for i, r := range rows {
		evs[i] = eventRow{typ: typ, orderID: r.ID, status: to}
		if to == service.StatusCancelled {
			evs[i].cancelledBy = cancelledBy
		}
	}
	return evs
}
