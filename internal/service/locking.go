package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/seckill/stock/internal/metrics"
)

// The lock path: the per-SKU lock through the Locker (one of the gates of
// internal/skulock), and the `lock` strategy, which trusts it alone.

// Hold is a held SKU lock (a *lock.Hold).
type Hold interface {
	Context() context.Context
	Err() error // nil while held; an error once the lock is lost
	Fence() int64
	Unlock(ctx context.Context) error
}

// Locker takes the per-SKU lock (internal/skulock adapts each gate).
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
	if s.redis.skip() {
		return s.placeWithoutRedis(ctx, d, nil)
	}
	if !s.queues.Enter(d.SKU) {
		return Order{}, errQueueFull(s.cfg.QueueMax)
	}
	h, err := s.locks.take(ctx, d.SKU)
	s.queues.Exit(d.SKU)
	var down redisDown
	switch {
	case errors.As(err, &down):
		return s.placeWithoutRedis(ctx, d, down.err)
	case err != nil:
		return Order{}, err
	}
	defer s.locks.release(ctx, h)
	fence := h.Fence()
	d.Fence = &fence
	d.Write = WritePlain
	return s.writes.now(ctx, d)
}

// skuLocks takes and releases the SKU lock, counting and tracing each
// take, and tells redisHealth when the lock's store did not answer.
type skuLocks struct {
	locker      Locker
	uses        bool // the strategy takes the lock (StrategyInfo.UsesLock)
	wait, lease time.Duration
	redis       *redisHealth
	trace       tracer
	log         *slog.Logger
	metrics     *metrics.Metrics
}

// heldLock is a held SKU lock and when it was taken.
type heldLock struct {
	Hold
	sku string
	at  time.Time
}

// take takes the SKU lock within LockWait, counting the outcome
// ("abandoned": a sold-out notice ended the wait). It returns ErrBusy (wait
// ran out), ErrUnavailable (ctx ended) or a redisDown.
func (l *skuLocks) take(ctx context.Context, sku string) (_ *heldLock, err error) {
	ctx, span := l.trace.span(ctx, "stock.lock")
	start := time.Now()
	result := "acquired"
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(attrSKU.String(sku), attrLockGot.Bool(result == "acquired"),
				attrLockWait.Float64(float64(time.Since(start))/float64(time.Millisecond)))
		}
		endSpan(span, result, err)
	}()
	h, err := l.locker.TryLock(ctx, sku, l.wait, l.lease)
	wait := time.Since(start)
	switch {
	case errors.Is(err, ErrLockNotObtained):
		result = "timeout"
		if errors.Is(context.Cause(ctx), errSoldOutElsewhere) {
			result = "abandoned"
		}
		l.metrics.Lock(result, wait)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
		}
		return nil, fmt.Errorf("%w: lock not obtained within %v", ErrBusy, l.wait)
	case err != nil:
		result = "error"
		l.metrics.Lock(result, wait)
		return nil, redisDown{err}
	}
	l.metrics.Lock(result, wait)
	l.redis.up(ctx)
	return &heldLock{Hold: h, sku: sku, at: time.Now()}, nil
}

// release unlocks on a context of its own, so a cancelled request does
// not leave the lock held; ctx (the request's or the batch's) is only for
// the log.
func (l *skuLocks) release(ctx context.Context, h *heldLock) {
	l.metrics.Held(time.Since(h.at))
	uctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := h.Unlock(uctx); err != nil {
		l.log.WarnContext(ctx, "unlock failed", "sku", h.sku, "err", err)
	}
}

// forWrite takes the SKU lock for a writer of the row other than an order
// (a restock), under the strategies that lock: like any writer, so the
// version never moves under a batch. While Redis is unreachable it skips
// the lock. release is never nil when err is nil. Errors: as take's, but
// for Redis down.
func (l *skuLocks) forWrite(ctx context.Context, sku string) (release func(), err error) {
	if !l.uses || l.redis.skip() {
		return func() {}, nil
	}
	h, err := l.take(ctx, sku)
	var down redisDown
	switch {
	case errors.As(err, &down):
		l.redis.failed(ctx, down.err)
		return func() {}, nil
	case err != nil:
		return nil, err
	}
	return func() { l.release(ctx, h) }, nil
}
