package chaos

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seckill/stock/internal/skulock"
	"github.com/seckill/stock/loadtest/driver"
)

// The etcd gate's rows (STOCK_LOCK_BACKEND=etcd on a three-member cluster
// of the rig's own). Its pause row is 11d (pauseGate).

// etcdEnv: the watchdog's TTL at 2s (etcd's smallest lease with a 1s
// election timeout), a grant or release given up after 1s (the cluster is
// then down for the order: db-only), a 20ms critical section.
var etcdEnv = map[string]string{"STOCK_LOCK_WATCHDOG": "2s", "STOCK_ETCD_DIAL_TIMEOUT": "1s", "STOCK_TEST_CRITICAL_DELAY": "20ms"}

// etcdRig starts three instances on the etcd gate and a load of stock
// units for twice as many buyers, and waits for a tenth to sell.
func etcdRig(ctx context.Context, t *testing.T, stock int64) (*rig, <-chan outcome) {
	t.Helper()
	r := newRig(t, rigConfig{strategy: "lock+version", gate: skulock.GateEtcd, env: etcdEnv})
	out := r.load(ctx, driver.Config{Stock: stock, Buyers: int(2 * stock), Concurrency: 20, Quantity: 1, Retries: 10, Duration: 2 * time.Minute})
	r.waitSold(ctx, stock/10)
	return r, out
}

// 23. The etcd leader is SIGKILLed under load and left down: the two
// others elect a new one (the leases are carried over, extended by an
// election timeout), and the lock is taken again without a db-only order
// being needed for long.
func etcdLeaderKilled(t *testing.T, row *Row) {
	row.Strategy = "lock+version, etcd"
	ctx := ctxFor(t, 3*time.Minute)
	r, out := etcdRig(ctx, t, size[int64](300, 1000))
	leader := r.etcd.Leader()
	base := r.acquired(ctx)
	leader.Kill()
	t0 := time.Now()
	back := r.lockBack(ctx, t0, base, 20*time.Second)
	res := r.finish(out, row, t0)
	row.Note = fmt.Sprintf("leader %s of 3 SIGKILLed and left down; the next lock acquisition came %s after the kill; db-only orders %.0f, lock errors %.0f, lost holds %.0f.",
		leader.Name, secs(back), row.DBOnly, res.Metrics.Sum.LockResults["error"], row.LostLocks)
	r.requireSafe(res, true)
	if back < 0 {
		t.Errorf("no lock acquisition within 20s of killing the etcd leader\n%s", r.fleet.Logs())
	}
}

// 24. Quorum lost: two of three members SIGKILLed for 4s. No lease can be
// granted, so every order's lock call fails after STOCK_ETCD_DIAL_TIMEOUT
// and the order is placed on the DB-only path (the conditional UPDATE,
// STOCK_ON_REDIS_DOWN=db-only): the sale goes on, slower, and stays exact.
// Holds taken before the loss are lost at their deadline (no renewal).
// With the members back, the lock is taken again.
func etcdQuorumLost(t *testing.T, row *Row) {
	row.Strategy = "lock+version, etcd"
	ctx := ctxFor(t, 3*time.Minute)
	r, out := etcdRig(ctx, t, size[int64](300, 1000))
	down := r.etcd.Members[1:]
	s0 := r.sold(ctx)
	for _, m := range down {
		m.Kill()
	}
	t0 := time.Now()
	time.Sleep(4 * time.Second)
	soldWhileDown := r.sold(ctx) - s0
	for _, m := range down {
		m.Start()
	}
	t1 := time.Now()
	base := r.acquired(ctx)
	back := r.lockBack(ctx, t1, base, 30*time.Second)
	res := r.finish(out, row, t0)
	row.Note = fmt.Sprintf("members %s and %s SIGKILLed for 4s (no quorum): %d units sold meanwhile, db-only orders %.0f, lock errors %.0f; the lock was taken again %s after the restart.",
		down[0].Name, down[1].Name, soldWhileDown, row.DBOnly, res.Metrics.Sum.LockResults["error"], secs(back))
	r.requireSafe(res, true)
	if row.DBOnly == 0 || back < 0 {
		t.Errorf("quorum lost: db-only orders %v, lock back after %v; want orders placed db-only while it was lost and the lock back once it returned\n%s", row.DBOnly, back, r.fleet.Logs())
	}
}

// 25. Every member SIGKILLed at once and restarted 1s later on its data:
// the cluster comes back with its revisions (the fences keep growing) and
// its leases, which the old holders no longer renew; orders go DB-only
// meanwhile and the lock is taken again once those leases ran out.
func etcdRestartAll(t *testing.T, row *Row) {
	row.Strategy = "lock+version, etcd"
	ctx := ctxFor(t, 3*time.Minute)
	r, out := etcdRig(ctx, t, size[int64](300, 1000))
	for _, m := range r.etcd.Members {
		m.Kill()
	}
	t0 := time.Now()
	time.Sleep(time.Second)
	for _, m := range r.etcd.Members {
		m.Start()
	}
	r.etcd.WaitReady(30 * time.Second)
	t1 := time.Now()
	base := r.acquired(ctx)
	back := r.lockBack(ctx, t1, base, 30*time.Second)
	res := r.finish(out, row, t0)
	row.Note = fmt.Sprintf("all 3 members SIGKILLed, restarted after 1s: quorum again %s after the kill, the lock %s after that; db-only orders %.0f, lost holds %.0f.",
		secs(t1.Sub(t0)), secs(back), row.DBOnly, row.LostLocks)
	r.requireSafe(res, true)
	if back < 0 {
		t.Errorf("no lock acquisition within 30s of the cluster's restart\n%s", r.fleet.Logs())
	}
}
