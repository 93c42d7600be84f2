package lock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/seckill/stock/internal/lock"
	"github.com/seckill/stock/internal/testserver"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(runChild(mode))
	}
	// redismock's clients start go-redis's maintenance-notification circuit
	// breaker and never stop it (a go-redis goroutine, not ours).
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction(
		"github.com/redis/go-redis/v9/maintnotifications.(*CircuitBreakerManager).cleanupLoop"))
}

// rdb returns a client of the shared Redis, closed at the end of the test.
func rdb(t testing.TB, hooks ...redis.Hook) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: testserver.SharedRedis})
	for _, h := range hooks {
		c.AddHook(h)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newClient returns a lock.Client on the shared Redis, closed at the end of the test.
func newClient(t testing.TB, opts ...lock.Option) *lock.Client {
	t.Helper()
	c := lock.New(rdb(t), opts...)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// lockName is a lock name of this test alone.
func lockName(t testing.TB) string {
	return "locktest:" + t.Name() + ":" + uuid.NewString()[:8]
}

// must returns v, or panics on an unexpected infrastructure error (which
// fails the test binary with a stack trace pointing at the call).
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func noErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func hgetall(t testing.TB, r *redis.Client, key string) map[string]string {
	t.Helper()
	return must(r.HGetAll(context.Background(), key).Result())
}

func TestWireProtocol(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rdb(t)
	c := newClient(t, lock.WithClientID("11111111-2222-3333-4444-555555555555"))
	name := lockName(t)
	m := c.Mutex(name)

	sub := r.Subscribe(ctx, "redisson_lock__channel:{"+name+"}")
	defer func() { _ = sub.Close() }()
	if _, err := sub.Receive(ctx); err != nil { // subscription confirmed
		t.Fatal(err)
	}
	msgs := sub.Channel()

	h := must(m.Lock(ctx))
	fields := hgetall(t, r, name)
	if len(fields) != 1 {
		t.Fatalf("HGETALL %s = %v; want one field", name, fields)
	}
	for f, v := range fields {
		if !strings.HasPrefix(f, "11111111-2222-3333-4444-555555555555:") || v != "1" {
			t.Fatalf("HGETALL %s = %s=%s; want <clientID>:<holdID>=1", name, f, v)
		}
		if id, err := strconv.ParseInt(strings.TrimPrefix(f, c.ID()+":"), 10, 64); err != nil || id <= 0 {
			t.Fatalf("hold id in field %q is not a positive int64", f)
		}
	}
	if typ := must(r.Type(ctx, name).Result()); typ != "hash" {
		t.Fatalf("TYPE %s = %s; want hash", name, typ)
	}
	if pttl := must(r.PTTL(ctx, name).Result()); pttl <= 29*time.Second || pttl > 30*time.Second {
		t.Fatalf("PTTL = %v; want the 30s watchdog lease in ms", pttl)
	}
	tok := must(r.Get(ctx, "redisson_lock_token:{"+name+"}").Int64())
	if tok != h.Fence() {
		t.Fatalf("token counter = %d; Fence() = %d", tok, h.Fence())
	}
	if ttl := must(r.TTL(ctx, "redisson_lock_token:{"+name+"}").Result()); ttl != -1 {
		t.Fatalf("token TTL = %v; want none", ttl)
	}
	h2 := must(m.Lock(h.Context()))
	if err := h2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case msg := <-msgs:
		t.Fatalf("partial unlock published %q", msg.Payload)
	case <-time.After(50 * time.Millisecond):
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case msg := <-msgs:
		if msg.Payload != "0" {
			t.Fatalf("unlock message = %q; want \"0\"", msg.Payload)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no unlock message published")
	}
	if n := must(r.Exists(ctx, name).Result()); n != 0 {
		t.Fatal("lock key still exists after full release")
	}
	t.Cleanup(func() { r.Del(context.Background(), "redisson_lock_token:{"+name+"}") })
}

func TestHashTagNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rdb(t)
	name := "locktest:{" + uuid.NewString()[:8] + "}"
	h := must(newClient(t).Mutex(name).Lock(ctx))
	defer func() { _ = h.Unlock(ctx) }()
	if n := must(r.Exists(ctx, "redisson_lock_token:"+name).Result()); n != 1 {
		t.Fatalf("token key for a name with a hash tag should be redisson_lock_token:%s", name)
	}
}

// Redisson's prefixName wraps the name in braces only when it contains no
// '{' at all, valid hash tag or not; the channel must be the one a Redisson
// waiter subscribes to, or each side's waiters sleep out the other's lease.
func TestNamesWithABraceButNoHashTag(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rdb(t)
	id := uuid.NewString()[:8]
	for _, name := range []string{"locktest:a{b" + id, "locktest:a{}b" + id, "locktest:{}" + id} {
		channel := "redisson_lock__channel:" + name
		sub := r.Subscribe(ctx, channel)
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		h := must(newClient(t).Mutex(name).Lock(ctx))
		if n := must(r.Exists(ctx, "redisson_lock_token:"+name).Result()); n != 1 {
			t.Errorf("Lock(%q): no key redisson_lock_token:%s; want Redisson's name", name, name)
		}
		noErr(t, h.Unlock(ctx))
		select {
		case msg := <-sub.Channel():
			if msg.Payload != "0" {
				t.Errorf("Unlock(%q) published %q on %s; want \"0\"", name, msg.Payload, channel)
			}
		case <-time.After(2 * time.Second):
			t.Errorf("Unlock(%q) published nothing on %s (Redisson's channel)", name, channel)
		}
		_ = sub.Close()
		r.Del(ctx, "redisson_lock_token:"+name)
	}
}

// mutual exclusion across goroutines and Clients; Redisson's
// "many goroutines x several clients increment a counter" test.
func TestMutualExclusion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rdb(t)
	name := lockName(t)
	counter := name + ":counter"
	t.Cleanup(func() { r.Del(context.Background(), counter) })
	const clients, goroutines, loops = 3, 8, 25
	var inside, overlaps atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < clients; i++ {
		m := newClient(t).Mutex(name) // one *Mutex shared by the goroutines of a client
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for j := 0; j < loops; j++ {
					h, err := m.Lock(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					v, _ := r.Get(ctx, counter).Int()
					r.Set(ctx, counter, v+1, 0) // a read-modify-write the lock must protect
					inside.Add(-1)
					if err := h.Unlock(ctx); err != nil {
						t.Error(err)
					}
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	got := must(r.Get(ctx, counter).Int())
	if want := clients * goroutines * loops; got != want || overlaps.Load() != 0 {
		t.Fatalf("counter = %d, overlaps = %d; want %d, 0", got, overlaps.Load(), want)
	}
	if chans := must(r.PubSubChannels(ctx, "redisson_lock__channel:{"+name+"}").Result()); len(chans) != 0 {
		t.Fatalf("PUBSUB CHANNELS after the run = %v; want none", chans)
	}
}

// Redisson's "TTL after a partial unlock is the full lease again".
func TestReentry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rdb(t)
	c := newClient(t, lock.WithWatchdogTimeout(5*time.Second))
	name := lockName(t)
	m := c.Mutex(name)
	h1 := must(m.Lock(ctx))
	h2 := must(c.Mutex(name).Lock(h1.Context())) // another *Mutex value, same hold ctx
	if h2.Fence() != h1.Fence() {
		t.Fatalf("re-entry fence = %d; want the chain's %d", h2.Fence(), h1.Fence())
	}
	// A goroutine given the hold ctx re-enters too.
	errc := make(chan error, 1)
	go func() {
		h3, err := m.TryLock(h1.Context(), 0, 0)
		if err == nil {
			err = h3.Unlock(ctx)
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		t.Fatalf("re-entry from another goroutine: %v", err)
	}
	for _, v := range hgetall(t, r, name) {
		if v != "2" {
			t.Fatalf("count after two locks = %s; want 2", v)
		}
	}
	time.Sleep(1200 * time.Millisecond)
	if err := h2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, v := range hgetall(t, r, name) {
		if v != "1" {
			t.Fatalf("count after one unlock = %s; want 1", v)
		}
	}
	if pttl := must(r.PTTL(ctx, name).Result()); pttl < 4800*time.Millisecond {
		t.Fatalf("PTTL after partial unlock = %v; want the full 5s lease again", pttl)
	}
	if err := h1.Context().Err(); err != nil || h1.Err() != nil {
		t.Fatalf("hold after partial unlock: ctx %v, Err %v; want alive", err, h1.Err())
	}
	if err := h1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := must(r.Exists(ctx, name).Result()); n != 0 {
		t.Fatal("key remains after the last unlock")
	}
	if err := h1.Context().Err(); !errors.Is(err, context.Canceled) || !errors.Is(h1.Err(), lock.ErrNotHeld) {
		t.Fatalf("hold after release: ctx %v, Err %v; want Canceled, ErrNotHeld", err, h1.Err())
	}
	if err := h1.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("second Unlock of one hold = %v; want ErrNotHeld", err)
	}
}

// Sharing a *Mutex is not sharing ownership.
func TestSharedMutexDoesNotShareOwnership(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newClient(t).Mutex(lockName(t))
	h := must(m.Lock(ctx))
	defer func() { _ = h.Unlock(ctx) }()
	if _, err := m.TryLock(ctx, 0, 0); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("TryLock without the hold ctx = %v; want ErrNotObtained", err)
	}
	if _, err := m.TryLock(ctx, 100*time.Millisecond, 0); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("TryLock(100ms) without the hold ctx = %v; want ErrNotObtained", err)
	}
}

// Unlock by a non-owner is refused.
func TestUnlockByNonOwner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rdb(t)
	name := lockName(t)
	cb := newClient(t)
	a, b := newClient(t).Mutex(name), cb.Mutex(name)
	ha := must(a.TryLock(ctx, 0, 300*time.Millisecond))
	time.Sleep(500 * time.Millisecond) // ha's fixed lease lapses
	hb := must(b.TryLock(ctx, 0, 0))
	if err := ha.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Unlock after expiry and takeover = %v; want ErrNotHeld", err)
	}
	fields := hgetall(t, r, name)
	for f, v := range fields {
		if !strings.HasPrefix(f, cb.ID()+":") || v != "1" {
			t.Fatalf("new holder's hash after the stale Unlock = %v; want its one field = 1", fields)
		}
	}
	if len(fields) != 1 {
		t.Fatalf("new holder's hash after the stale Unlock = %v; want its one field = 1", fields)
	}
	if err := hb.Context().Err(); err != nil {
		t.Fatalf("new holder's ctx: %v; want alive", err)
	}
	if err := hb.Unlock(ctx); err != nil {
		t.Fatalf("new holder's Unlock = %v", err)
	}
}

// Redisson's "fixed-lease holder's Unlock after expiry fails".
func TestFixedLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rdb(t)
	name := lockName(t)
	a, b := newClient(t).Mutex(name), newClient(t).Mutex(name)
	start := time.Now()
	ha := must(a.TryLock(ctx, 0, 2*time.Second))
	if pttl := must(r.PTTL(ctx, name).Result()); pttl > 2*time.Second || pttl < 1900*time.Millisecond {
		t.Fatalf("PTTL = %v; want 2s", pttl)
	}
	hb, err := b.TryLock(ctx, 5*time.Second, 0)
	if err != nil {
		t.Fatalf("second client TryLock(5s) = %v", err)
	}
	waited := time.Since(start)
	if waited < 1900*time.Millisecond || waited > 3*time.Second {
		t.Fatalf("second client got the lock after %v; want about 2s", waited)
	}
	<-ha.Context().Done()
	if cause := context.Cause(ha.Context()); !errors.Is(cause, lock.ErrLockLost) {
		t.Fatalf("expired fixed lease ctx cause = %v; want ErrLockLost", cause)
	}
	if err := ha.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Unlock after the fixed lease = %v; want ErrNotHeld", err)
	}
	noErr(t, hb.Unlock(ctx))
}

// countRenewals counts the renew script calls a client sends.
type countRenewals struct{ n atomic.Int64 }

func (h *countRenewals) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countRenewals) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *countRenewals) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd, "renew") {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// isScript reports whether cmd runs the script whose first line mentions word.
func isScript(cmd redis.Cmder, word string) bool {
	name := cmd.Name()
	if name != "evalsha" && name != "eval" {
		return false
	}
	return lock.ScriptKind(fmt.Sprint(cmd.Args()[1])) == word
}

// The watchdog keeps a lease alive past its length: after six renewals (two
// whole leases) the lock is still held and its hold context live, and no
// renewal ever sets a TTL above the lease. After Unlock nothing renews it.
// It waits on the renewals it counts, not on a clock: how soon they come is
// the renewal benchmark's and the load reports' business.
func TestWatchdog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	counter := &countRenewals{}
	r := rdb(t, counter)
	const lease = 2 * time.Second
	c := lock.New(r, lock.WithWatchdogTimeout(lease))
	defer func() { _ = c.Close() }()
	name := lockName(t)
	h := must(c.Mutex(name).Lock(ctx))
	for deadline := time.Now().Add(time.Minute); counter.n.Load() < 6; time.Sleep(20 * time.Millisecond) {
		pttl := must(r.PTTL(ctx, name).Result())
		if pttl < 0 {
			t.Fatalf("lock vanished while held by the watchdog (PTTL %v) after %d renewals", pttl, counter.n.Load())
		}
		if pttl > lease {
			t.Fatalf("PTTL %v after %d renewals; want at most the lease, %v", pttl, counter.n.Load(), lease)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d renewals in a minute with a %v lease; want 6", counter.n.Load(), lease)
		}
	}
	if err := h.Context().Err(); err != nil {
		t.Fatalf("hold ctx after 6 renewals: %v", err)
	}
	if n := must(r.Exists(ctx, name).Result()); n != 1 {
		t.Fatal("lock gone after 6 renewals while held")
	}
	noErr(t, h.Unlock(ctx))
	before := counter.n.Load()
	time.Sleep(lease) // three renewal periods
	if after := counter.n.Load(); after != before {
		t.Fatalf("%d renewals sent after Unlock", after-before)
	}
}

// Redisson's "a watchdog holder of a closed Client disappears
// within the watchdog timeout".
func TestCloseStopsRenewal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rdb(t)
	c := lock.New(r, lock.WithWatchdogTimeout(time.Second))
	name := lockName(t)
	h := must(c.Mutex(name).Lock(ctx))
	time.Sleep(700 * time.Millisecond)
	noErr(t, c.Close())
	if cause := context.Cause(h.Context()); !errors.Is(cause, lock.ErrLockLost) {
		t.Fatalf("hold ctx cause after Close = %v; want ErrLockLost", cause)
	}
	pttl := must(r.PTTL(ctx, name).Result())
	time.Sleep(300 * time.Millisecond)
	if later := must(r.PTTL(ctx, name).Result()); later >= pttl && later != -2 {
		t.Fatalf("PTTL went from %v to %v after Close; want it to decay", pttl, later)
	}
	time.Sleep(time.Second)
	if n := must(r.Exists(ctx, name).Result()); n != 0 {
		t.Fatal("lock of a closed client still exists after the watchdog timeout")
	}
	if _, err := c.Mutex(name).Lock(ctx); !errors.Is(err, lock.ErrClosed) {
		t.Fatalf("Lock after Close = %v; want ErrClosed", err)
	}
}

// a deleted key cancels the hold ctx with ErrLockLost at the next renewal.
func TestLostWhenKeyDeleted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rdb(t)
	var lost atomic.Int32
	c := lock.New(r, lock.WithWatchdogTimeout(600*time.Millisecond), lock.WithHooks(lock.Hooks{
		Lost: func(string) { lost.Add(1) },
	}))
	defer func() { _ = c.Close() }()
	name := lockName(t)
	h := must(c.Mutex(name).Lock(ctx))
	r.Del(ctx, name)
	select {
	case <-h.Context().Done():
	case <-time.After(2 * time.Second):
		t.Fatal("hold ctx not cancelled after the key was deleted")
	}
	if cause := context.Cause(h.Context()); !errors.Is(cause, lock.ErrLockLost) {
		t.Fatalf("cause = %v; want ErrLockLost", cause)
	}
	if lost.Load() != 1 {
		t.Fatalf("Lost hook calls = %d; want 1", lost.Load())
	}
	if err := h.Err(); !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("Err() of a lost hold = %v; want ErrLockLost", err)
	}
	if err := h.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Unlock of a lost hold = %v; want ErrNotHeld", err)
	}
	if _, err := c.Mutex(name).Lock(h.Context()); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("re-entry on a lost hold = %v; want ErrNotObtained", err)
	}
}

// Redis unreachable (its process paused) past the lease: the hold ctx
// is cancelled by the local deadline, no later than the last confirmed expiry.
func TestLostWhenRedisUnreachable(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t)
	r := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	defer func() { _ = r.Close() }()
	const lease = 900 * time.Millisecond
	c := lock.New(r, lock.WithWatchdogTimeout(lease))
	defer func() { _ = c.Close() }()
	ctx := context.Background()
	h := must(c.Mutex("unreachable").Lock(ctx))
	time.Sleep(400 * time.Millisecond)
	paused := time.Now()
	srv.Signal(19) // SIGSTOP
	defer srv.Signal(18)
	select {
	case <-h.Context().Done():
	case <-time.After(3 * lease):
		t.Fatal("hold ctx still alive long after the lease while Redis is unreachable")
	}
	// The last confirmed renewal was sent before the pause, so its expiry is
	// at most one lease after the pause began.
	if took := time.Since(paused); took > lease+50*time.Millisecond {
		t.Fatalf("loss signalled %v after Redis stopped answering; want within the %v lease", took, lease)
	}
	if cause := context.Cause(h.Context()); !errors.Is(cause, lock.ErrLockLost) {
		t.Fatalf("cause = %v; want ErrLockLost", cause)
	}
}

// waiting is by pub/sub; one subscription per client; none left.
func TestWaitByPubSub(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rdb(t)
	name := lockName(t)
	channel := "redisson_lock__channel:{" + name + "}"
	holder := newClient(t)
	h := must(holder.Mutex(name).Lock(ctx)) // 30s watchdog lease: polling on PTTL would wait 30s
	waiters := newClient(t)
	var wg sync.WaitGroup
	got := make(chan time.Time, 5)
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wh, err := waiters.Mutex(name).TryLock(ctx, 10*time.Second, 0)
			if err != nil {
				t.Error(err)
				return
			}
			got <- time.Now()
			_ = wh.Unlock(ctx)
		}()
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		n := must(r.PubSubNumSub(ctx, channel).Result())[channel]
		if n == 1 {
			break
		}
		if n > 1 || time.Now().After(deadline) {
			t.Fatalf("PUBSUB NUMSUB %s = %d; want 1 (one shared subscription for 5 waiters)", channel, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	released := time.Now()
	noErr(t, h.Unlock(ctx))
	wg.Wait()
	first := <-got
	if d := first.Sub(released); d > 500*time.Millisecond {
		t.Fatalf("first waiter woke %v after the unlock; want a pub/sub wake-up, not a 30s PTTL sleep", d)
	}
	if chans := must(r.PubSubChannels(ctx, channel).Result()); len(chans) != 0 {
		t.Fatalf("PUBSUB CHANNELS after all waiters left = %v", chans)
	}
}

// a lost message costs at most the holder's PTTL.
func TestLostMessageCostsAtMostPTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := lockName(t)
	// A fixed lease lapses without any PUBLISH.
	must(newClient(t).Mutex(name).TryLock(ctx, 0, 500*time.Millisecond))
	start := time.Now()
	h := must(newClient(t).Mutex(name).TryLock(ctx, 5*time.Second, 0))
	defer func() { _ = h.Unlock(ctx) }()
	if d := time.Since(start); d > 900*time.Millisecond {
		t.Fatalf("waiter took %v for a lock that lapsed after 500ms; want about the PTTL", d)
	}
}

// Redisson's "TryLock(3s) against a held lock returns after ~3s".
func TestTryLockWaitBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := lockName(t)
	h := must(newClient(t).Mutex(name).Lock(ctx))
	defer func() { _ = h.Unlock(ctx) }()
	start := time.Now()
	_, err := newClient(t).Mutex(name).TryLock(ctx, 3*time.Second, 0)
	took := time.Since(start)
	if !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("TryLock(3s) on a held lock = %v; want ErrNotObtained", err)
	}
	if took < 3*time.Second || took > 3500*time.Millisecond {
		t.Fatalf("TryLock(3s) returned after %v; want ~3s", took)
	}
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = newClient(t).Mutex(name).Lock(cctx)
	if !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with an expiring ctx = %v; want ErrNotObtained joined with DeadlineExceeded", err)
	}
}

// resend sends every script call of the given kind twice, as a go-redis retry
// after a lost reply would.
type resend struct{ kinds []string }

func (h resend) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h resend) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h resend) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		for _, k := range h.kinds {
			if isScript(cmd, k) {
				if err := next(ctx, cmd); err != nil {
					return err
				}
				break
			}
		}
		return next(ctx, cmd)
	}
}

// every script reaching Redis twice still counts once.
func TestResentScriptsCountOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	plain := rdb(t)
	r := rdb(t, resend{kinds: []string{"acquire", "reenter", "release", "renew"}})
	c := lock.New(r, lock.WithWatchdogTimeout(600*time.Millisecond))
	defer func() { _ = c.Close() }()
	name := lockName(t)
	m := c.Mutex(name)
	h1 := must(m.Lock(ctx))
	tok := must(plain.Get(ctx, "redisson_lock_token:{"+name+"}").Int64())
	if h1.Fence() != tok {
		t.Fatalf("fence after a resent acquire = %d; token counter %d (one INCR expected)", h1.Fence(), tok)
	}
	count := func() string {
		for _, v := range hgetall(t, plain, name) {
			return v
		}
		return "none"
	}
	if got := count(); got != "1" {
		t.Fatalf("count after a resent acquire = %s; want 1", got)
	}
	h2 := must(m.Lock(h1.Context()))
	if got := count(); got != "2" {
		t.Fatalf("count after a resent re-entry = %s; want 2", got)
	}
	time.Sleep(time.Second) // resent renewals
	if got := count(); got != "2" {
		t.Fatalf("count after resent renewals = %s; want 2", got)
	}
	noErr(t, h2.Unlock(ctx))
	if got := count(); got != "1" {
		t.Fatalf("count after a resent partial release = %s; want 1", got)
	}
	if err := h1.Unlock(ctx); err != nil {
		t.Fatalf("resent full release = %v; want nil (the latch remembers it)", err)
	}
	if n := must(plain.Exists(ctx, name).Result()); n != 0 {
		t.Fatal("lock outlived its last Unlock")
	}
	// And another client gets it at once.
	h3 := must(newClient(t).Mutex(name).TryLock(ctx, 0, 0))
	noErr(t, h3.Unlock(ctx))
}

// lateReply lets the acquire script run, then withholds the reply until the
// caller's context ends, as a slow network would.
type lateReply struct{}

func (lateReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (lateReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (lateReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if isScript(cmd, "acquire") {
			<-ctx.Done()
			return ctx.Err()
		}
		return err
	}
}

// an acquire that landed after the caller gave up is released.
func TestCancelledAcquireLeavesNoHold(t *testing.T) {
	t.Parallel()
	plain := rdb(t)
	c := lock.New(rdb(t, lateReply{}))
	defer func() { _ = c.Close() }()
	name := lockName(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.Mutex(name).Lock(ctx)
	if !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with a late reply = %v; want ErrNotObtained joined with DeadlineExceeded", err)
	}
	if n := must(plain.Exists(context.Background(), name).Result()); n != 0 {
		t.Fatalf("the late acquire left a hold: %v", hgetall(t, plain, name))
	}
}

// failBatch fails renew calls that carry a given key.
type failBatch struct{ key string }

func (failBatch) DialHook(next redis.DialHook) redis.DialHook { return next }
func (failBatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h failBatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd, "renew") {
			for _, a := range cmd.Args() {
				if a == h.key {
					err := errors.New("injected renew failure")
					cmd.SetErr(err)
					return err
				}
			}
		}
		return next(ctx, cmd)
	}
}

// 250 holds renew in 3 calls per period; a failing batch loses only its holds.
func TestRenewalBatching(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	counter := &countRenewals{}
	prefix := lockName(t)
	r := rdb(t, counter, failBatch{key: prefix + ":poison"})
	var renewed, lostN, failed atomic.Int64
	c := lock.New(r, lock.WithWatchdogTimeout(900*time.Millisecond), lock.WithRenewBatchSize(100), lock.WithHooks(lock.Hooks{
		Renewed: func(ok, lost int, err error) {
			renewed.Add(int64(ok))
			lostN.Add(int64(lost))
			if err != nil {
				failed.Add(1)
			}
		},
	}))
	defer func() { _ = c.Close() }()
	holds := make([]*lock.Hold, 0, 250)
	for i := 0; i < 249; i++ {
		holds = append(holds, must(c.Mutex(fmt.Sprintf("%s:%d", prefix, i)).Lock(ctx)))
	}
	poison := must(c.Mutex(prefix + ":poison").Lock(ctx))
	before := counter.n.Load()
	time.Sleep(1500 * time.Millisecond) // 4 or 5 renewal periods of 300ms, and the poison batch's lease lapses
	calls := counter.n.Load() - before
	periods := calls / 3
	if periods < 3 || periods > 6 {
		t.Fatalf("renew calls in 1.5s = %d; want 3 per 300ms period", calls)
	}
	if failed.Load() == 0 {
		t.Fatal("the poisoned batch never failed")
	}
	if cause := context.Cause(poison.Context()); !errors.Is(cause, lock.ErrLockLost) {
		t.Fatalf("poisoned hold ctx cause = %v; want ErrLockLost after its lease", cause)
	}
	alive := 0
	for _, h := range holds {
		if h.Context().Err() == nil {
			alive++
		}
	}
	// The poison hold shares its batch with up to 99 others; the rest live on.
	if alive < 150 {
		t.Fatalf("holds alive outside the failing batch = %d; want at least 150 of 249", alive)
	}
	for _, h := range holds {
		_ = h.Unlock(ctx)
	}
}

// a crashed holder blocks others for at most one watchdog timeout.
// (The holder runs in a child process, killed with SIGKILL: see process_test.go.)

// Goroutine hygiene: nothing of ours remains after Unlock and after Close.
func TestNoGoroutinesLeft(t *testing.T) {
	ctx := context.Background()
	r := rdb(t)
	base := goleak.IgnoreCurrent()
	c := lock.New(r, lock.WithWatchdogTimeout(time.Second))
	name := lockName(t)
	h := must(c.Mutex(name).Lock(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		h2, err := c.Mutex(name).TryLock(context.Background(), 5*time.Second, 0)
		if err == nil {
			_ = h2.Unlock(context.Background())
		}
	}()
	time.Sleep(100 * time.Millisecond) // the waiter subscribes
	noErr(t, h.Unlock(ctx))
	<-done
	time.Sleep(400 * time.Millisecond) // the idle pub/sub connection closes 250ms after the last waiter left
	goleak.VerifyNone(t, base)         // after Unlock: no renewer, no subscription
	if chans := must(r.PubSubChannels(ctx, "redisson_lock__channel:*"+name+"*").Result()); len(chans) != 0 {
		t.Fatalf("PUBSUB CHANNELS = %v; want none", chans)
	}
	must(c.Mutex(name).Lock(ctx)) // held at Close
	noErr(t, c.Close())
	goleak.VerifyNone(t, base)
}

func TestStateAndForceUnlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := lockName(t)
	c := newClient(t)
	m := c.Mutex(name)
	if locked, _, err := m.State(ctx); err != nil || locked {
		t.Fatalf("State of a free lock = %v, %v", locked, err)
	}
	h := must(m.Lock(ctx))
	locked, ttl, err := m.State(ctx)
	if err != nil || !locked || ttl <= 0 || ttl > 30*time.Second {
		t.Fatalf("State of a held lock = %v, %v, %v", locked, ttl, err)
	}
	waiter := make(chan error, 1)
	go func() {
		h2, err := newClient(t).Mutex(name).TryLock(ctx, 5*time.Second, 0)
		if err == nil {
			err = h2.Unlock(ctx)
		}
		waiter <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if ok, err := m.ForceUnlock(ctx); !ok || err != nil {
		t.Fatalf("ForceUnlock = %v, %v; want true", ok, err)
	}
	select {
	case err := <-waiter:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("ForceUnlock did not wake the waiter")
	}
	if err := h.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Unlock after ForceUnlock = %v; want ErrNotHeld", err)
	}
	if ok, _ := m.ForceUnlock(ctx); ok {
		t.Fatal("ForceUnlock of a free lock = true")
	}
}

// waiters of one client are served in arrival order.
func TestLocalFIFO(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := lockName(t)
	c := newClient(t)
	h := must(c.Mutex(name).Lock(ctx))
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wh, err := c.Mutex(name).Lock(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			_ = wh.Unlock(ctx)
		}()
		time.Sleep(30 * time.Millisecond) // arrive in order 0..4
	}
	noErr(t, h.Unlock(ctx))
	wg.Wait()
	for i, v := range order {
		if v != i {
			t.Fatalf("service order = %v; want arrival order 0..4", order)
		}
	}
}

// failFirst fails the first n script calls of a kind without sending them.
type failFirst struct {
	kind string
	n    *atomic.Int32
}

func (failFirst) DialHook(next redis.DialHook) redis.DialHook { return next }
func (failFirst) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h failFirst) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd, h.kind) && h.n.Add(-1) >= 0 {
			err := errors.New("injected: connection reset")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// An Unlock that Redis did not answer is retried in the background, so the
// lock does not sit out its lease (30s here) once Redis answers again.
func TestFailedUnlockIsRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	plain := rdb(t)
	var fails atomic.Int32
	fails.Store(2)
	c := lock.New(rdb(t, failFirst{kind: "release", n: &fails}))
	defer func() { _ = c.Close() }()
	name := lockName(t)
	h := must(c.Mutex(name).Lock(ctx))
	if err := h.Unlock(ctx); err == nil || errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Unlock with Redis failing = %v; want the Redis error", err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for must(plain.Exists(ctx, name).Result()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("lock still held 3s after a failed Unlock (PTTL %v); want the release retried", must(plain.PTTL(ctx, name).Result()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if fails.Load() > 0 {
		t.Fatalf("release retried without going through the failures")
	}
}
