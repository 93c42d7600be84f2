package etcdlock_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/skulock/etcdlock"
	"github.com/seckill/stock/internal/skulock/gate"
	"github.com/seckill/stock/internal/testserver"
)

// cluster is one single-member etcd for the package's tests.
func cluster(t *testing.T) *clientv3.Client {
	t.Helper()
	return testserver.StartEtcd(t, 1).Client(t)
}

func locker(t *testing.T, cli *clientv3.Client, ttl time.Duration) *etcdlock.Locker {
	t.Helper()
	l := etcdlock.New(cli, t.Name()+"/", ttl, 2*time.Second, nil)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// session is a library session of 5s on cli, closed at the end of the test.
func session(t *testing.T, cli *clientv3.Client) *concurrency.Session {
	t.Helper()
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	return sess
}

// The Mutex's pitfall, shown: two Mutexes on one session share the key
// prefix/<lease>, and both Lock at once. The Locker gives every hold a
// session of its own: eight goroutines on one Locker never overlap.
func TestOneSessionPerHold(t *testing.T) {
	t.Parallel()
	cli := cluster(t)
	sess := session(t, cli)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	a, b := concurrency.NewMutex(sess, "shared"), concurrency.NewMutex(sess, "shared")
	if err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Lock(ctx); err != nil {
		t.Fatalf("a second Mutex on the same session: Lock = %v; the pitfall is that it succeeds", err)
	}
	if a.Key() != b.Key() {
		t.Fatalf("keys %q and %q; the pitfall is one key for both", a.Key(), b.Key())
	}

	l := locker(t, cli, 5*time.Second)
	var inside, most atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 10 {
				h, err := l.TryLock(context.Background(), "one-locker", 10*time.Second, 0)
				if err != nil {
					t.Error(err)
					return
				}
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if err := h.Unlock(context.Background()); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if most.Load() != 1 {
		t.Errorf("holds of one Locker inside at once: %d; want 1", most.Load())
	}
}

// The Mutex's Unlock is a plain delete of its key: resent after a later
// Lock on the same session made the key again, it deletes the newer lock.
// Release compares the create revision and leaves it.
func TestReleaseComparesCreateRevision(t *testing.T) {
	t.Parallel()
	cli := cluster(t)
	sess := session(t, cli)
	ctx := context.Background()
	old := concurrency.NewMutex(sess, "retried")
	if err := old.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := etcdlock.Release(ctx, cli, old); !ok || err != nil {
		t.Fatalf("Release of the holder = %v, %v; want true, nil", ok, err)
	}
	newer := concurrency.NewMutex(sess, "retried")
	if err := newer.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := etcdlock.Release(ctx, cli, old); ok || err != nil {
		t.Fatalf("the old holder's Release resent = %v, %v; want false, nil", ok, err)
	}
	if n := keys(t, cli, newer.Key()); n != 1 {
		t.Fatalf("after the resent Release, %d keys at %q; want the newer lock's", n, newer.Key())
	}
	// What a resent plain delete (the Mutex's Unlock) does instead.
	if _, err := cli.Delete(ctx, old.Key()); err != nil {
		t.Fatal(err)
	}
	if n := keys(t, cli, newer.Key()); n != 0 {
		t.Fatalf("a plain delete left %d keys; this test expects it to delete the newer lock", n)
	}
}

func keys(t *testing.T, cli *clientv3.Client, key string) int64 {
	t.Helper()
	resp, err := cli.Get(context.Background(), key, clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// heldKey returns the key and lease of the one lock key under prefix.
func heldKey(t *testing.T, cli *clientv3.Client, prefix string) (string, clientv3.LeaseID) {
	t.Helper()
	resp, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("keys under %q: %v, %v; want one", prefix, resp, err)
	}
	return string(resp.Kvs[0].Key), clientv3.LeaseID(resp.Kvs[0].Lease)
}

// With lease 0 the watchdog keeps the session's lease alive past many
// TTLs; a lease revoked behind the holder's back (as an expiry on the
// cluster would) cancels the hold's context with ErrLockLost.
func TestWatchdogAndLostLease(t *testing.T) {
	t.Parallel()
	cli := cluster(t)
	l := locker(t, cli, 2*time.Second)
	h, err := l.TryLock(context.Background(), "kept", time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second) // 2.5 TTLs
	if err := h.Err(); err != nil {
		t.Fatalf("Err of a hold kept alive 2.5 TTLs = %v; want nil", err)
	}
	_, lease := heldKey(t, cli, l.Prefix("kept"))
	if _, err := cli.Revoke(context.Background(), lease); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Context().Done():
	case <-time.After(3 * time.Second):
		t.Fatal("the hold's context outlived its revoked lease by 3s")
	}
	if cause := context.Cause(h.Context()); !errors.Is(cause, gate.ErrLockLost) {
		t.Errorf("cause = %v; want ErrLockLost", cause)
	}
	if err := h.Unlock(context.Background()); !errors.Is(err, gate.ErrNotHeld) {
		t.Errorf("Unlock of the lost hold = %v; want ErrNotHeld", err)
	}
}

// A fixed lease is a session TTL nobody keeps alive: the lease's time to
// live only goes down, the key stays while the hold is held here, the hold
// is lost at its deadline, and then the key goes (revoked at the loss).
func TestFixedLeaseNotKeptAlive(t *testing.T) {
	t.Parallel()
	cli := cluster(t)
	l := locker(t, cli, 30*time.Second)
	ctx := context.Background()
	h, err := l.TryLock(ctx, "fixed", time.Second, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	key, lease := heldKey(t, cli, l.Prefix("fixed"))
	last := int64(1 << 62)
	for start := time.Now(); h.Err() == nil; time.Sleep(100 * time.Millisecond) {
		ttl, err := cli.TimeToLive(ctx, lease)
		if err != nil {
			t.Fatal(err)
		}
		if ttl.TTL > last {
			t.Fatalf("the lease's TTL went from %d to %d: renewed", last, ttl.TTL)
		}
		last = ttl.TTL
		if n := keys(t, cli, key); n != 1 && h.Err() == nil {
			t.Fatalf("the cluster dropped the key while the hold was still held here")
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("a 2s fixed lease still held 5s on")
		}
	}
	if !errors.Is(context.Cause(h.Context()), gate.ErrLockLost) {
		t.Errorf("cause = %v; want ErrLockLost", context.Cause(h.Context()))
	}
	for lostAt := time.Now(); keys(t, cli, key) != 0; time.Sleep(20 * time.Millisecond) {
		if time.Since(lostAt) > 3*time.Second {
			t.Fatal("the lost hold's key is still there 3s on")
		}
	}
	if _, err := l.TryLock(ctx, "fixed", 0, time.Second); err != nil {
		t.Errorf("TryLock after the fixed lease ran out = %v; want a hold", err)
	}
}

// A cluster that cannot be reached is an error past the grant's timeout,
// not ErrLockNotObtained (the service then takes its store-down path).
func TestClusterDown(t *testing.T) {
	t.Parallel()
	cli, err := etcdlock.Dial(etcdlock.ClientConfig{Endpoints: []string{"127.0.0.1:" + strconv.Itoa(testserver.FreePort(t))}, DialTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	l := etcdlock.New(cli, "", 5*time.Second, 200*time.Millisecond, nil)
	defer func() { _ = l.Close() }()
	_, err = l.TryLock(context.Background(), "down", time.Second, 0)
	if err == nil || errors.Is(err, service.ErrLockNotObtained) {
		t.Fatalf("TryLock with the cluster down = %v; want an error that is not ErrLockNotObtained", err)
	}
}

// With authentication on, the locker works as a user with the password,
// and Dial refuses a wrong one (it authenticates at once).
func TestAuthentication(t *testing.T) {
	t.Parallel()
	e := testserver.StartEtcd(t, 1)
	admin := e.Client(t)
	ctx := context.Background()
	_, _ = admin.RoleAdd(ctx, "root") // built in on some versions
	for _, step := range []func() error{
		func() error { _, err := admin.UserAdd(ctx, "root", "root-pw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := etcdlock.Dial(etcdlock.ClientConfig{Endpoints: e.Endpoints(), Username: "root", Password: "wrong", DialTimeout: 2 * time.Second}); err == nil {
		t.Fatal("Dial with a wrong password = nil error; want it refused")
	}
	cli, err := etcdlock.Dial(etcdlock.ClientConfig{Endpoints: e.Endpoints(), Username: "root", Password: "root-pw", DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	l := locker(t, cli, 5*time.Second)
	h, err := l.TryLock(ctx, "auth", time.Second, 0)
	if err != nil {
		t.Fatalf("TryLock as root = %v", err)
	}
	if err := h.Unlock(ctx); err != nil {
		t.Errorf("Unlock = %v", err)
	}
}
