package lock_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/lock"
	"github.com/seckill/stock/internal/testserver"
)

// lossyDialer connects to the shared Redis. Once armed, the next write that
// carries the acquire script goes through to Redis, but its reply is
// dropped and the connection fails, and every dial after that is refused
// until disarmed: a reply lost, then a resend that cannot dial.
type lossyDialer struct {
	armed   atomic.Bool
	refused atomic.Bool
	dropped atomic.Int32
}

func (d *lossyDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if d.refused.Load() {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &lossyConn{Conn: c, d: d}, nil
}

type lossyConn struct {
	net.Conn
	d      *lossyDialer
	broken atomic.Bool
}

func (c *lossyConn) Write(b []byte) (int, error) {
	if c.d.armed.Load() && containsScript(b, "acquire") {
		c.d.armed.Store(false)
		n, err := c.Conn.Write(b)
		time.Sleep(50 * time.Millisecond) // let Redis run it
		c.d.refused.Store(true)
		c.d.dropped.Add(1)
		c.broken.Store(true)
		_ = c.Close()
		return n, err
	}
	return c.Conn.Write(b)
}

func (c *lossyConn) Read(b []byte) (int, error) {
	if c.broken.Load() {
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	}
	return c.Conn.Read(b)
}

func containsScript(b []byte, kind string) bool {
	s := string(b)
	for i := 0; i+40 <= len(s); i++ {
		if lock.ScriptKind(s[i:i+40]) == kind {
			return true
		}
	}
	return false
}

// An acquire whose first send ran in Redis and lost its reply, and whose
// resend could not dial, is undone once Redis answers again, so another
// client gets the lock within its wait, not after the 30s lease. The Redis
// options are the service's own (one command retry, one dial retry).
func TestAcquireLostReplyThenRefusedDialIsUndone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := &lossyDialer{}
	r := redis.NewClient(&redis.Options{Addr: testserver.SharedRedis, Dialer: d.dial,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
		MaxRetries: 1, DialerRetries: 1, PoolSize: 1})
	t.Cleanup(func() { _ = r.Close() })
	c := lock.New(r)
	defer func() { _ = c.Close() }()
	name := lockName(t)
	m := c.Mutex(name)
	noErr(t, must(m.Lock(ctx)).Unlock(ctx)) // scripts loaded, one pooled connection

	d.armed.Store(true)
	_, err := m.TryLock(ctx, 0, 0)
	if err == nil || d.dropped.Load() != 1 {
		t.Fatalf("TryLock with a lost reply and a refused redial = %v (dropped %d); want a Redis error", err, d.dropped.Load())
	}
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		t.Fatalf("TryLock error = %v; want the refused dial of the last try (the case under test)", err)
	}
	plain := rdb(t)
	if n := must(plain.Exists(ctx, name).Result()); n != 1 {
		t.Fatalf("the first send did not land (EXISTS = %d); the test sets up nothing", n)
	}
	d.refused.Store(false) // Redis is reachable again
	start := time.Now()
	h, err := newClient(t).Mutex(name).TryLock(ctx, 5*time.Second, 0)
	if err != nil {
		t.Fatalf("another client's TryLock(5s) after the lost acquire = %v (PTTL %v); want the acquire undone",
			err, must(plain.PTTL(ctx, name).Result()))
	}
	t.Logf("obtained %v after Redis came back", time.Since(start))
	noErr(t, h.Unlock(ctx))
}

// hookOnce runs f in place of the first call of a script kind, once armed.
type hookOnce struct {
	kind  string
	armed *atomic.Bool
	f     func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error
}

func (hookOnce) DialHook(next redis.DialHook) redis.DialHook { return next }
func (hookOnce) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h hookOnce) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd, h.kind) && h.armed.CompareAndSwap(true, false) {
			if cmd.Name() == "evalsha" && !scriptLoaded(ctx, next, cmd.Args()[1]) {
				// The first run of this script since Redis started: EVALSHA
				// answers NOSCRIPT and go-redis sends EVAL, the call to hook.
				h.armed.Store(true)
				return next(ctx, cmd)
			}
			return h.f(ctx, cmd, next)
		}
		return next(ctx, cmd)
	}
}

// scriptLoaded reports whether Redis has the script of sha cached.
func scriptLoaded(ctx context.Context, next redis.ProcessHook, sha any) bool {
	exists := redis.NewBoolSliceCmd(ctx, "script", "exists", sha)
	return next(ctx, exists) == nil && len(exists.Val()) == 1 && exists.Val()[0]
}

// failScripts fails every call of the given kinds without sending it while on.
type failScripts struct {
	on    *atomic.Bool
	kinds []string
}

func (failScripts) DialHook(next redis.DialHook) redis.DialHook { return next }
func (failScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h failScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.on.Load() {
			for _, k := range h.kinds {
				if isScript(cmd, k) {
					err := errors.New("injected: connection reset")
					cmd.SetErr(err)
					return err
				}
			}
		}
		return next(ctx, cmd)
	}
}

// ForceUnlock that reaches Redis twice (a resend after a lost reply) must not
// delete the lock a waiter took after the first send.
func TestForceUnlockResendKeepsTheWaitersLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	plain := rdb(t)
	name := lockName(t)
	waiterClient := newClient(t)
	var armed atomic.Bool
	var waiterHold atomic.Pointer[lock.Hold]
	got := make(chan *lock.Hold, 1)
	r := rdb(t, hookOnce{kind: "force", armed: &armed, f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if err := next(ctx, cmd); err != nil {
			return err
		}
		// The reply is lost; before the resend, the waiter takes the lock.
		select {
		case h := <-got:
			waiterHold.Store(h)
		case <-time.After(5 * time.Second):
		}
		return next(ctx, cmd)
	}})
	c := lock.New(r)
	defer func() { _ = c.Close() }()
	must(c.Mutex(name).Lock(ctx))
	go func() {
		h, err := waiterClient.Mutex(name).TryLock(ctx, 5*time.Second, 0)
		if err != nil {
			t.Error(err)
		}
		got <- h
	}()
	waitLine(t, plain, name, waiterClient.ID())
	armed.Store(true)
	ok, err := c.Mutex(name).ForceUnlock(ctx)
	if err != nil || !ok {
		t.Fatalf("resent ForceUnlock = %v, %v; want true, nil", ok, err)
	}
	wh := waiterHold.Load()
	if wh == nil {
		t.Fatal("the waiter did not get the lock between the two sends")
	}
	if err := wh.Err(); err != nil {
		t.Fatalf("waiter's hold after the resend: %v", err)
	}
	if n := must(plain.Exists(ctx, name).Result()); n != 1 {
		t.Fatal("the resent ForceUnlock deleted the waiter's lock: two holders possible")
	}
	if _, err := newClient(t).Mutex(name).TryLock(ctx, 0, 0); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("a third client's TryLock while the waiter holds = %v; want ErrNotObtained", err)
	}
	noErr(t, wh.Unlock(ctx))
}

// A re-entry that fails (and whose undo fails too) after the lock was lost,
// while a renewal found it gone, reports the loss at once, not one renewal
// tick later.
func TestFailedReentryReportsALostLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	plain := rdb(t)
	name := lockName(t)
	var armed, failing atomic.Bool
	ticked := make(chan struct{})
	renewals := &countRenewals{}
	r := rdb(t, failScripts{on: &failing, kinds: []string{"release"}}, renewals,
		hookOnce{kind: "reenter", armed: &armed, f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
			failing.Store(true) // the undo will fail as well
			must(plain.Del(ctx, name).Result())
			before := renewals.n.Load()
			for renewals.n.Load() < before+2 { // a renewal sent after the delete
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(200 * time.Millisecond) // and its reply handled: it found the key gone
			close(ticked)
			err := errors.New("injected: connection reset")
			cmd.SetErr(err)
			return err
		}})
	// A 3s watchdog renews every 1s; the local deadline is 3s after the last renewal.
	c := lock.New(r, lock.WithWatchdogTimeout(3*time.Second))
	defer func() { _ = c.Close() }()
	h := must(c.Mutex(name).Lock(ctx))
	armed.Store(true)
	if _, err := c.Mutex(name).Lock(h.Context()); err == nil {
		t.Fatal("re-entry with Redis failing succeeded")
	}
	<-ticked
	if err := h.Err(); !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("hold's Err right after a failed re-entry of a deleted lock = %v; want ErrLockLost", err)
	}
	if cause := context.Cause(h.Context()); !errors.Is(cause, lock.ErrLockLost) {
		t.Fatalf("hold context cause = %v; want ErrLockLost", cause)
	}
	failing.Store(false)
}

// A re-entry that landed but lost its reply, with an undo that could not be
// sent, leaves Redis one level ahead; the outer Unlock must still release
// the lock (not answer "out of step" and leave it held for its lease).
func TestReentryOutOfStepIsReleased(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	plain := rdb(t)
	name := lockName(t)
	var armed, failing atomic.Bool
	r := rdb(t, failScripts{on: &failing, kinds: []string{"release"}},
		hookOnce{kind: "reenter", armed: &armed, f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
			_ = next(ctx, cmd) // lands in Redis
			failing.Store(true)
			err := errors.New("injected: reply lost")
			cmd.SetErr(err)
			return err
		}})
	c := lock.New(r)
	defer func() { _ = c.Close() }()
	h := must(c.Mutex(name).Lock(ctx))
	armed.Store(true)
	if _, err := c.Mutex(name).Lock(h.Context()); err == nil {
		t.Fatal("re-entry with a lost reply succeeded")
	}
	for _, v := range hgetall(t, plain, name) {
		if v != "2" {
			t.Fatalf("count in Redis after the lost re-entry = %s; want 2 (the case under test)", v)
		}
	}
	failing.Store(false)
	if err := h.Unlock(ctx); err != nil {
		t.Fatalf("outer Unlock with Redis one level ahead = %v; want nil", err)
	}
	if n := must(plain.Exists(ctx, name).Result()); n != 0 {
		t.Fatalf("lock still held after the outer Unlock (PTTL %v); want it released", must(plain.PTTL(ctx, name).Result()))
	}
	h2, err := newClient(t).Mutex(name).TryLock(ctx, time.Second, 0)
	if err != nil {
		t.Fatalf("another client after the release: %v", err)
	}
	noErr(t, h2.Unlock(ctx))
}

// A waiter whose context ends while an Unlock is handing it the lock returns
// within its context; the Unlock then releases the lock it would have handed
// over.
func TestWaiterLeavesDuringHandOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	plain := rdb(t)
	name := lockName(t)
	var armed atomic.Bool
	inTransfer := make(chan struct{})
	finish := make(chan struct{})
	r := rdb(t, hookOnce{kind: "transfer", armed: &armed, f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		close(inTransfer)
		<-finish // a slow round trip
		return next(ctx, cmd)
	}})
	c := lock.New(r)
	defer func() { _ = c.Close() }()
	h := must(c.Mutex(name).Lock(ctx))
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res := lockAsync(wctx, c, name)
	for lock.Waiting(c, name) != 1 {
		time.Sleep(time.Millisecond)
	}
	armed.Store(true)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := h.Unlock(ctx); err != nil {
			t.Errorf("Unlock handing off to a waiter that left = %v", err)
		}
	}()
	<-inTransfer
	cancel()
	select {
	case a := <-res:
		if !errors.Is(a.err, lock.ErrNotObtained) || !errors.Is(a.err, context.Canceled) {
			t.Errorf("Lock of a waiter that left during the hand-off = %v; want ErrNotObtained and Canceled", a.err)
		}
	case <-time.After(5 * time.Second):
		t.Error("the waiter's Lock did not return within 5s of its context ending; it waits for the transfer")
	}
	close(finish)
	wg.Wait()
	h2, err := newClient(t).Mutex(name).TryLock(ctx, 2*time.Second, 0)
	if err != nil {
		t.Fatalf("another client after the abandoned hand-off: %v (PTTL %v); want the granted lock released",
			err, must(plain.PTTL(ctx, name).Result()))
	}
	noErr(t, h2.Unlock(ctx))
}

// Two deployments sharing one Redis keep apart their locks and fencing
// counters when each has its own prefix.
func TestPrefixSeparatesDeployments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	plain := rdb(t)
	name := lockName(t)
	a := newClient(t, lock.WithPrefix("deploy-a:"))
	b := newClient(t, lock.WithPrefix("deploy-b:"))
	ha := must(a.Mutex(name).Lock(ctx))
	defer func() { _ = ha.Unlock(ctx) }()
	hb, err := b.Mutex(name).TryLock(ctx, 0, 0)
	if err != nil {
		t.Fatalf("deployment b's TryLock on the name deployment a holds = %v; want obtained", err)
	}
	defer func() { _ = hb.Unlock(ctx) }()
	if ha.Name() != "deploy-a:"+name || hb.Name() != "deploy-b:"+name {
		t.Fatalf("hold names = %q, %q; want the prefixes in front", ha.Name(), hb.Name())
	}
	if ha.Fence() != 1 || hb.Fence() != 1 {
		t.Fatalf("first fences = %d, %d; want 1 each (separate counters)", ha.Fence(), hb.Fence())
	}
	for _, k := range []string{"deploy-a:" + name, "redisson_lock_token:{deploy-a:" + name + "}",
		"deploy-b:" + name, "redisson_lock_token:{deploy-b:" + name + "}"} {
		if n := must(plain.Exists(ctx, k).Result()); n != 1 {
			t.Fatalf("key %s missing", k)
		}
	}
	if n := must(plain.Exists(ctx, name).Result()); n != 0 {
		t.Fatal("an unprefixed key was written")
	}
	// Same prefix, same lock.
	if _, err := newClient(t, lock.WithPrefix("deploy-a:")).Mutex(name).TryLock(ctx, 0, 0); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("same-prefix TryLock on a held lock = %v; want ErrNotObtained", err)
	}
	t.Cleanup(func() {
		plain.Del(context.Background(), "redisson_lock_token:{deploy-a:"+name+"}", "redisson_lock_token:{deploy-b:"+name+"}")
	})
}
