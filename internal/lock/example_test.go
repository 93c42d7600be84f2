package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/lock"
)

func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer func() { _ = rdb.Close() }()
	locks := lock.New(rdb) // one per process
	defer func() { _ = locks.Close() }()

	h, err := locks.Mutex("example:{SKU-1}").Lock(ctx)
	if err != nil {
		fmt.Println("lock:", err)
		return
	}
	// The critical section runs on h.Context(): it is cancelled if the lock is lost.
	fmt.Println("held:", h.Context().Err() == nil)
	if err := h.Unlock(context.WithoutCancel(ctx)); err != nil {
		fmt.Println("unlock:", err)
	}
	fmt.Println("released:", h.Context().Err() != nil)
	// Output:
	// held: true
	// released: true
}

func ExampleMutex_Lock_reentry() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer func() { _ = rdb.Close() }()
	locks := lock.New(rdb)
	defer func() { _ = locks.Close() }()
	m := locks.Mutex("example:reentry")

	outer, _ := m.Lock(ctx)
	defer func() { _ = outer.Unlock(context.WithoutCancel(ctx)) }()

	// Code called with the hold's context re-enters instead of deadlocking.
	inner, err := m.Lock(outer.Context())
	fmt.Println("re-entered:", err == nil, "same fence:", inner.Fence() == outer.Fence())
	_ = inner.Unlock(ctx)

	// Without the hold's context it is someone else, and must wait.
	_, err = m.TryLock(ctx, 0, 0)
	fmt.Println("other caller:", errors.Is(err, lock.ErrNotObtained))
	// Output:
	// re-entered: true same fence: true
	// other caller: true
}

func ExampleMutex_TryLock() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer func() { _ = rdb.Close() }()
	locks := lock.New(rdb)
	defer func() { _ = locks.Close() }()

	// Wait at most 100ms; hold for a fixed 5s lease that is never renewed.
	h, err := locks.Mutex("example:trylock").TryLock(ctx, 100*time.Millisecond, 5*time.Second)
	if errors.Is(err, lock.ErrNotObtained) {
		fmt.Println("busy, try later")
		return
	}
	if err != nil {
		fmt.Println("redis:", err)
		return
	}
	defer func() { _ = h.Unlock(context.WithoutCancel(ctx)) }()
	fmt.Println("held with a fixed lease")
	// Output: held with a fixed lease
}

func ExampleHold_Context() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer func() { _ = rdb.Close() }()
	locks := lock.New(rdb, lock.WithWatchdogTimeout(300*time.Millisecond))
	defer func() { _ = locks.Close() }()
	m := locks.Mutex("example:lost")

	h, _ := m.Lock(ctx)
	_, _ = m.ForceUnlock(ctx) // an operator, a failover, a FLUSHALL...

	// Check the hold's context before each step: once the lock is lost, stop
	// and let the database backstop (or the fencing token) decide.
	select {
	case <-h.Context().Done():
		fmt.Println("stopped:", errors.Is(context.Cause(h.Context()), lock.ErrLockLost))
	case <-time.After(5 * time.Second):
		fmt.Println("still running")
	}
	fmt.Println("unlock:", h.Unlock(ctx))
	// Output:
	// stopped: true
	// unlock: lock: not held
}
