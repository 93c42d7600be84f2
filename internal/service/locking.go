package service

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The lock path: the per-SKU lock through the Locker, and the `lock`
// strategy, which trusts it alone.

// Hold is a held SKU lock (a *lock.Hold).
type Hold interface {
	Context() context.Context
	Err() error // nil while held; an error once the lock is lost
	Fence() int64
	Unlock(ctx context.Context) error
}

// Locker takes the per-SKU lock (internal/skulock adapts the Redis lock).
// Errors: ErrLockNotObtained when the wait ran out (joined with the
// context's error when it ended); anything else means the lock's store
// (Redis) could not be asked.
type Locker interface {
	TryLock(ctx context.Context, sku string, wait, lease time.Duration) (Hold, error)
}

// placeUnderLock is the `lock` strategy, deliberately the naive tutorial
// version: lock, then read, check and write plain values, trusting the lock
// (the fault runs show the cost). While Redis is down it takes the DB-only
// path.
func (s *Service) placeUnderLock(ctx context.Context, d Deduction) (Order, error) {
	if s.skipLock() {
		return s.placeWithoutRedis(ctx, d, nil)
	}
	if !s.batches.Enter(d.SKU) {
		return Order{}, errLineFull(s.cfg.QueueMax)
	}
	h, err := s.takeLock(ctx, d.SKU)
	s.batches.Exit(d.SKU)
	var down redisDown
	switch {
	case errors.As(err, &down):
		return s.placeWithoutRedis(ctx, d, down.err)
	case err != nil:
		return Order{}, err
	}
	defer s.releaseLock(ctx, h)
	fence := h.Fence()
	d.Fence = &fence
	d.Write = WritePlain
	return s.deductNow(ctx, d)
}

// heldLock is a held SKU lock and when it was taken.
type heldLock struct {
	Hold
	sku string
	at  time.Time
}

// takeLock takes the SKU lock within LockWait, counting the outcome. It
// returns ErrBusy (wait ran out), ErrUnavailable (ctx ended) or a redisDown.
func (s *Service) takeLock(ctx context.Context, sku string) (_ *heldLock, err error) {
	ctx, span := s.span(ctx, "stock.lock")
	start := time.Now()
	result := "acquired"
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(attrSKU.String(sku), attrLockGot.Bool(result == "acquired"),
				attrLockWait.Float64(float64(time.Since(start))/float64(time.Millisecond)))
		}
		endSpan(span, result, err)
	}()
	h, err := s.locks.TryLock(ctx, sku, s.cfg.LockWait, s.cfg.LockLease)
	wait := time.Since(start)
	switch {
	case errors.Is(err, ErrLockNotObtained):
		result = "timeout"
		s.metrics.Lock(result, wait)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
		}
		return nil, fmt.Errorf("%w: lock not obtained within %v", ErrBusy, s.cfg.LockWait)
	case err != nil:
		result = "error"
		s.metrics.Lock(result, wait)
		return nil, redisDown{err}
	}
	s.metrics.Lock(result, wait)
	s.redisUp(ctx)
	return &heldLock{Hold: h, sku: sku, at: time.Now()}, nil
}

// releaseLock unlocks on a context of its own, so a cancelled request does
// not leave the lock held; ctx (the request's or the batch's) is only for
// the log.
func (s *Service) releaseLock(ctx context.Context, h *heldLock) {
	s.metrics.Held(time.Since(h.at))
	uctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := h.Unlock(uctx); err != nil {
		s.log.WarnContext(ctx, "unlock failed", "sku", h.sku, "err", err)
	}
}
