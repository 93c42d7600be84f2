package app

import (
	"context"
	"fmt"
	"strconv"
	"time"

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

// authThrottle is the handler's AuthThrottle in Redis: per client key, a
// counter of failed token checks that expires a window after the first
// failure, so every instance shares one count. Every check is one run of
// one script (a read when the token passed, an increment when it failed),
// so a refused client cannot tell from the answer's timing whether its
// token was right.
type authThrottle struct {
	rdb      redis.UniversalClient
	prefix   string
	limit    int64
	window   time.Duration
	failOpen bool
	metrics  *metrics.Metrics
	// blocks is this instance's view of the refused clients (authblocks.go):
	// while it is live, a right token of a client not in it is answered
	// without a round trip to Redis.
	blocks *authBlocks
}

func newAuthThrottle(rdb redis.UniversalClient, prefix string, limit int, window time.Duration, failOpen bool, m *metrics.Metrics) *authThrottle {
	return &authThrottle{rdb: rdb, prefix: prefix + "authfail:", limit: int64(limit), window: window, failOpen: failOpen, metrics: m,
		blocks: &authBlocks{until: map[string]time.Time{}}}
}

// countFailures returns the failures counted in KEYS[1] and the
// milliseconds left of their window; with ARGV[2] = 1 it counts one more
// first, starting a window of ARGV[1] milliseconds at the first failure (a
// count left without an expiry gets one too).
var countFailures = redis.NewScript(`
if ARGV[2] ~= '1' then
  return {tonumber(redis.call('GET', KEYS[1]) or '0'), redis.call('PTTL', KEYS[1])}
end
local n = redis.call('INCR', KEYS[1])
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  ttl = tonumber(ARGV[1])
end
return {n, ttl}
`)

// Check implements handler.AuthThrottle: a client is refused once it has
// used up the limit of failures in its window (so at most limit token
// guesses a window reach a check's answer).
func (t *authThrottle) Check(ctx context.Context, key string, failed bool) (handler.Decision, error) {
	if !failed && t.blocks.clear(key) {
		return handler.Decision{Allowed: true}, nil
	}
	inc := 0
	if failed {
		inc = 1
	}
	v, err := countFailures.Run(ctx, t.rdb, []string{t.prefix + key}, t.window.Milliseconds(), inc).Int64Slice()
	if err == nil && len(v) != 2 {
		err = fmt.Errorf("a reply of %d values", len(v))
	}
	if err != nil {
		d := handler.Decision{Allowed: t.failOpen}
		if t.failOpen {
			t.metrics.RateLimit("failed_open")
		} else {
			t.metrics.RateLimit("failed_closed")
			d.RetryAfter = time.Second
		}
		return d, fmt.Errorf("auth throttle: %w", err)
	}
	n, ttl := v[0], time.Duration(max(v[1], 0))*time.Millisecond
	// The limit-th failure is still answered (401); every request after it
	// is refused.
	d := handler.Decision{Allowed: n < t.limit, RetryAfter: ttl, Reset: ttl}
	if failed {
		d.Allowed = n <= t.limit
	}
	t.noteCount(ctx, key, n, ttl, failed)
	if !d.Allowed {
		t.metrics.RateLimit("limited")
	}
	return d, nil
}
