package lock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/lock"
)

func redisZ(score float64, member string) redis.Z { return redis.Z{Score: score, Member: member} }

// Waiting clients are served in turn: under contention no client starves.
func TestFairBetweenClients(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := lockName(t)
	const clients, goroutines = 3, 4
	var served [clients]atomic.Int64
	stop := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		c := newClient(t)
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(stop) {
					h, err := c.Mutex(name).Lock(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					for s := time.Now(); time.Since(s) < 500*time.Microsecond; {
					}
					served[i].Add(1)
					_ = h.Unlock(ctx)
				}
			}()
		}
	}
	wg.Wait()
	lo, hi := served[0].Load(), served[0].Load()
	for i := range served {
		lo, hi = min(lo, served[i].Load()), max(hi, served[i].Load())
	}
	if lo == 0 || float64(hi)/float64(lo) > 1.3 {
		t.Fatalf("requests served per client = %d, %d, %d; want within 30%% of each other", served[0].Load(), served[1].Load(), served[2].Load())
	}
	r := rdb(t)
	for _, k := range []string{"redisson_lock_queue:{" + name + "}", "redisson_lock_timeout:{" + name + "}"} {
		if n := must(r.Exists(ctx, k).Result()); n != 0 {
			t.Fatalf("%s remains after every waiter left", k)
		}
	}
}

// A client first in line that stops retrying (crashed) delays a free lock by
// at most the queue entry's lifetime (1s).
func TestDeadWaiterIsSkipped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rdb(t)
	name := lockName(t)
	q, z := "redisson_lock_queue:{"+name+"}", "redisson_lock_timeout:{"+name+"}"
	nowMs := must(r.Time(ctx).Result()).UnixMilli()
	r.RPush(ctx, q, "dead-client")
	r.ZAdd(ctx, z, redisZ(float64(nowMs+800), "dead-client"))
	t.Cleanup(func() { r.Del(context.Background(), q, z) })
	c := newClient(t)
	if _, err := c.Mutex(name).TryLock(ctx, 0, 0); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("TryLock(0) while another client is first in line = %v; want ErrNotObtained", err)
	}
	start := time.Now()
	h, err := c.Mutex(name).TryLock(ctx, 3*time.Second, 0)
	if err != nil {
		t.Fatalf("lock behind a dead waiter: %v", err)
	}
	defer h.Unlock(ctx)
	if d := time.Since(start); d > 1200*time.Millisecond {
		t.Fatalf("waited %v behind a dead waiter; want at most its entry's lifetime", d)
	}
}

// A client whose waiters all gave up leaves the line at once.
func TestGivingUpLeavesTheLine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rdb(t)
	name := lockName(t)
	h := must(newClient(t).Mutex(name).Lock(ctx))
	quitter := newClient(t)
	if _, err := quitter.Mutex(name).TryLock(ctx, 100*time.Millisecond, 0); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("TryLock on a held lock = %v", err)
	}
	if n := must(r.LLen(ctx, "redisson_lock_queue:{"+name+"}").Result()); n != 0 {
		t.Fatalf("queue length after the only waiter gave up = %d; want 0", n)
	}
	noErr(t, h.Unlock(ctx))
	start := time.Now()
	h2 := must(newClient(t).Mutex(name).TryLock(ctx, time.Second, 0))
	defer h2.Unlock(ctx)
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("a free lock took %v after a waiter gave up", d)
	}
}
