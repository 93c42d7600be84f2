package service

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// The database writes of the strategies: one transaction, and the versioned
// UPDATE retried in new transactions.

// placeInOneTx writes d by the strategy's write in one transaction (none,
// for-update).
func (s *Service) placeInOneTx(ctx context.Context, d Deduction) (Order, error) {
	d.Write = s.info.Write
	return s.deductNow(ctx, d)
}

// placeGuarded writes d by the strategy's guarded write, retried on a
// conflict (version, conditional).
func (s *Service) placeGuarded(ctx context.Context, d Deduction) (Order, error) {
	d.Write = s.info.Write
	return s.placeRetrying(ctx, d)
}

// deductNow runs one transaction, bounded from now.
func (s *Service) deductNow(ctx context.Context, d Deduction) (Order, error) {
	wctx, cancel := s.writeCtx(ctx)
	defer cancel()
	return s.deduct(wctx, d)
}

func (s *Service) deduct(ctx context.Context, d Deduction) (Order, error) {
	if h := s.cfg.CriticalSectionHook; h != nil {
		before := d.BeforeCommit
		d.BeforeCommit = func() error {
			h()
			if before != nil {
				return before()
			}
			return nil
		}
	}
	ctx, span := s.span(ctx, "stock.transaction")
	if span.IsRecording() {
		span.SetAttributes(attrDBSystem.String("mysql"), attrSKU.String(d.SKU), attrWrite.String(writeNames[d.Write]))
	}
	o, err := s.store.Deduct(ctx, d)
	endTx(span, err)
	return o, err
}

// placeRetrying runs d's guarded write (versioned, or conditional, whose
// UPDATE also checks the per-buyer limit it read), retrying each conflict in
// a NEW transaction: under REPEATABLE READ a retry in the same one would
// re-read its old snapshot and could never succeed.
func (s *Service) placeRetrying(ctx context.Context, d Deduction) (Order, error) {
	ctx, cancel := s.writeCtx(ctx)
	defer cancel()
	for attempt := 0; ; attempt++ {
		o, err := s.deduct(ctx, d)
		if !errors.Is(err, ErrConflict) {
			return o, err
		}
		s.metrics.Conflict(string(s.cfg.Strategy))
		if attempt >= s.cfg.VersionRetries {
			return Order{}, fmt.Errorf("%w: %d version conflicts in a row", ErrBusy, attempt+1)
		}
		if s.cfg.Strategy == StrategyVersion {
			// Spread the retries of lock-free writers over a few ms.
			t := time.NewTimer(time.Duration(rand.Int64N(int64(time.Millisecond) << min(attempt, 4)))) //nolint:gosec // G404: retry jitter, not a secret; nothing to guess
			select {
			case <-ctx.Done():
				t.Stop()
				return Order{}, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
			case <-t.C:
			}
		}
	}
}
