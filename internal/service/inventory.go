package service

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Stock administration: a SKU's stock row set by the admin, read, and
// audited.

// Inventory sets, reads and audits a SKU's stock. A change is made visible
// to the placement of this instance (its sold-out entry ends), the Redis
// counter and the other instances. Safe for concurrent use.
type Inventory struct {
	store   Store
	watch   placementState
	counter counterRestocks
	locks   writeLocks
	events  StockEvents // nil: no other instance to tell
	timeout time.Duration
	log     *slog.Logger
}

// placementState is what a restock must tell the placement of this
// instance (*Service), and the restock sequence it knows of a SKU.
type placementState interface {
	stockWatch
	knownSeq(sku string) int64
}

// counterRestocks is what a restock must tell the counter's reconcile
// (*Reconciler): the counter seeded again, or the SKU checked when the
// write's outcome is unknown.
type counterRestocks interface {
	restocked(ctx context.Context, st Stock)
	track(sku string)
}

// writeLocks takes the SKU lock for a write of the row other than an
// order's (*skuLocks).
type writeLocks interface {
	forWrite(ctx context.Context, sku string) (release func(), err error)
}

// MaxStock bounds the available count of the admin API.
const MaxStock = 1_000_000_000

// SetStock creates a SKU or sets its available count, per-buyer limit,
// payment window, schedule and unpaid cap. Under the strategies
// that lock, it takes the SKU lock like any writer of the row, so a restock
// never moves the version under a batch (a backstop conflict then means the
// lock really was violated); while Redis is unreachable it writes without
// it. Setting the current value changes nothing. Errors: ErrInvalid, ErrBusy
// (the lock was not had within LockWait), ErrUnavailable.
func (inv *Inventory) SetStock(ctx context.Context, sku string, set StockSetting) (Stock, error) {
	if err := validSetting(sku, set); err != nil {
		return Stock{}, err
	}
	release, err := inv.locks.forWrite(ctx, sku)
	if err != nil {
		return Stock{}, err
	}
	defer release()
	wctx, cancel := writeCtx(ctx, inv.timeout)
	defer cancel()
	st, err := inv.store.SetStock(wctx, sku, set)
	// After the write, committed or not known to be: the sold-out entry
	// ends (a failed write's zero sequence teaches nothing).
	inv.watch.StockChanged(sku, st.RestockSeq)
	if err == nil {
		inv.counter.restocked(wctx, st)
	} else { // the write may have committed: the reconcile checks
		inv.counter.track(sku)
	}
	if inv.events != nil {
		if perr := inv.events.StockChanged(wctx, sku, max(st.RestockSeq, inv.watch.knownSeq(sku))); perr != nil {
			inv.log.WarnContext(ctx, "stock change not published: other instances see it at their next read of the SKU", "sku", sku, "err", perr)
		}
	}
	return st, err
}

// Stock returns a SKU's stock, or ErrInvalid / ErrUnknownSKU.
func (inv *Inventory) Stock(ctx context.Context, sku string) (Stock, error) {
	if !ValidKey(sku) {
		return Stock{}, fmt.Errorf("%w: sku must be 1-64 characters of [A-Za-z0-9._:-]", ErrInvalid)
	}
	return inv.store.Stock(ctx, sku)
}

// Audit reconciles a SKU. Errors: ErrInvalid, ErrUnknownSKU, ErrUnavailable.
func (inv *Inventory) Audit(ctx context.Context, sku string) (Audit, error) {
	if !ValidKey(sku) {
		return Audit{}, fmt.Errorf("%w: sku must be 1-64 characters of [A-Za-z0-9._:-]", ErrInvalid)
	}
	return inv.store.Audit(ctx, sku)
}

// validSetting checks the admin's setting of sku, or returns ErrInvalid
// naming the field.
func validSetting(sku string, set StockSetting) error {
	switch {
	case !ValidKey(sku):
		return fmt.Errorf("%w: sku must be 1-64 characters of [A-Za-z0-9._:-]", ErrInvalid)
	case set.Available < 0 || set.Available > MaxStock:
		return fmt.Errorf("%w: available must be an integer from 0 to %d", ErrInvalid, MaxStock)
	case set.PerBuyerLimit < 0 || set.PerBuyerLimit > MaxStock:
		return fmt.Errorf("%w: per_buyer_limit must be an integer from 0 (no limit) to %d", ErrInvalid, MaxStock)
	case set.PaymentWindowSeconds < 0 || set.PaymentWindowSeconds > MaxPaymentWindow:
		return fmt.Errorf("%w: payment_window_seconds must be an integer from 0 (confirmed at once) to %d", ErrInvalid, MaxPaymentWindow)
	case set.MaxUnpaid.Cap < 0 || set.MaxUnpaid.Cap > MaxUnpaidCap || !set.MaxUnpaid.Set && set.MaxUnpaid.Cap != 0:
		return fmt.Errorf("%w: max_unpaid_per_buyer must be an integer from 1 to %d, or null (no cap)", ErrInvalid, MaxUnpaidCap)
	case !inScheduleRange(set.StartsAt.At) || !inScheduleRange(set.EndsAt.At):
		return fmt.Errorf("%w: sale_starts_at and sale_ends_at must be from year %d to %d", ErrInvalid, minScheduleYear, maxScheduleYear)
	}
	_, err := set.ScheduleAfter(Schedule{}) // both given: the end after the start
	return err
}

// The years a schedule's instant may name (what a DATETIME column holds,
// narrowed to the plausible).
const minScheduleYear, maxScheduleYear = 2000, 9999

func inScheduleRange(i Instant) bool {
	return i.IsZero() || i.Year() >= minScheduleYear && i.Year() <= maxScheduleYear
}
