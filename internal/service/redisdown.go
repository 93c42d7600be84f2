package service

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// Redis down: while the lock cannot be asked for, orders take the DB-only
// path (the conditional UPDATE) or are refused, as configured.

// redisBackoff is how long the lock is skipped after Redis failed to answer.
const redisBackoff = time.Second

// redisHealth is what this instance knows of Redis: whether to skip the
// lock for now, and whether the outage was logged. Safe for concurrent use.
type redisHealth struct {
	reject bool // Config.RejectOnRedisDown()
	log    *slog.Logger

	downUntil atomic.Int64 // unix nanos; skip the lock until then
	down      atomic.Bool  // for logging once per outage
}

// skip reports whether Redis failed within redisBackoff.
func (r *redisHealth) skip() bool {
	return time.Now().UnixNano() < r.downUntil.Load()
}

// failed records that Redis did not answer (err), logging the first failure
// of an outage.
func (r *redisHealth) failed(ctx context.Context, err error) {
	r.downUntil.Store(time.Now().Add(redisBackoff).UnixNano())
	if !r.down.Swap(true) {
		if r.reject {
			r.log.ErrorContext(ctx, "redis unreachable: orders are refused with 503 until it answers", "mode", "reject", "err", err)
		} else {
			r.log.ErrorContext(ctx, "redis unreachable: orders bypass Redis (DB-only conditional UPDATE)", "mode", "db-only", "err", err)
		}
	}
}

// up records that Redis answered, logging the end of an outage.
func (r *redisHealth) up(ctx context.Context) {
	if r.down.Swap(false) {
		r.log.InfoContext(ctx, "redis reachable again: orders go through Redis")
	}
}

// placeWithoutRedis handles an order while Redis is unreachable: the conditional
// UPDATE alone keeps the stock exact (db-only), or the order is refused.
func (s *Service) placeWithoutRedis(ctx context.Context, d Deduction, cause error) (Order, error) {
	if cause != nil {
		s.redis.failed(ctx, cause)
	}
	if s.cfg.RejectOnRedisDown() {
		return Order{}, fmt.Errorf("%w: redis unreachable", ErrUnavailable)
	}
	s.metrics.DBOnlyOrder()
	d.Write = WriteConditional
	return s.writes.retrying(ctx, d)
}

// redisDown wraps the error of a lock that could not be asked for.
type redisDown struct{ err error }

func (e redisDown) Error() string { return "service: redis unreachable: " + e.err.Error() }

func (e redisDown) Unwrap() error { return e.err }
