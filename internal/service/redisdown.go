package service

import (
	"context"
	"fmt"
	"time"
)

// Redis down: while the lock cannot be asked for, orders take the DB-only
// path (the conditional UPDATE) or are refused, as configured.

// redisBackoff is how long the lock is skipped after Redis failed to answer.
const redisBackoff = time.Second

// placeWithoutRedis handles an order while Redis is unreachable: the conditional
// UPDATE alone keeps the stock exact (db-only), or the order is refused.
func (s *Service) placeWithoutRedis(ctx context.Context, d Deduction, cause error) (Order, error) {
	if cause != nil {
		s.redisFailed(ctx, cause)
	}
	if s.cfg.RejectOnRedisDown {
		return Order{}, fmt.Errorf("%w: redis unreachable", ErrUnavailable)
	}
	s.metrics.DBOnlyOrder()
	d.Write = WriteConditional
	return s.placeRetrying(ctx, d)
}

func (s *Service) skipLock() bool {
	return time.Now().UnixNano() < s.redisDownUntil.Load()
}

func (s *Service) redisFailed(ctx context.Context, err error) {
	s.redisDownUntil.Store(time.Now().Add(redisBackoff).UnixNano())
	if !s.redisDown.Swap(true) {
		if s.cfg.RejectOnRedisDown {
			s.log.ErrorContext(ctx, "redis unreachable: orders are refused with 503 until it answers", "mode", "reject", "err", err)
		} else {
			s.log.ErrorContext(ctx, "redis unreachable: orders bypass Redis (DB-only conditional UPDATE)", "mode", "db-only", "err", err)
		}
	}
}

func (s *Service) redisUp(ctx context.Context) {
	if s.redisDown.Swap(false) {
		s.log.InfoContext(ctx, "redis reachable again: orders go through Redis")
	}
}

// redisDown wraps the error of a lock that could not be asked for.
type redisDown struct{ err error }

func (e redisDown) Error() string { return "service: redis unreachable: " + e.err.Error() }

func (e redisDown) Unwrap() error { return e.err }
