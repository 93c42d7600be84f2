package service

import (
	"context"
	"errors"
	"fmt"
)

// Restock: the admin's write of a SKU's stock, and the changes other
// instances publish.

// MaxStock bounds the available count of the admin API.
const MaxStock = 1_000_000_000

// SetStock creates a SKU or sets its available count. Under the strategies
// that lock, it takes the SKU lock like any writer of the row, so a restock
// never moves the version under a batch (a backstop conflict then means the
// lock really was violated); while Redis is unreachable it writes without
// it. Setting the current value changes nothing. Errors: ErrInvalid, ErrBusy
// (the lock was not had within LockWait), ErrUnavailable.
func (s *Service) SetStock(ctx context.Context, sku string, available, perBuyerLimit int64) (Stock, error) {
	if !ValidKey(sku) {
		return Stock{}, fmt.Errorf("%w: sku must be 1-64 characters of [A-Za-z0-9._:-]", ErrInvalid)
	}
	if available < 0 || available > MaxStock {
		return Stock{}, fmt.Errorf("%w: available must be an integer from 0 to %d", ErrInvalid, MaxStock)
	}
	if perBuyerLimit < 0 || perBuyerLimit > MaxStock {
		return Stock{}, fmt.Errorf("%w: per_buyer_limit must be an integer from 0 (no limit) to %d", ErrInvalid, MaxStock)
	}
	if s.usesLock() && !s.skipLock() {
		h, err := s.takeLock(ctx, sku)
		var down redisDown
		switch {
		case errors.As(err, &down):
			s.redisFailed(ctx, down.err)
		case err != nil:
			return Stock{}, err
		default:
			defer s.releaseLock(ctx, h)
		}
	}
	wctx, cancel := s.writeCtx(ctx)
	defer cancel()
	st, err := s.store.SetStock(wctx, sku, available, perBuyerLimit)
	// After the write, committed or not known to be: a load racing it is
	// dropped too.
	s.soldOut.drop(sku)
	if s.cfg.Events != nil {
		if perr := s.cfg.Events.StockChanged(wctx, sku); perr != nil {
			s.log.WarnContext(ctx, "stock change not published: other instances see it within the sold-out TTL", "sku", sku, "ttl", s.cfg.SoldOutTTL, "err", perr)
		}
	}
	return st, err
}

// StockChanged forgets what the sold-out fast path knows of sku; the wiring
// calls it for every change another instance publishes. An empty sku
// forgets every SKU (after changes may have been missed, such as a
// reconnect of the subscription).
func (s *Service) StockChanged(sku string) {
	if sku == "" {
		s.soldOut.dropAll()
		return
	}
	s.soldOut.drop(sku)
}
