package servicetest

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/seckill/stock/events"
	"github.com/seckill/stock/internal/service"
)

// Transition applies t as service.Store.Transition says, at this store's
// clock, holding the order's SKU row as the MySQL store's UPDATE does.
func (m *MemStore) Transition(ctx context.Context, t service.Transition) (service.Outcome, error) {
	if err := ctxErr(ctx, "order transition"); err != nil {
		return service.Outcome{}, err
	}
	m.mu.Lock()
	o, ok := m.orders[t.ID]
	m.mu.Unlock()
	if !ok || t.Buyer != "" && o.Buyer != t.Buyer {
		return service.Outcome{}, service.ErrOrderNotFound
	}
	row := m.rowLock(o.SKU)
	defer row.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	o = m.orders[t.ID]
	to, decided := service.Decide(t, o, now())
	out := service.Outcome{Order: cloneOrder(o)}
	if to == o.Status {
		return out, decided
	}
	cause := t.Op
	if to == service.StatusExpired {
		cause = service.OpExpire
	}
	by := "admin"
	if t.Buyer != "" {
		by = "buyer"
	}
	rets := m.move([]int64{o.ID}, to, t.PaymentRef, cause, by)
	out.Order, out.Moved = cloneOrder(m.orders[t.ID]), true
	if len(rets) > 0 {
		out.Return = &rets[0]
	}
	return out, decided
}

// ExpireDue expires up to limit reserved orders past their deadline, the
// oldest deadlines first, and returns their units per SKU.
func (m *MemStore) ExpireDue(ctx context.Context, limit int) ([]service.Return, error) {
	if err := ctxErr(ctx, "expire orders"); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	at := now()
	var due []service.Order
	for _, o := range m.orders {
		if to, _ := service.Decide(service.Transition{Op: service.OpExpire}, o, at); to == service.StatusExpired && o.Status == service.StatusReserved {
			due = append(due, o)
		}
	}
	slices.SortFunc(due, func(a, b service.Order) int { return a.ExpiresAt.Compare(b.ExpiresAt.Time) })
	ids := make([]int64, 0, limit)
	for _, o := range due[:min(limit, len(due))] {
		ids = append(ids, o.ID)
	}
	return m.move(ids, service.StatusExpired, "", service.OpExpire, ""), nil
}

// OverdueFor is how long the oldest reserved order past its deadline has
// been overdue (0: none is).
func (m *MemStore) OverdueFor(ctx context.Context) (time.Duration, error) {
	if err := ctxErr(ctx, "overdue orders"); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	at, worst := now(), time.Duration(0)
	for _, o := range m.orders {
		if o.Status == service.StatusReserved && o.ExpiresAt != nil && !at.Before(o.ExpiresAt.Time) {
			worst = max(worst, at.Sub(o.ExpiresAt.Time))
		}
	}
	return worst, nil
}

// move sets the reserved orders ids to status to (storing paymentRef, if
// any, on confirmed only), takes their units off their buyers' unpaid
// counts, and moves them: to sold on a confirm; on
// a cancel or expiry, back to the buyer's allowance and, per SKU, to
// available as service.AfterReturn says (one restock-sequence change per
// SKU, as the MySQL store makes it), with a return ledger entry per order.
// It returns the returns per SKU, in SKU order. Each order's event is
// written with it (by: who cancels). The caller holds m.mu.
func (m *MemStore) move(ids []int64, to service.Status, paymentRef string, cause service.Op, by string) []service.Return {
	per := map[string]*service.Return{}
	for _, id := range ids {
		o := m.orders[id]
		o.Status = to
		if to == service.StatusConfirmed && paymentRef != "" {
			o.PaymentRef = paymentRef
		}
		m.orders[id] = o
		m.emit(o.SKU, transitionType[to], &o, by)
		st, q := m.stock[o.SKU], int64(o.Quantity)
		if k := (buyerSKU{o.Buyer, o.SKU}); m.unpaid[k] > 0 { // paid or returned: no longer unpaid
			m.unpaid[k] = max(0, m.unpaid[k]-q)
		}
		if to == service.StatusConfirmed {
			st.Reserved -= q
			st.Sold += q
			continue
		}
		if k := (buyerSKU{o.Buyer, o.SKU}); m.purchases[k] > 0 {
			m.purchases[k] = max(0, m.purchases[k]-q)
		}
		m.ledger[o.SKU] = append(m.ledger[o.SKU], ledgerEntry{kind: "return", delta: q, orderID: id})
		r := per[o.SKU]
		if r == nil {
			r = &service.Return{SKU: o.SKU, Cause: cause}
			per[o.SKU] = r
		}
		r.Orders++
		r.Units += q
	}
	rets := make([]service.Return, 0, len(per))
	for sku, r := range per {
		st := m.stock[sku]
		st.Stock = service.AfterReturn(st.Stock, r.Units, m.maxQuantity())
		r.RestockSeq = st.RestockSeq
		rets = append(rets, *r)
	}
	slices.SortFunc(rets, func(a, b service.Return) int { return cmp.Compare(a.SKU, b.SKU) })
	return rets
}

// transitionType is the event of an order moved to a status.
var transitionType = map[service.Status]string{service.StatusConfirmed: events.OrderConfirmed,
	service.StatusCancelled: events.OrderCancelled, service.StatusExpired: events.OrderExpired}

// emit records sku's next event, of order o when set (by: who cancels,
// on order.cancelled). The caller holds m.mu.
func (m *MemStore) emit(sku, typ string, o *service.Order, by string) {
	m.lastEvent++
	e := events.Event{ID: strconv.FormatInt(m.lastEvent, 10), Type: typ, OccurredAt: now(), SKU: sku, Seq: int64(len(m.events[sku]) + 1)}
	if o != nil {
		e.Order = &events.Order{ID: o.ID, Buyer: o.Buyer, Quantity: o.Quantity, Status: string(o.Status)}
		if o.ExpiresAt != nil {
			t := o.ExpiresAt.Time
			e.Order.ExpiresAt = &t
		}
		if typ == events.OrderConfirmed && o.PaymentRef != "" {
			ref := o.PaymentRef
			e.Order.PaymentRef = &ref
		}
		if typ == events.OrderCancelled {
			e.Order.CancelledBy = by
		}
	}
	m.events[sku] = append(m.events[sku], e)
}

// emitStock records stock.changed of the row st.
func (m *MemStore) emitStock(st service.Stock) {
	m.emit(st.SKU, events.StockChanged, nil, "")
	evs := m.events[st.SKU]
	evs[len(evs)-1].Stock = &events.Stock{Available: st.Available, Reserved: st.Reserved, Sold: st.Sold,
		PerBuyerLimit: st.PerBuyerLimit, PaymentWindowSeconds: st.PaymentWindowSeconds}
}

// EventsOf returns the events written for sku, in seq order.
func (m *MemStore) EventsOf(_ context.Context, sku string) ([]events.Event, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.events[sku]), nil
}
