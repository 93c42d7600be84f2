package service

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/seckill/stock/internal/metrics"
)

// The database writes of the strategies: one transaction, and the versioned
// UPDATE retried in new transactions.

// placeInOneTx writes d by the strategy's write in one transaction (none,
// for-update).
func (s *Service) placeInOneTx(ctx context.Context, d Deduction) (Order, error) {
	d.Write = s.info.Write
	return s.writes.now(ctx, d)
}

// placeGuarded writes d by the strategy's guarded write, retried on a
// conflict (version, conditional).
func (s *Service) placeGuarded(ctx context.Context, d Deduction) (Order, error) {
	d.Write = s.info.Write
	return s.writes.retrying(ctx, d)
}

// writer runs the strategies' transactions, each traced and bounded by
// Config.WriteTimeout: one attempt, or the guarded write retried.
type writer struct {
	store   Store
	cfg     Config // Strategy, VersionRetries, WriteTimeout, CriticalSectionHook
	metrics *metrics.Metrics
	trace   tracer
}

// writeCtx bounds a write that starts now. Once a write starts it finishes,
// even if the client hangs up: a half-done order helps no one, and the
// client's retry with the same key then gets the committed order back.
func writeCtx(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), timeout)
}

// now runs one transaction, bounded from now.
func (w *writer) now(ctx context.Context, d Deduction) (Order, error) {
	wctx, cancel := writeCtx(ctx, w.cfg.WriteTimeout)
	defer cancel()
	return w.deduct(wctx, d)
}

// deduct runs one transaction of d, with the critical-section hook.
func (w *writer) deduct(ctx context.Context, d Deduction) (Order, error) {
	if h := w.cfg.CriticalSectionHook; h != nil {
		before := d.BeforeCommit
		d.BeforeCommit = func() error {
			h()
			if before != nil {
				return before()
			}
			return nil
		}
	}
	ctx, span := w.trace.span(ctx, "stock.transaction")
	if span.IsRecording() {
		span.SetAttributes(attrDBSystem.String("mysql"), attrSKU.String(d.SKU), attrWrite.String(writeNames[d.Write]))
	}
	o, err := w.store.Deduct(ctx, d)
	endTx(span, err)
	return o, err
}

// retrying runs d's guarded write (versioned, or conditional, whose
// UPDATE also checks the per-buyer limit it read), retrying each conflict
// (retryConflicts).
func (w *writer) retrying(ctx context.Context, d Deduction) (Order, error) {
	ctx, cancel := writeCtx(ctx, w.cfg.WriteTimeout)
	defer cancel()
	var o Order
	err := w.retryConflicts(ctx, func(int) error {
		var err error
		o, err = w.deduct(ctx, d)
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
func (w *writer) retryConflicts(ctx context.Context, attempt func(n int) error) error {
	p := retryPolicy{on: ErrConflict, tries: w.cfg.VersionRetries + 1,
		counted:   func() { w.metrics.Conflict(string(w.cfg.Strategy)) },
		exhausted: func(n int) error { return fmt.Errorf("%w: %d version conflicts in a row", ErrBusy, n) }}
	if w.cfg.Strategy == StrategyVersion {
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
