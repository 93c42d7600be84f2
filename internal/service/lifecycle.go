package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/seckill/stock/internal/metrics"
)

// The order lifecycle: an order placed under a payment window is reserved
// until it is confirmed (paid), cancelled, or expired at its deadline; the
// units of a cancelled or expired order go back on sale. The store decides
// each transition with Decide, on the order's locked row and its own clock,
// and applies it in one transaction with the units it returns.

// Lifecycle reads and moves placed orders: an order, a buyer's page of
// them or the admin's page of all (read.go), confirm, cancel, and the sweep of expired reservations.
// The units it returns are made visible to the placement (its sold-out
// entry ends), the Redis counter and the other instances. Safe for
// concurrent use.
type Lifecycle struct {
	store   Store
	watch   stockWatch
	counter counterReturns
	events  StockEvents // nil: no other instance to tell
	timeout time.Duration
	log     *slog.Logger
	metrics *metrics.Metrics
}

// stockWatch is what a change of a SKU's stock must tell the placement of
// this instance (*Service): its sold-out entry ends and its restock
// sequence is learnt.
type stockWatch interface {
	StockChanged(sku string, seq int64)
}

// counterReturns gives the units of a return back to the Redis counter
// (*Reconciler; nothing without a counter).
type counterReturns interface {
	returned(ctx context.Context, r Return)
}

// MaxPaymentWindow bounds a SKU's payment window, in seconds (one day).
const MaxPaymentWindow = 86400

// Errors of the lifecycle: the order's status refuses the transition, or
// (ErrOrderAlreadyPaid) a confirmed order is confirmed by another payment.
var (
	ErrOrderExpired     = &Error{msg: "service: the order expired unpaid"}
	ErrOrderCancelled   = &Error{msg: "service: the order was cancelled"}
	ErrOrderConfirmed   = &Error{msg: "service: the order is confirmed"}
	ErrOrderAlreadyPaid = &Error{msg: "service: the order is already paid"}
)

// Deadline is a payment deadline. It is written in JSON as RFC 3339 in UTC
// with microseconds always shown (time.Time drops trailing zeros).
type Deadline struct{ time.Time }

// MarshalJSON writes d as "2006-01-02T15:04:05.000000Z".
func (d Deadline) MarshalJSON() ([]byte, error) {
	return []byte(d.UTC().Format(`"2006-01-02T15:04:05.000000Z07:00"`)), nil
}

// Op is a transition asked of an order.
type Op int

// The ops.
const (
	OpConfirm Op = iota // the payment arrived
	OpCancel            // the buyer (or the admin) gave the order up
	OpExpire            // the sweeper found it past its deadline
)

func (op Op) String() string {
	return [...]string{"confirm", "cancel", "expire"}[op]
}

// Transition is one op on one order.
type Transition struct {
	ID int64
	Op Op
	// Buyer, if not "", must have placed the order: another buyer's order
	// is ErrOrderNotFound, as for reads.
	Buyer      string
	PaymentRef string // stored by a confirm that moves the order, if not ""
}

// Return is units given back to a SKU by cancelled or expired orders in
// one transaction.
type Return struct {
	SKU        string
	Orders     int
	Units      int64
	Cause      Op    // OpCancel, or OpExpire (the sweeper's, or a late confirm or cancel's)
	RestockSeq int64 // the SKU's restock sequence after the return
}

// Outcome is what Store.Transition did.
type Outcome struct {
	Order  Order   // the order after the transition (as found, if it did not move)
	Moved  bool    // its status changed in this transaction
	Return *Return // the units it gave back, if it did
}

// Decide is the status an order moves to when t is asked of it at now, on
// the store's clock, and the answer: nil (moved, or already where t.Op
// leads), the refusal of the order's final status (ErrOrderExpired,
// ErrOrderCancelled, ErrOrderConfirmed: see refusal), or
// ErrOrderAlreadyPaid (see paidTwice). A reserved order past its deadline
// moves to expired whatever the op, and t.Op is answered ErrOrderExpired
// (OpExpire: nil). to == o.Status: nothing changes. It reads t's Op and
// PaymentRef.
func Decide(t Transition, o Order, now time.Time) (to Status, err error) {
	if o.Status != StatusReserved {
		if o.Status == statusOf(t.Op) {
			return o.Status, paidTwice(t, o) // idempotent, unless a second payment
		}
		return o.Status, refusal(t.Op, o.Status, o.ExpiresAt)
	}
	if o.ExpiresAt != nil && !now.Before(o.ExpiresAt.Time) {
		if t.Op == OpExpire {
			return StatusExpired, nil
		}
		return StatusExpired, refusal(t.Op, StatusExpired, o.ExpiresAt)
	}
	if t.Op == OpExpire {
		return StatusReserved, nil // not due yet
	}
	return statusOf(t.Op), nil
}

// paidTwice is the answer to t asked of an order already where t.Op leads:
// ErrOrderAlreadyPaid for a confirm whose payment_ref is not the one the
// confirmed order holds (both set), else nil (a replay).
func paidTwice(t Transition, o Order) error {
	if t.Op != OpConfirm || t.PaymentRef == "" || o.PaymentRef == "" || t.PaymentRef == o.PaymentRef {
		return nil
	}
	return fmt.Errorf("%w: with payment_ref %q; the second payment must be refunded", ErrOrderAlreadyPaid, o.PaymentRef)
}

// refusal is final status s refusing op, on an order whose deadline was
// deadline: s's error, saying when the payment window ended (expired) and,
// for a confirm, that the payment must be refunded (it came too late, or
// for an order given up).
func refusal(op Op, s Status, deadline *Deadline) error {
	var why []string
	if s == StatusExpired && deadline != nil {
		why = append(why, "its payment window ended at "+deadline.UTC().Format(time.RFC3339Nano))
	}
	if op == OpConfirm {
		why = append(why, "the payment must be refunded")
	}
	if len(why) == 0 {
		return statusError(s)
	}
	return fmt.Errorf("%w: %s", statusError(s), strings.Join(why, "; "))
}

// Confirm records the payment of a reserved order. It returns the order
// confirmed (at once, or by an earlier confirm with the same payment_ref,
// or where either has none), or ErrOrderNotFound, ErrOrderAlreadyPaid
// (confirmed with another payment_ref), ErrOrderExpired (the deadline
// passed: the order is expired, its units returned), ErrOrderCancelled,
// ErrInvalid, ErrBusy (deadlocks each time it was tried) or
// ErrUnavailable. Each of the three refusals says in its text that this
// payment must be refunded.
func (l *Lifecycle) Confirm(ctx context.Context, id int64, paymentRef string) (Order, error) {
	if paymentRef != "" && !ValidKey(paymentRef) {
		return Order{}, fmt.Errorf("%w: payment_ref must be 1-64 characters of [A-Za-z0-9._:-]", ErrInvalid)
	}
	return l.transition(ctx, Transition{ID: id, Op: OpConfirm, PaymentRef: paymentRef})
}

// Cancel gives up a reserved order of buyer ("": the admin, any buyer's)
// and returns its units. It returns the order cancelled (now or before), or
// ErrOrderNotFound (also for another buyer's order), ErrOrderConfirmed,
// ErrOrderExpired, ErrBusy or ErrUnavailable.
func (l *Lifecycle) Cancel(ctx context.Context, buyer string, id int64) (Order, error) {
	return l.transition(ctx, Transition{ID: id, Op: OpCancel, Buyer: buyer})
}

// transition applies t in the store, retried while the store is busy
// (a deadlock with another transition), and announces a return.
func (l *Lifecycle) transition(ctx context.Context, t Transition) (Order, error) {
	if t.ID <= 0 {
		return Order{}, fmt.Errorf("%w: order id must be a positive integer", ErrInvalid)
	}
	start := time.Now()
	wctx, cancel := writeCtx(ctx, l.timeout)
	defer cancel()
	var out Outcome
	err := retry(wctx, busyRetries, func(int) (err error) {
		out, err = l.store.Transition(wctx, t)
		return err
	})
	if out.Return != nil {
		l.returned(ctx, []Return{*out.Return})
	}
	if out.Moved {
		l.metrics.CountTransitions(string(out.Order.Status), t.Op.String(), 1)
	}
	l.metrics.ObserveTransition(t.Op.String(), outcome(err), time.Since(start))
	if _, refused := Refusal(err); err != nil && !refused {
		return Order{}, err
	}
	return out.Order, err
}

// outcome labels an answer for the metrics: ok, the refusing status,
// already_paid, not_found or error.
func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	if st, ok := Refusal(err); ok {
		return string(st)
	}
	if errors.Is(err, ErrOrderAlreadyPaid) {
		return "already_paid"
	}
	if errors.Is(err, ErrOrderNotFound) {
		return "not_found"
	}
	return "error"
}

// returned makes units given back visible: this instance's sold-out entry
// ends and learns the new restock sequence, the other instances hear of it
// (StockEvents), and the metrics count it.
func (l *Lifecycle) returned(ctx context.Context, rets []Return) {
	for _, r := range rets {
		l.watch.StockChanged(r.SKU, r.RestockSeq)
		l.metrics.CountReturn(r.Cause.String(), r.Units)
		l.counter.returned(ctx, r)
		if l.events == nil {
			continue
		}
		if err := l.events.StockChanged(context.WithoutCancel(ctx), r.SKU, r.RestockSeq); err != nil {
			l.log.WarnContext(ctx, "return not published: other instances see it at their next read of the SKU", "sku", r.SKU, "err", err)
		}
	}
}

// SweepBatch is the most orders one sweep transaction expires.
const SweepBatch = 200

// Sweep expires every reserved order past its deadline, SweepBatch at a
// time, and announces the units returned; then it records the sweeper's lag
// (the oldest reservation still overdue: ones another instance's sweep holds
// are skipped here). Several instances may sweep at once: each order is
// expired once (the store skips rows another sweep holds). It returns the
// orders it expired.
func (l *Lifecycle) Sweep(ctx context.Context) (int, error) {
	n := 0
	for {
		rets, err := l.store.ExpireDue(ctx, SweepBatch)
		if err != nil && !errors.Is(err, ErrBusy) {
			return n, err
		}
		l.returned(ctx, rets)
		got := 0
		for _, r := range rets {
			got += r.Orders
			l.metrics.CountTransitions(string(StatusExpired), OpExpire.String(), r.Orders)
		}
		n += got
		if got < SweepBatch || err != nil {
			break
		}
	}
	lag, err := l.store.OverdueFor(ctx)
	if err == nil {
		l.metrics.SetSweepLag(lag)
	}
	return n, err
}

// RunSweeper sweeps every interval until ctx ends. A failed sweep is logged
// (once per run of failures) and tried again at the next tick: the orders
// stay reserved in MySQL until one succeeds, so none is lost.
func (l *Lifecycle) RunSweeper(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, err := l.Sweep(ctx)
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			l.log.WarnContext(ctx, "expiry sweep failed; retried every interval", "err", err)
			failing = true
		case err == nil && failing:
			l.log.InfoContext(ctx, "expiry sweep works again")
			failing = false
		}
	}
}
