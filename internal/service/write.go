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
// UPDATE also checks the per-buyer limit it read), retrying each conflict
// (retryConflicts).
func (s *Service) placeRetrying(ctx context.Context, d Deduction) (Order, error) {
	ctx, cancel := s.writeCtx(ctx)
	defer cancel()
	var o Order
	err := s.retryConflicts(ctx, func(int) error {
		var err error
		o, err = s.deduct(ctx, d)
		return err
	})
	return o, err
}

// retryConflicts runs attempt (given its number, from 0) until it returns
// anything but ErrConflict, at most VersionRetries+1 times, each in a new
// transaction: under REPEATABLE READ a retry in the same one would re-read
// its old snapshot and could never succeed. Each conflict is counted; after
// the last it returns ErrBusy. Lock-free writers (version) spread their
// retries over a few ms; ctx ending meanwhile is ErrUnavailable.
func (s *Service) retryConflicts(ctx context.Context, attempt func(n int) error) error {
	p := retryPolicy{on: ErrConflict, tries: s.cfg.VersionRetries + 1,
		counted:   func() { s.metrics.Conflict(string(s.cfg.Strategy)) },
		exhausted: func(n int) error { return fmt.Errorf("%w: %d version conflicts in a row", ErrBusy, n) }}
	if s.cfg.Strategy == StrategyVersion {
		p.pause = func(n int) time.Duration {
			return time.Duration(rand.Int64N(int64(time.Millisecond) << min(n, 4))) //nolint:gosec // G404: retry jitter, not a secret; nothing to guess
		}
	}
	return retry(ctx, p, attempt)
}

// retryPolicy says which error retry retries and how.
type retryPolicy struct {
	on        error                     // the error retried (errors.Is)
	tries     int                       // attempts at most
	pause     func(n int) time.Duration // the pause after failed attempt n; nil: none
	counted   func()                    // called on each retried error, if set
	exhausted func(tries int) error     // the answer after the last try; nil: its error
	cancelled func(last error) error    // the answer when ctx ends in a pause; nil: ErrUnavailable
}

// busyRetries retries a store that answered ErrBusy (a deadlock rolled
// back) a few times, a few ms apart.
var busyRetries = retryPolicy{on: ErrBusy, tries: 5, pause: func(n int) time.Duration { return time.Duration(n+1) * 5 * time.Millisecond },
	cancelled: func(last error) error { return last }}

// retry runs attempt (given its number, from 0) until it returns anything
// but p.on, at most p.tries times, pausing as p says. It returns the last
// attempt's answer (p.exhausted's after the last try), or p.cancelled's
// (default ErrUnavailable) when ctx ends during a pause.
func retry(ctx context.Context, p retryPolicy, attempt func(n int) error) error {
	for n := 0; ; n++ {
		err := attempt(n)
		if !errors.Is(err, p.on) {
			return err
		}
		if p.counted != nil {
			p.counted()
		}
		if n+1 >= p.tries {
			if p.exhausted != nil {
				return p.exhausted(n + 1)
			}
			return err
		}
		if p.pause == nil {
			continue
		}
		t := time.NewTimer(p.pause(n))
		select {
		case <-ctx.Done():
			t.Stop()
			if p.cancelled != nil {
				return p.cancelled(err)
			}
			return fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
		case <-t.C:
		}
	}
}
