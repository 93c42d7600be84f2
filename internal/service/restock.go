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

// SetStock creates a SKU or sets its available count, per-buyer limit and
// payment window. Under the strategies
// that lock, it takes the SKU lock like any writer of the row, so a restock
// never moves the version under a batch (a backstop conflict then means the
// lock really was violated); while Redis is unreachable it writes without
// it. Setting the current value changes nothing. Errors: ErrInvalid, ErrBusy
// (the lock was not had within LockWait), ErrUnavailable.
func (s *Service) SetStock(ctx context.Context, sku string, set StockSetting) (Stock, error) {
	if err := validSetting(sku, set); err != nil {
		return Stock{}, err
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
	st, err := s.store.SetStock(wctx, sku, set)
	s.soldOut.drop(sku) // after the write, committed or not known to be
	if err == nil {
		s.seqs.learn(sku, st.RestockSeq)
		s.counterRestocked(wctx, st)
	} else if s.cfg.Counter != nil { // the write may have committed: the reconcile checks
		s.counters.track(sku)
	}
	if s.cfg.Events != nil {
		if perr := s.cfg.Events.StockChanged(wctx, sku, max(st.RestockSeq, s.seqs.known(sku))); perr != nil {
			s.log.WarnContext(ctx, "stock change not published: other instances see it at their next read of the SKU", "sku", sku, "err", perr)
		}
	}
	return st, err
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
	}
	return nil
}

// StockChanged forgets what the sold-out fast path knows of sku and learns
// its restock sequence, seq, so that orders arriving from now on are not
// refused as admitted before the change (restocked.go); the wiring calls it
// for every change another instance publishes. An empty sku forgets every
// SKU (after changes may have been missed, such as a reconnect of the
// subscription); their sequences are learnt from the next orders' answers.
func (s *Service) StockChanged(sku string, seq int64) {
	if sku == "" {
		s.soldOut.dropAll()
		return
	}
	s.soldOut.drop(sku)
	s.seqs.learn(sku, seq)
}
