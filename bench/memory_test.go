package bench

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/lock"
)

const memHolds = 10_000

// BenchmarkMemory holds 10,000 locks (distinct names) of one implementation
// and reports:
//   - go-heap-B/hold: HeapAlloc after runtime.GC() with all held, minus the
//     same before, over 10,000 (the library's retained objects: ours a *Hold
//     and what it keeps, incl. its lease timer and map entry; bsm a
//     *redislock.Lock; redsync a *redsync.Mutex, one per lock since it keeps
//     the acquired value);
//   - redis-B/lock: MEMORY USAGE (SAMPLES 0) of the lock key; ours also has
//     a fencing counter "redisson_lock_token:{name}" (redis-token-B/lock) that
//     lives on after the unlock with no TTL, and a full unlock writes an
//     unlock latch key with a 10s TTL (redis-latch-B/lock);
//   - redis-used-B/lock: INFO used_memory delta over 10,000 (includes
//     keyspace and expiry overhead; noisy, the Redis is shared).
//
// Leases: ours a watchdog lease (default 30s), bsm and redsync 30s TTLs.
// The workload is fixed (not b.N); ns/op is the time to acquire one lock.
func BenchmarkMemory(b *testing.B) {
	cleanupAfter(b)
	ctx := context.Background()
	b.Run("ours", func(b *testing.B) {
		fixedWorkload(b, func(report reportFunc) {
			r := newRDB(b, 1)
			c := lock.New(r)
			defer func() { _ = c.Close() }()
			prefix := keyName(b)
			holds := make([]*lock.Hold, memHolds+1)
			measureMemory(b, report, r, prefix, func(i int, name string) {
				h, err := c.Mutex(name).Lock(ctx)
				if err != nil {
					b.Fatal(err)
				}
				holds[i] = h
			}, func() {
				// Our companion keys of lock 0.
				name := prefix + "0"
				report(memUsage(b, r, "redisson_lock_token:{"+name+"}"), "redis-token-B/lock")
				if err := holds[0].Unlock(ctx); err != nil {
					b.Fatal(err)
				}
				latch := scanOne(b, r, "redisson_unlock_latch:{"+name+"}:*")
				report(memUsage(b, r, latch), "redis-latch-B/lock")
				for _, h := range holds[1:] {
					_ = h.Unlock(ctx)
				}
			})
			runtime.KeepAlive(holds)
		})
	})
	b.Run("bsm", func(b *testing.B) {
		fixedWorkload(b, func(report reportFunc) {
			r := newRDB(b, 1)
			c := redislock.New(r)
			locks := make([]*redislock.Lock, memHolds+1)
			measureMemory(b, report, r, keyName(b), func(i int, name string) {
				l, err := c.Obtain(ctx, name, 30*time.Second, nil)
				if err != nil {
					b.Fatal(err)
				}
				locks[i] = l
			}, func() {
				for _, l := range locks {
					_ = l.Release(ctx)
				}
			})
			runtime.KeepAlive(locks)
		})
	})
	b.Run("redsync", func(b *testing.B) {
		fixedWorkload(b, func(report reportFunc) {
			r := newRDB(b, 1)
			rs := redsync.New(goredis.NewPool(r))
			mus := make([]*redsync.Mutex, memHolds+1)
			measureMemory(b, report, r, keyName(b), func(i int, name string) {
				m := rs.NewMutex(name, redsync.WithExpiry(30*time.Second))
				if err := m.LockContext(ctx); err != nil {
					b.Fatal(err)
				}
				mus[i] = m
			}, func() {
				for _, m := range mus {
					_, _ = m.UnlockContext(ctx)
				}
			})
			runtime.KeepAlive(mus)
		})
	})
}

// measureMemory acquires a warm-up lock (index memHolds) and memHolds locks
// named prefix+i (index i) with acquire, reports the memory metrics, then
// calls release, which releases all of them.
func measureMemory(b *testing.B, report reportFunc, r *redis.Client, prefix string, acquire func(i int, name string), release func()) {
	names := make([]string, memHolds)
	for i := range names {
		names[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	acquire(memHolds, prefix+"warmup") // load scripts; slot memHolds
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	used0 := usedMemory(b, r)
	start := time.Now()
	for i, name := range names {
		acquire(i, name)
	}
	elapsed := time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	used1 := usedMemory(b, r)
	report(float64(elapsed.Nanoseconds())/memHolds, "ns/op")
	report((float64(ms1.HeapAlloc)-float64(ms0.HeapAlloc))/memHolds, "go-heap-B/hold")
	report(float64(ms1.TotalAlloc-ms0.TotalAlloc)/memHolds, "B/op")
	report(float64(ms1.Mallocs-ms0.Mallocs)/memHolds, "allocs/op")
	report(memUsage(b, r, names[0]), "redis-B/lock")
	report((used1-used0)/memHolds, "redis-used-B/lock")
	release()
}

func memUsage(b *testing.B, r *redis.Client, key string) float64 {
	n, err := r.MemoryUsage(context.Background(), key, 0).Result()
	if err != nil {
		b.Fatalf("MEMORY USAGE %s: %v", key, err)
	}
	return float64(n)
}

func usedMemory(b *testing.B, r *redis.Client) float64 {
	v, err := r.Do(context.Background(), "MEMORY", "STATS").Result()
	if err != nil {
		b.Fatal(err)
	}
	m, ok := v.(map[any]any)
	if !ok { // RESP2: a flat list of name, value
		l, _ := v.([]any)
		m = make(map[any]any)
		for i := 0; i+1 < len(l); i += 2 {
			m[l[i]] = l[i+1]
		}
	}
	n, _ := m["total.allocated"].(int64)
	return float64(n)
}

func scanOne(b *testing.B, r *redis.Client, pattern string) string {
	keys, _, err := r.Scan(context.Background(), 0, pattern, 0).Result()
	for len(keys) == 0 && err == nil {
		// SCAN may need more than one page on a big keyspace.
		var cur uint64
		for {
			var page []string
			page, cur, err = r.Scan(context.Background(), cur, pattern, 10000).Result()
			keys = append(keys, page...)
			if cur == 0 || err != nil || len(keys) > 0 {
				break
			}
		}
		if len(keys) == 0 {
			b.Fatalf("no key matches %s", pattern)
		}
	}
	if err != nil {
		b.Fatal(err)
	}
	return keys[0]
}
