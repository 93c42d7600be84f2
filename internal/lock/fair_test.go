package lock_test

import (
	"context"
	"errors"
	"slices"
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
	for _, k := range []string{"golock_line:{" + name + "}", "golock_line_deadline:{" + name + "}"} {
		if n := must(r.Exists(ctx, k).Result()); n != 0 {
			t.Fatalf("%s remains after every waiter left", k)
		}
	}
}

// A client first in line that stops retrying (crashed) delays a free lock by
// at most the line entry's lifetime (1s).
func TestDeadWaiterIsSkipped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rdb(t)
	name := lockName(t)
	q, z := "golock_line:{"+name+"}", "golock_line_deadline:{"+name+"}"
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
	defer func() { _ = h.Unlock(ctx) }()
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
	if n := must(r.LLen(ctx, "golock_line:{"+name+"}").Result()); n != 0 {
		t.Fatalf("line length after the only waiter gave up = %d; want 0", n)
	}
	noErr(t, h.Unlock(ctx))
	start := time.Now()
	h2 := must(newClient(t).Mutex(name).TryLock(ctx, time.Second, 0))
	defer func() { _ = h2.Unlock(ctx) }()
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("a free lock took %v after a waiter gave up", d)
	}
}

// A full unlock hands the lock straight to the same client's next waiter,
// once even when the script reaches Redis twice.
func TestLocalHandOffIsRetrySafe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	plain := rdb(t)
	c := lock.New(rdb(t, resend{kinds: []string{"transfer"}}))
	defer func() { _ = c.Close() }()
	name := lockName(t)
	h1 := must(c.Mutex(name).Lock(ctx))
	got := make(chan *lock.Hold, 1)
	go func() {
		h2, err := c.Mutex(name).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- h2
	}()
	time.Sleep(50 * time.Millisecond) // the second goroutine is waiting
	noErr(t, h1.Unlock(ctx))
	var h2 *lock.Hold
	select {
	case h2 = <-got:
	case <-time.After(2 * time.Second):
		t.Fatal("the local waiter did not get the lock")
	}
	if h2 == nil {
		t.FailNow()
	}
	fields := hgetall(t, plain, name)
	if len(fields) != 1 {
		t.Fatalf("lock hash after the hand-off = %v; want one owner", fields)
	}
	for _, v := range fields {
		if v != "1" {
			t.Fatalf("count after a resent hand-off = %s; want 1", v)
		}
	}
	if h2.Fence() <= h1.Fence() || h1.Err() == nil {
		t.Fatalf("fences %d then %d, old hold Err %v; want a new chain and the old one released", h1.Fence(), h2.Fence(), h1.Err())
	}
	noErr(t, h2.Unlock(ctx))
	if n := must(plain.Exists(ctx, name).Result()); n != 0 {
		t.Fatal("lock outlived its last Unlock after a hand-off")
	}
}

// Local hand-offs are bounded: a busy client cannot keep the lock from a
// waiting one for more than a few turns.
func TestLocalHandOffIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := lockName(t)
	busy := newClient(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var turns atomic.Int64
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				h, err := busy.Mutex(name).Lock(ctx)
				if err != nil {
					return
				}
				time.Sleep(2 * time.Millisecond)
				turns.Add(1)
				_ = h.Unlock(ctx)
			}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	before := turns.Load()
	h, err := newClient(t).Mutex(name).TryLock(ctx, 2*time.Second, 0)
	after := turns.Load()
	if err == nil {
		noErr(t, h.Unlock(ctx))
	}
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("a waiting client starved behind local hand-offs: %v", err)
	}
	if n := after - before; n > 12 {
		t.Fatalf("the busy client took %d turns while the other waited; want a few (hand-offs are bounded)", n)
	}
}

// A waiter whose predecessor in the same client took the lock, and whose
// hold then ends without an unlock message (a fixed lease lapsing), still
// gets the lock soon: it looks again every lineRefresh, not after its lease.
func TestHeadAfterLocalAcquireDoesNotSleepItsLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := lockName(t)
	hb := must(newClient(t).Mutex(name).Lock(ctx))
	a := newClient(t) // 30s watchdog
	w1 := make(chan error, 1)
	go func() {
		_, err := a.Mutex(name).TryLock(ctx, 5*time.Second, 300*time.Millisecond) // never unlocked: lapses
		w1 <- err
	}()
	time.Sleep(50 * time.Millisecond)
	w2 := make(chan error, 1)
	go func() {
		h, err := a.Mutex(name).TryLock(ctx, 5*time.Second, 0)
		if err == nil {
			_ = h.Unlock(ctx)
		}
		w2 <- err
	}()
	time.Sleep(50 * time.Millisecond)
	noErr(t, hb.Unlock(ctx))
	released := time.Now()
	noErr(t, <-w1)
	if err := <-w2; err != nil {
		t.Fatalf("second waiter: %v", err)
	}
	if d := time.Since(released); d > 1500*time.Millisecond {
		t.Fatalf("second waiter got a lapsed lock %v after the first took it; want within lease (300ms) + refresh (400ms)", d)
	}
}

// A local hand-off that fails does not leave the lock held for a lease.
func TestFailedHandOffReleases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var fails atomic.Int32
	fails.Store(1)
	c := lock.New(rdb(t, failFirst{kind: "transfer", n: &fails})) // 30s watchdog
	defer func() { _ = c.Close() }()
	name := lockName(t)
	h1 := must(c.Mutex(name).Lock(ctx))
	got := make(chan error, 1)
	go func() {
		h2, err := c.Mutex(name).TryLock(ctx, 5*time.Second, 0)
		if err == nil {
			err = h2.Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	released := time.Now()
	if err := h1.Unlock(ctx); err == nil {
		t.Fatal("Unlock with a failing hand-off = nil; want the error")
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter after a failed hand-off: %v", err)
	}
	if d := time.Since(released); d > 1500*time.Millisecond {
		t.Fatalf("waiter got the lock %v after a failed hand-off; want the release retried, not the 30s lease", d)
	}
}

// waitLine polls the lock's line of clients in Redis until it is want.
func waitLine(t *testing.T, r *redis.Client, name string, want ...string) {
	t.Helper()
	q := "golock_line:{" + name + "}"
	var got []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		got = must(r.LRange(context.Background(), q, 0, -1).Result())
		if slices.Equal(got, want) {
			return
		}
	}
	t.Fatalf("line of %s = %v; want %v", name, got, want)
}

// lockAsync takes the lock in a goroutine, for at most 5s or until ctx ends;
// the channel gets the hold and when Lock returned.
func lockAsync(ctx context.Context, c *lock.Client, name string) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		h, err := c.Mutex(name).TryLock(ctx, 5*time.Second, 0)
		ch <- acquired{h, err, time.Now()}
	}()
	return ch
}

type acquired struct {
	h   *lock.Hold
	err error
	at  time.Time
}

// A client that is in line while it holds the lock (one of its waiters tried
// meanwhile) leaves the line by a local hand-off, which publishes nothing. A
// client behind it must not count that turn among the unlocks to let go by,
// or it sleeps through its turn while the lock is free, until its 400 ms
// re-check (this stalled the contention benchmark about once in five runs).
func TestHandOffAheadInLineDoesNotStall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rdb(t)
	name := lockName(t)
	y, x := newClient(t), newClient(t)
	y1 := must(y.Mutex(name).Lock(ctx))
	y2c := lockAsync(ctx, y, name) // tries while Y holds: Y joins the line
	waitLine(t, r, name, y.ID())
	for lock.Waiting(y, name) != 1 { // in line in Y, so the unlock hands off to it
		time.Sleep(time.Millisecond)
	}
	xc := lockAsync(ctx, x, name)
	waitLine(t, r, name, y.ID(), x.ID())
	noErr(t, y1.Unlock(ctx)) // hands the lock to Y's waiter: Y leaves the line, nothing published
	y2 := <-y2c
	noErr(t, y2.err)
	waitLine(t, r, name, x.ID())
	wokenBy(t, y2.h, xc) // published: the lock goes to X, first in line
}

// A client ahead in line whose last waiter gives up leaves the line: the
// clients behind it counted its turn, so its leaving must count as one.
func TestLeaverAheadInLineDoesNotStall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rdb(t)
	name := lockName(t)
	z, a, x := newClient(t), newClient(t), newClient(t)
	zh := must(z.Mutex(name).Lock(ctx))
	actx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	ac := lockAsync(actx, a, name)
	waitLine(t, r, name, a.ID())
	xc := lockAsync(ctx, x, name)
	waitLine(t, r, name, a.ID(), x.ID())
	giveUp() // while Z holds, long before X looks again
	if got := <-ac; !errors.Is(got.err, lock.ErrNotObtained) {
		t.Fatalf("A's TryLock = %v; want ErrNotObtained", got.err)
	}
	waitLine(t, r, name, x.ID())
	wokenBy(t, zh, xc)
}

// wokenBy unlocks h and checks that the waiter on xc, first in line, took the
// lock on that unlock's message rather than at its 400 ms re-check.
func wokenBy(t *testing.T, h *lock.Hold, xc <-chan acquired) {
	t.Helper()
	released := time.Now()
	noErr(t, h.Unlock(context.Background()))
	got := <-xc
	noErr(t, got.err)
	defer func() { _ = got.h.Unlock(context.Background()) }()
	if d := got.at.Sub(released); d > 200*time.Millisecond {
		t.Fatalf("X took the lock %v after the unlock meant for it; want it woken by that unlock, not its 400ms re-check", d)
	}
}
