package skulock_test

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/skulock"
	"github.com/seckill/stock/internal/skulock/dbtable"
	"github.com/seckill/stock/internal/skulock/etcdlock"
	"github.com/seckill/stock/internal/skulock/redlock"
	"github.com/seckill/stock/internal/testserver"
)

// redlockOn returns a Redlock over the servers, with the node timeout the
// race detector needs on a shared machine.
func redlockOn(t *testing.T, servers []*testserver.Redis) *redlock.Locker {
	t.Helper()
	var nodes []redis.UniversalClient
	for _, s := range servers {
		c := redis.NewClient(redlock.NodeOptions(s.Addr, "", 300*time.Millisecond))
		t.Cleanup(func() { _ = c.Close() })
		nodes = append(nodes, c)
	}
	l := redlock.New(nodes, "", 10*time.Second, 300*time.Millisecond, nil)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func threeMasters(t *testing.T) []*testserver.Redis {
	return []*testserver.Redis{testserver.StartRedis(t), testserver.StartRedis(t), testserver.StartRedis(t)}
}

// With one of three masters killed, Redlock still takes (and excludes on)
// the lock through the other two; with two killed, TryLock fails with an
// error that is not ErrLockNotObtained: the store could not be asked, and
// the service takes its Redis-down path.
func TestRedlockMajority(t *testing.T) {
	t.Parallel()
	ms := threeMasters(t)
	a, b := redlockOn(t, ms), redlockOn(t, ms)
	ms[0].Kill()
	ctx := context.Background()
	h, err := a.TryLock(ctx, "maj", time.Second, 5*time.Second)
	if err != nil {
		t.Fatalf("TryLock with 2 of 3 masters up = %v; want a hold", err)
	}
	if _, err := b.TryLock(ctx, "maj", 50*time.Millisecond, 5*time.Second); !errors.Is(err, service.ErrLockNotObtained) {
		t.Fatalf("second TryLock with 2 of 3 up = %v; want ErrLockNotObtained", err)
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with 2 of 3 up = %v; want nil (a majority released)", err)
	}
	ms[1].Kill()
	_, err = a.TryLock(ctx, "maj", 100*time.Millisecond, 5*time.Second)
	if err == nil || errors.Is(err, service.ErrLockNotObtained) {
		t.Fatalf("TryLock with 1 of 3 masters up = %v; want an error that is not ErrLockNotObtained", err)
	}
}

// The fence grows from holder to holder even when the majority changes:
// a master that granted many locks alone (its counter far ahead) is part of
// one majority and not of the next. The largest count of the first
// majority is written back to the others, so the next majority INCRs past
// it.
func TestRedlockFenceAcrossMajorities(t *testing.T) {
	t.Parallel()
	ms := threeMasters(t)
	ctx := context.Background()
	fenceKey := "redlock_fence:" + skulock.Name("f")
	if err := ms[2].Client(t).Set(ctx, fenceKey, 100, 0).Err(); err != nil {
		t.Fatal(err)
	}
	l := redlockOn(t, ms)
	h := mustLock(t, l, "f", time.Second, 5*time.Second)
	first := h.Fence()
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	ms[2].Kill() // the next majority is masters 0 and 1
	h = mustLock(t, l, "f", time.Second, 5*time.Second)
	defer func() { _ = h.Unlock(ctx) }() // clean-up; the fences are what this test checks
	if first != 101 || h.Fence() <= first {
		t.Fatalf("fences %d then %d (master 2 at 100, then down); want 101, then > 101", first, h.Fence())
	}
}

// A clock jump on one master (simulated by its key vanishing early: a
// forward jump expires it there) leaves a lock held on all three masters
// excluded, since the other two still hold a majority; the same on two masters lets a second client
// in while the first still believes it holds. That is the documented limit
// of Redlock, shown here, and why the service keeps the versioned UPDATE.
func TestRedlockClockJump(t *testing.T) {
	t.Parallel()
	ms := threeMasters(t)
	a, b := redlockOn(t, ms), redlockOn(t, ms)
	ctx := context.Background()
	key := "redlock:" + skulock.Name("jump")
	h := mustLock(t, a, "jump", time.Second, 10*time.Second)
	// Clean-up: after the jump h is no longer held on a majority, so its
	// Unlock may well fail; that failure is the point of the test, not a fault.
	defer func() { _ = h.Unlock(ctx) }()
	if err := ms[0].Client(t).Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryLock(ctx, "jump", 50*time.Millisecond, 5*time.Second); !errors.Is(err, service.ErrLockNotObtained) {
		t.Fatalf("TryLock after a jump on 1 of 3 masters = %v; want ErrLockNotObtained", err)
	}
	if err := ms[1].Client(t).Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	h2, err := b.TryLock(ctx, "jump", time.Second, 5*time.Second)
	if err != nil {
		t.Fatalf("TryLock after a jump on 2 of 3 masters = %v; want a second holder (Redlock's limit)", err)
	}
	defer func() { _ = h2.Unlock(ctx) }() // clean-up; the two holders are what this test checks
	if h.Err() != nil || h2.Fence() <= h.Fence() {
		t.Fatalf("two holders: first Err %v, fences %d, %d; want the first still believing it holds, and the second's fence larger", h.Err(), h.Fence(), h2.Fence())
	}
}

// One jumping master is enough when the holder's majority is exactly two:
// master 2 is busy (another client's key) while A takes masters 0 and 1;
// master 0 jumps, master 2 frees up, and B takes 0 and 2 while A holds.
func TestRedlockClockJumpMinimalMajority(t *testing.T) {
	t.Parallel()
	ms := threeMasters(t)
	a, b := redlockOn(t, ms), redlockOn(t, ms)
	ctx := context.Background()
	key := "redlock:" + skulock.Name("min")
	if err := ms[2].Client(t).Set(ctx, key, "someone", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	h := mustLock(t, a, "min", time.Second, 10*time.Second)
	// Clean-up: after the jump h is no longer held on a majority, so its
	// Unlock may well fail; that failure is the point of the test, not a fault.
	defer func() { _ = h.Unlock(ctx) }()
	if err := ms[0].Client(t).Del(ctx, key).Err(); err != nil { // the jump
		t.Fatal(err)
	}
	if err := ms[2].Client(t).Del(ctx, key).Err(); err != nil { // the other client lets go
		t.Fatal(err)
	}
	h2, err := b.TryLock(ctx, "min", time.Second, 5*time.Second)
	if err != nil {
		t.Fatalf("TryLock after one jump under a two-master majority = %v; want a second holder (Redlock's limit)", err)
	}
	defer func() { _ = h2.Unlock(ctx) }() // clean-up; the two holders are what this test checks
	if h.Err() != nil || h2.Fence() <= h.Fence() {
		t.Fatalf("first Err %v, fences %d, %d; want two holders, the second's fence larger", h.Err(), h.Fence(), h2.Fence())
	}
}

// A paused master (SIGSTOP) costs each call at most the node timeout; the
// lock is taken through the other two, and the hold's validity is shorter
// by what the acquire took.
func TestRedlockPausedMaster(t *testing.T) {
	t.Parallel()
	ms := threeMasters(t)
	l := redlockOn(t, ms)
	ms[1].Signal(syscall.SIGSTOP)
	defer ms[1].Signal(syscall.SIGCONT)
	h := mustLock(t, l, "paused", time.Second, 5*time.Second)
	if err := h.Unlock(context.Background()); err != nil {
		t.Fatalf("Unlock with a paused master = %v; want nil (a majority released)", err)
	}
}

// A crashed holder's row (expired, never deleted) is taken over by the next
// TryLock, with a larger fence; the reaper deletes expired rows only.
func TestDBTableTakeoverAndReap(t *testing.T) {
	t.Parallel()
	dsn := migrated(t)
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	ctx := context.Background()
	for _, row := range []struct {
		name string
		ago  int
	}{{skulock.Name("crashed"), 5}, {skulock.Name("forgotten"), 5}, {skulock.Name("live"), -60}} {
		if _, err := db.ExecContext(ctx, "INSERT INTO sku_locks (name, owner, expires_at) VALUES (?, 'dead', NOW(6) - INTERVAL ? SECOND)", row.name, row.ago); err != nil {
			t.Fatal(err)
		}
	}
	var deadID int64
	if err := db.QueryRowContext(ctx, "SELECT MAX(id) FROM sku_locks").Scan(&deadID); err != nil {
		t.Fatal(err)
	}
	l := dbtable.New(db, 10*time.Second, nil)
	defer func() { _ = l.Close() }()
	h := mustLock(t, l, "crashed", time.Second, 5*time.Second)
	if h.Fence() <= deadID {
		t.Errorf("fence after taking over a crashed holder's row = %d; want > %d", h.Fence(), deadID)
	}
	if _, err := l.TryLock(ctx, "live", 0, 5*time.Second); !errors.Is(err, service.ErrLockNotObtained) {
		t.Errorf("TryLock of a SKU with a live row = %v; want ErrLockNotObtained", err)
	}
	n, err := l.Reap(ctx)
	if err != nil || n != 1 {
		t.Errorf("Reap = %d, %v; want 1 (the forgotten row), nil", n, err)
	}
	var left int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM sku_locks").Scan(&left); err != nil || left != 2 {
		t.Errorf("rows after the reap = %d, %v; want 2 (the live row and the new hold)", left, err)
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A store that cannot be reached is an error, not ErrLockNotObtained, for
// each gate (the service then takes its DB-only path or rejects).
func TestStoreDown(t *testing.T) {
	t.Parallel()
	port := testserver.FreePort(t)
	dead := "127.0.0.1:" + strconv.Itoa(port)
	rdb := redis.NewClient(&redis.Options{Addr: dead, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer func() { _ = rdb.Close() }()
	for _, c := range []struct {
		cfg skulock.Config
		st  skulock.Stores
	}{
		{skulock.Config{Gate: skulock.GateSetNX}, skulock.Stores{Redis: rdb}},
		{skulock.Config{Gate: skulock.GateDBTable}, skulock.Stores{MySQLDSN: "root@tcp(" + dead + ")/stock?timeout=200ms"}},
		{skulock.Config{Gate: skulock.GateRedlock, Redlock: redlock.Config{Addrs: []string{dead, dead, dead}}}, skulock.Stores{}},
		{skulock.Config{Gate: skulock.GateEtcd, Etcd: etcdlock.ClientConfig{Endpoints: []string{dead}, DialTimeout: 200 * time.Millisecond}}, skulock.Stores{}},
	} {
		cfg := c.cfg
		cfg.Watchdog = 5 * time.Second
		l, closeFn, err := skulock.Open(context.Background(), cfg, c.st)
		if err != nil {
			t.Fatalf("Open(%s) = %v", cfg.Gate, err)
		}
		_, err = l.TryLock(context.Background(), "down", 100*time.Millisecond, 0)
		if err == nil || errors.Is(err, service.ErrLockNotObtained) {
			t.Errorf("%s: TryLock with the store down = %v; want an error that is not ErrLockNotObtained", cfg.Gate, err)
		}
		if err := closeFn(); err != nil {
			t.Errorf("%s: close: %v", cfg.Gate, err)
		}
	}
}

// Open refuses what it cannot run: an unknown gate, a gate without a
// watchdog and no lease, redlock without masters, etcd without endpoints.
func TestOpenRefuses(t *testing.T) {
	for _, cfg := range []skulock.Config{
		{Gate: "zookeeper", Watchdog: time.Second},
		{Gate: skulock.GateSetNX},
		{Gate: skulock.GateRedlock, Watchdog: time.Second},
		{Gate: skulock.GateRedisson},
		{Gate: skulock.GateEtcd, Watchdog: time.Second},
	} {
		if _, _, err := skulock.Open(context.Background(), cfg, skulock.Stores{}); err == nil {
			t.Errorf("Open(%+v) = nil error; want one", cfg)
		}
	}
}

// Close stops everything a gate started: the reaper, background
// releases, the masters' connections, etcd's client and watchdogs.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	// The test's own Redis servers are waited for until the test ends.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/seckill/stock/internal/testserver.startProcess.func1"))
	dsn := migrated(t)
	ms := threeMasters(t)
	etcd := testserver.StartEtcd(t, 1)
	rdb := redis.NewClient(&redis.Options{Addr: ms[0].Addr})
	defer func() { _ = rdb.Close() }()
	for _, c := range []struct {
		cfg skulock.Config
		st  skulock.Stores
	}{
		{skulock.Config{Gate: skulock.GateEtcd, Etcd: etcdlock.ClientConfig{Endpoints: etcd.Endpoints()}}, skulock.Stores{}},
		{skulock.Config{Gate: skulock.GateSetNX}, skulock.Stores{Redis: rdb}},
		{skulock.Config{Gate: skulock.GateDBTable}, skulock.Stores{MySQLDSN: dsn}},
		{skulock.Config{Gate: skulock.GateRedlock, Redlock: redlock.Config{Addrs: []string{ms[0].Addr, ms[1].Addr, ms[2].Addr}}}, skulock.Stores{}},
	} {
		cfg := c.cfg
		cfg.Watchdog = 5 * time.Second
		l, closeFn, err := skulock.Open(context.Background(), cfg, c.st)
		if err != nil {
			t.Fatal(err)
		}
		h := mustLock(t, l, "leak", time.Second, 0)
		if err := h.Unlock(context.Background()); err != nil {
			t.Errorf("%s: Unlock = %v", cfg.Gate, err)
		}
		if err := closeFn(); err != nil {
			t.Errorf("%s: close: %v", cfg.Gate, err)
		}
	}
	_ = rdb.Close()
}
