package lock_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/lock"
	"github.com/seckill/stock/internal/testserver"
)

// a *redis.ClusterClient: exclusion, re-entry, pub/sub wake-ups
// across nodes, and renewals batched per hash slot.
func TestClusterClient(t *testing.T) {
	t.Parallel()
	addrs := testserver.StartCluster(t)
	ctx := context.Background()
	counter := &countRenewals{}
	newCC := func() *redis.ClusterClient {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		t.Cleanup(func() { _ = cc.Close() })
		return cc
	}
	cc := newCC()
	cc.AddHook(counter)
	c := lock.New(cc, lock.WithWatchdogTimeout(900*time.Millisecond))
	defer c.Close()
	other := lock.New(newCC())
	defer other.Close()

	// Exclusion and a pub/sub wake-up for names on every node.
	for i := 0; i < 6; i++ {
		name := fmt.Sprintf("cluster-lock-%d", i)
		h := must(c.Mutex(name).Lock(ctx))
		h2 := must(c.Mutex(name).Lock(h.Context()))
		if _, err := other.Mutex(name).TryLock(ctx, 0, 0); err == nil {
			t.Fatalf("%s: another client got a held lock", name)
		}
		got := make(chan error, 1)
		go func() {
			wh, err := other.Mutex(name).TryLock(ctx, 5*time.Second, 0)
			if err == nil {
				err = wh.Unlock(ctx)
			}
			got <- err
		}()
		time.Sleep(50 * time.Millisecond)
		noErr(t, h2.Unlock(ctx))
		released := time.Now()
		noErr(t, h.Unlock(ctx))
		if err := <-got; err != nil {
			t.Fatalf("%s: waiter: %v", name, err)
		}
		if d := time.Since(released); d > 500*time.Millisecond {
			t.Fatalf("%s: waiter woke %v after the unlock; want a pub/sub wake-up", name, d)
		}
	}

	// 20 holds in one slot (a shared hash tag) renew in one call per period;
	// 10 holds in distinct slots need one call each.
	var holds []*lock.Hold
	for i := 0; i < 20; i++ {
		holds = append(holds, must(c.Mutex(fmt.Sprintf("{batch}:%d", i)).Lock(ctx)))
	}
	slots := map[int64]bool{}
	for i := 0; len(slots) < 10; i++ {
		name := fmt.Sprintf("spread-%d", i)
		s := must(cc.ClusterKeySlot(ctx, name).Result())
		if slots[s] || s == must(cc.ClusterKeySlot(ctx, "{batch}").Result()) {
			continue
		}
		slots[s] = true
		holds = append(holds, must(c.Mutex(name).Lock(ctx)))
	}
	before := counter.n.Load()
	time.Sleep(1500 * time.Millisecond) // 5 periods of 300ms; every lease of 900ms would lapse without renewal
	calls := counter.n.Load() - before
	if calls < 4*11 || calls > 6*11 {
		t.Fatalf("renew calls in 1.5s = %d; want 11 per 300ms period (1 for the shared slot + 10)", calls)
	}
	for _, h := range holds {
		if err := h.Context().Err(); err != nil {
			t.Fatalf("hold %s lost on the cluster: %v", h.Name(), context.Cause(h.Context()))
		}
		noErr(t, h.Unlock(ctx))
	}
}

// a Sentinel failover client keeps working across a failover.
func TestSentinelFailoverClient(t *testing.T) {
	t.Parallel()
	s := testserver.StartSentinel(t)
	ctx := context.Background()
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.Name, SentinelAddrs: s.Sentinels,
		DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
	defer fc.Close()
	var lost atomic.Int32
	c := lock.New(fc, lock.WithWatchdogTimeout(time.Second), lock.WithHooks(lock.Hooks{Lost: func(string) { lost.Add(1) }}))
	defer c.Close()
	h := must(c.Mutex("sentinel-lock").Lock(ctx))
	// Wait until the replica has the lock key, then kill the master.
	rep := s.Replica.Client(t)
	for i := 0; must(rep.Exists(ctx, "sentinel-lock").Result()) == 0; i++ {
		if i > 250 {
			t.Fatal("lock never replicated")
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Master.Kill()
	killed := time.Now()
	var h2 *lock.Hold
	var err error
	for time.Since(killed) < 20*time.Second {
		h2, err = c.Mutex("sentinel-after").TryLock(ctx, 500*time.Millisecond, 0)
		if err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("no lock obtained within 20s of the master's death: %v", err)
	}
	t.Logf("lock service back %v after the master was killed; old hold lost: %v", time.Since(killed).Round(time.Millisecond), h.Context().Err() != nil)
	noErr(t, h2.Unlock(ctx))
	_ = h.Unlock(ctx)
}
