package app

import (
	"context"
	"strconv"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/handler"
	"github.com/seckill/stock/internal/metrics"
)

// redisLimiter is the handler's RateLimiter on go-redis/redis_rate (GCRA in
// Redis, so every instance shares one budget per key: a client IP, or a
// buyer).
type redisLimiter struct {
	name     string
	l        *redis_rate.Limiter
	limit    redis_rate.Limit
	prefix   string
	failOpen bool
	metrics  *metrics.Metrics
	policy   string
}

func newRedisLimiter(rdb redis.UniversalClient, name, prefix string, perSec, burst int, failOpen bool, m *metrics.Metrics) *redisLimiter {
	return &redisLimiter{
		name:     name,
		l:        redis_rate.NewLimiter(rdb),
		limit:    redis_rate.Limit{Rate: perSec, Burst: burst, Period: 1e9},
		prefix:   prefix + "ratelimit:",
		failOpen: failOpen,
		metrics:  m,
		policy:   `"` + name + `";q=` + strconv.Itoa(perSec) + ";w=1;burst=" + strconv.Itoa(burst),
	}
}

// Allow implements handler.RateLimiter.
func (l *redisLimiter) Allow(ctx context.Context, key string) (handler.Decision, error) {
	d := handler.Decision{Policy: l.policy, Name: l.name}
	res, err := l.l.Allow(ctx, l.prefix+key, l.limit)
	if err != nil {
		d.Allowed = l.failOpen
		if l.failOpen {
			l.metrics.RateLimit("failed_open")
		} else {
			l.metrics.RateLimit("failed_closed")
			d.RetryAfter = 1e9
		}
		return d, err
	}
	d.Allowed = res.Allowed > 0
	d.Remaining, d.RetryAfter, d.Reset = res.Remaining, res.RetryAfter, res.ResetAfter
	if d.Allowed {
		l.metrics.RateLimit("allowed")
	} else {
		l.metrics.RateLimit("limited")
	}
	return d, nil
}
