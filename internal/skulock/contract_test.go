package skulock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/repo"
	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/skulock"
	"github.com/seckill/stock/internal/skulock/etcdlock"
	"github.com/seckill/stock/internal/skulock/redlock"
	"github.com/seckill/stock/internal/testserver"
)

// subject is one gate's Locker under the contract, with what it lacks.
type subject struct {
	name string
	// open returns a locker on the gate's store; each call a new client
	// (another process, as far as the lock can tell), all on the same store.
	open func(t *testing.T) service.Locker
}

// subjects returns every gate of skulock.Open on private or per-test
// stores: the Redis lock and SET NX PX on the shared Redis (keys under a
// prefix of the test's own), the lock table in a fresh database, Redlock on
// three redis-servers of its own, etcd on a single-member cluster of its own
// (Debian's etcd-server, as a deployment of one would run it).
func subjects(t *testing.T) []subject {
	t.Helper()
	prefix := "contract-" + time.Now().Format("150405.000000000") + ":"
	rdb := redis.NewClient(&redis.Options{Addr: testserver.SharedRedis})
	t.Cleanup(func() { _ = rdb.Close() })
	dsn := migrated(t)
	var addrs []string
	for range 3 {
		addrs = append(addrs, testserver.StartRedis(t).Addr)
	}
	etcd := testserver.StartEtcd(t, 1)
	open := func(t *testing.T, cfg skulock.Config, st skulock.Stores) service.Locker {
		t.Helper()
		cfg.Watchdog = 10 * time.Second
		l, closeFn, err := skulock.Open(context.Background(), cfg, st)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := closeFn(); err != nil {
				t.Errorf("close %s: %v", cfg.Gate, err)
			}
		})
		return l
	}
	return []subject{
		{"redisson", func(t *testing.T) service.Locker {
			return open(t, skulock.Config{Gate: skulock.GateRedisson}, skulock.Stores{Redis: rdb, Prefix: prefix})
		}},
		{"setnx", func(t *testing.T) service.Locker {
			return open(t, skulock.Config{Gate: skulock.GateSetNX}, skulock.Stores{Redis: rdb, Prefix: prefix})
		}},
		{"dbtable", func(t *testing.T) service.Locker {
			return open(t, skulock.Config{Gate: skulock.GateDBTable}, skulock.Stores{MySQLDSN: dsn, MySQLConns: 4})
		}},
		{"redlock", func(t *testing.T) service.Locker {
			return open(t, skulock.Config{Gate: skulock.GateRedlock, Redlock: redlock.Config{Addrs: addrs,
				// Generous for the race detector on a shared box; a node
				// that times out counts as down.
				NodeTimeout: 500 * time.Millisecond}}, skulock.Stores{Prefix: prefix})
		}},
		{"etcd", func(t *testing.T) service.Locker {
			return open(t, skulock.Config{Gate: skulock.GateEtcd,
				Etcd: etcdlock.ClientConfig{Endpoints: etcd.Endpoints()}}, skulock.Stores{Prefix: prefix})
		}},
	}
}

// migrated returns the DSN of a fresh database with the real migrations.
func migrated(t *testing.T) string {
	t.Helper()
	dsn := testserver.Database(t)
	s, err := repo.Open(context.Background(), dsn, repo.Options{MaxOpenConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	if _, err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return dsn
}

// TestContract runs the same cases against every gate: exclusion,
// a wait that runs out, a cancelled wait, expiry of a lease nobody renews,
// a stale holder's Unlock refused, fences that grow, Unlock idempotent.
// What each gate lacks beyond these is in the package documentation.
func TestContract(t *testing.T) {
	t.Parallel()
	for _, b := range subjects(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Run("exclusion", func(t *testing.T) { exclusion(t, b) })
			t.Run("wait_runs_out", func(t *testing.T) { waitRunsOut(t, b) })
			t.Run("cancelled_wait", func(t *testing.T) { cancelledWait(t, b) })
			t.Run("expiry", func(t *testing.T) { expiry(t, b) })
			t.Run("stale_unlock_refused", func(t *testing.T) { staleUnlock(t, b) })
			t.Run("fence_grows", func(t *testing.T) { fenceGrows(t, b) })
		})
	}
}

func sku(t *testing.T) string { return "c-" + time.Now().Format("150405.000000000") }

// Eight clients, each on its own locker, take one SKU's lock 15 times each
// behind a start barrier: never two inside at once, and every acquisition
// accounted for.
func exclusion(t *testing.T, b subject) {
	const clients, rounds = 8, 15
	s := sku(t)
	var inside, most, total atomic.Int64
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, clients*rounds)
	for range clients {
		l := b.open(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range rounds {
				h, err := l.TryLock(context.Background(), s, 20*time.Second, 5*time.Second)
				if err != nil {
					errs <- err
					return
				}
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(200 * time.Microsecond)
				total.Add(1)
				inside.Add(-1)
				if err := h.Unlock(context.Background()); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("%s: TryLock/Unlock under contention: %v", b.name, err)
	}
	if most.Load() != 1 || total.Load() != clients*rounds {
		t.Errorf("%s: at most %d inside at once, %d acquisitions; want 1, %d", b.name, most.Load(), total.Load(), clients*rounds)
	}
}

func mustLock(t *testing.T, l service.Locker, s string, wait, lease time.Duration) service.Hold {
	t.Helper()
	h, err := l.TryLock(context.Background(), s, wait, lease)
	if err != nil {
		t.Fatalf("TryLock(%q, %v, %v) = %v; want a hold", s, wait, lease, err)
	}
	return h
}

// A held lock is not obtained within a short wait; once released it is.
func waitRunsOut(t *testing.T, b subject) {
	s := sku(t)
	a, c := b.open(t), b.open(t)
	h := mustLock(t, a, s, time.Second, 5*time.Second)
	if _, err := c.TryLock(context.Background(), s, 60*time.Millisecond, 5*time.Second); !errors.Is(err, service.ErrLockNotObtained) {
		t.Fatalf("%s: TryLock of a held lock, wait 60ms = %v; want ErrLockNotObtained", b.name, err)
	}
	if _, err := c.TryLock(context.Background(), s, 0, 5*time.Second); !errors.Is(err, service.ErrLockNotObtained) {
		t.Fatalf("%s: TryLock of a held lock, wait 0 = %v; want ErrLockNotObtained", b.name, err)
	}
	if err := h.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := mustLock(t, c, s, time.Second, 5*time.Second).Unlock(context.Background()); err != nil {
		t.Errorf("%s: Unlock after the lock was released and taken again = %v; want nil", b.name, err)
	}
}

// A wait whose context ends returns ErrLockNotObtained joined with the
// context's error (the service tells "busy" from "gone" by that).
func cancelledWait(t *testing.T, b subject) {
	s := sku(t)
	a, c := b.open(t), b.open(t)
	h := mustLock(t, a, s, time.Second, 5*time.Second)
	defer func() {
		if err := h.Unlock(context.Background()); err != nil {
			t.Errorf("%s: Unlock of the hold a wait gave up on = %v; want nil", b.name, err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Millisecond)
	defer cancel()
	_, err := c.TryLock(ctx, s, 10*time.Second, 5*time.Second)
	if !errors.Is(err, service.ErrLockNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s: TryLock with a context that ends = %v; want ErrLockNotObtained and context.DeadlineExceeded", b.name, err)
	}
}

// A fixed lease that nobody renews ends: the hold's context is cancelled
// with ErrLockLost, Err says so, and another client gets the lock.
func expiry(t *testing.T, b subject) {
	s := sku(t)
	a, c := b.open(t), b.open(t)
	// (Whether a fresh hold's Err is nil depends on how long its 150ms
	// took to arrive; staleUnlock checks it for a 5s lease.)
	h := mustLock(t, a, s, time.Second, 150*time.Millisecond)
	select {
	case <-h.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: the hold's context was not cancelled 5s into a 150ms lease", b.name)
	}
	if cause := context.Cause(h.Context()); !errors.Is(cause, skulock.ErrLockLost) {
		t.Errorf("%s: cause of the expired hold's context = %v; want ErrLockLost", b.name, cause)
	}
	if err := h.Err(); !errors.Is(err, skulock.ErrLockLost) {
		t.Errorf("%s: Err of an expired hold = %v; want ErrLockLost", b.name, err)
	}
	h2 := mustLock(t, c, s, 5*time.Second, 5*time.Second)
	if h2.Fence() <= h.Fence() {
		t.Errorf("%s: fence after an expiry %d; want > %d", b.name, h2.Fence(), h.Fence())
	}
	if err := h2.Unlock(context.Background()); err != nil {
		t.Errorf("%s: Unlock of the hold after an expiry = %v; want nil", b.name, err)
	}
}

// The holder whose lease ran out and was taken over cannot release the new
// holder's lock: its Unlock says ErrNotHeld and the lock stays held. A
// second Unlock of the same hold is ErrNotHeld too and changes nothing.
func staleUnlock(t *testing.T, b subject) {
	s := sku(t)
	a, c, d := b.open(t), b.open(t), b.open(t)
	stale := mustLock(t, a, s, time.Second, 100*time.Millisecond)
	<-stale.Context().Done()
	h := mustLock(t, c, s, 5*time.Second, 5*time.Second)
	if err := h.Err(); err != nil {
		t.Fatalf("%s: Err of a fresh hold = %v; want nil", b.name, err)
	}
	if err := stale.Unlock(context.Background()); !errors.Is(err, skulock.ErrNotHeld) {
		t.Errorf("%s: Unlock by the expired holder = %v; want ErrNotHeld", b.name, err)
	}
	if _, err := d.TryLock(context.Background(), s, 0, 5*time.Second); !errors.Is(err, service.ErrLockNotObtained) {
		t.Fatalf("%s: after the stale Unlock, TryLock = %v; want ErrLockNotObtained (the new holder still holds)", b.name, err)
	}
	if err := h.Unlock(context.Background()); err != nil {
		t.Fatalf("%s: Unlock by the holder = %v; want nil", b.name, err)
	}
	if err := h.Err(); !errors.Is(err, skulock.ErrNotHeld) {
		t.Errorf("%s: Err after Unlock = %v; want ErrNotHeld", b.name, err)
	}
	if err := h.Unlock(context.Background()); !errors.Is(err, skulock.ErrNotHeld) {
		t.Errorf("%s: second Unlock = %v; want ErrNotHeld", b.name, err)
	}
	if err := mustLock(t, d, s, 0, 5*time.Second).Unlock(context.Background()); err != nil {
		t.Errorf("%s: Unlock of the next holder = %v; want nil", b.name, err)
	}
}

// Every new holder's fence is larger than the last one's.
func fenceGrows(t *testing.T, b subject) {
	s := sku(t)
	ls := []service.Locker{b.open(t), b.open(t)}
	var last int64
	for i := range 6 {
		h := mustLock(t, ls[i%2], s, time.Second, 5*time.Second)
		if h.Fence() <= last {
			t.Errorf("%s: fence of acquisition %d = %d; want > %d", b.name, i, h.Fence(), last)
		}
		last = h.Fence()
		if err := h.Unlock(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}
