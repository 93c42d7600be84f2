package app

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/testserver"
)

// newTestThrottle is an auth throttle of limit failures a window on the
// shared Redis, under a key prefix of the test's own.
func newTestThrottle(t testing.TB, addr string, limit int, window time.Duration, failOpen bool) *authThrottle {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := fmt.Sprintf("test:%s:%d:", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().UnixNano())
	t.Cleanup(func() { _ = rdb.Del(t.Context(), prefix+"authfail:k").Err() })
	return newAuthThrottle(rdb, prefix, limit, window, failOpen, nil)
}

// The limit-th failure is still answered; the next check, a right token's
// too, is refused for the rest of the window (a minute from the first
// failure; ended early here by expiring the count), and the count starts
// again after it. Checks that did not fail are not counted.
func TestAuthThrottleWindow(t *testing.T) {
	th := newTestThrottle(t, testserver.SharedRedis, 3, time.Minute, true)
	check := func(what string, failed, want bool) {
		t.Helper()
		d, err := th.Check(t.Context(), "k", failed)
		if err != nil || d.Allowed != want || !d.Allowed && (d.RetryAfter <= 0 || d.RetryAfter > time.Minute) {
			t.Fatalf("%s: Check(failed=%v) = %+v, %v; want allowed %v (refused: RetryAfter within the minute)", what, failed, d, err, want)
		}
	}
	for i := range 5 {
		check(fmt.Sprint("passed check ", i), false, true)
	}
	for i := range 3 {
		check(fmt.Sprint("failure ", i+1, " of 3"), true, true)
	}
	check("a passed check after 3 failures", false, false)
	check("failure 4", true, false)
	key := th.prefix + "k"
	if ttl := th.rdb.PTTL(t.Context(), key).Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("TTL of %s = %v; want within (0, 1m]", key, ttl)
	}
	if err := th.rdb.PExpire(t.Context(), key, 20*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if d, err := th.Check(t.Context(), "k", false); err == nil && d.Allowed {
			break
		}
		if time.Now().After(end) {
			t.Fatal("a passed check 5s after the count expired = refused; want allowed")
		}
	}
	check("failure 1 of a new window", true, true)
	if ttl := th.rdb.PTTL(t.Context(), key).Val(); ttl <= 50*time.Second {
		t.Fatalf("TTL of %s after the first failure of a new window = %v; want about a minute", key, ttl)
	}
}

// With Redis down the throttle answers as STOCK_RATE_ON_REDIS_DOWN says:
// open lets the request be answered, closed refuses it for a second.
func TestAuthThrottleRedisDown(t *testing.T) {
	down := fmt.Sprintf("127.0.0.1:%d", testserver.FreePort(t))
	for _, open := range []bool{true, false} {
		th := newTestThrottle(t, down, 3, time.Minute, open)
		for _, failed := range []bool{false, true} {
			d, err := th.Check(t.Context(), "k", failed)
			if err == nil || d.Allowed != open || !open && d.RetryAfter != time.Second {
				t.Errorf("Redis down, fail open %v, failed %v: Check = %+v, %v; want an error, allowed %v (refused: RetryAfter 1s)", open, failed, d, err, open)
			}
		}
	}
}

// BenchmarkAuthThrottlePassed is the throttle's cost to a request whose
// token passed (every order): one round trip to Redis, a script of two
// reads.
func BenchmarkAuthThrottlePassed(b *testing.B) {
	th := newTestThrottle(b, testserver.SharedRedis, 20, time.Minute, true)
	if _, err := th.Check(b.Context(), "k", true); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if d, err := th.Check(b.Context(), "k", false); err != nil || !d.Allowed {
			b.Fatalf("Check = %+v, %v", d, err)
		}
	}
}

// BenchmarkAuthThrottleFailed is the cost of counting a failed check.
func BenchmarkAuthThrottleFailed(b *testing.B) {
	th := newTestThrottle(b, testserver.SharedRedis, 1<<30, time.Minute, true)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := th.Check(b.Context(), "k", true); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRedisRoundTrip is one PING to the shared Redis: the floor of
// BenchmarkAuthThrottlePassed, which is one round trip too.
func BenchmarkRedisRoundTrip(b *testing.B) {
	th := newTestThrottle(b, testserver.SharedRedis, 20, time.Minute, true)
	b.ReportAllocs()
	for b.Loop() {
		if err := th.rdb.Ping(b.Context()).Err(); err != nil {
			b.Fatal(err)
		}
	}
}
