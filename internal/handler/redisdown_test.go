package handler_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/testserver"
)

// Redis stopped: orders sell exactly the stock through the DB-only path, and
// go back to the lock when Redis returns.
func TestRedisDownDBOnly(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t)
	d := newDB(t)
	ins := []*instance{
		newInstance(t, d, instanceOpts{redisAddr: srv.Addr}),
		newInstance(t, d, instanceOpts{redisAddr: srv.Addr}),
	}
	ins[0].setStock(t, "R", 60)
	rs := buyers(t, ins, "R", 20, 1) // Redis up: through the lock
	acquired := func() float64 {
		n := 0.0
		for _, in := range ins {
			n += testutil.ToFloat64(in.metrics.LockResults.WithLabelValues("acquired"))
		}
		return n
	}
	dbOnlyUp := 0.0
	for _, in := range ins {
		dbOnlyUp += testutil.ToFloat64(in.metrics.DBOnly)
	}
	if acquired() < 1 || dbOnlyUp != 0 {
		t.Fatalf("with Redis up: %v lock acquisitions, %v DB-only orders; want some and none", acquired(), dbOnlyUp)
	}

	srv.Kill()
	t0 := time.Now()
	rs = append(rs, buyers(t, ins, "R", 100, 1)...)
	t.Logf("100 buyers with Redis down took %v", time.Since(t0)) // 100 more buyers for the 40 left, Redis down
	dbOnly := 0.0
	for _, in := range ins {
		dbOnly += testutil.ToFloat64(in.metrics.DBOnly)
	}
	if dbOnly < 40 { // each order, batched or not, counts once
		t.Fatalf("DB-only orders while Redis was down = %v; want >= 40", dbOnly)
	}
	// Ready stays true in db-only mode.
	if r := do(t, "GET", ins[0].url+"/readyz", nil, ""); r.status != 200 {
		t.Fatalf("readyz with Redis down in db-only mode = %d %s; want 200", r.status, r.body)
	}
	// The first 20 of these 100 buyers reuse the keys of the 20 above and are
	// answered as replays; the other 80 compete for the 40 units left.
	a := ins[0].audit(t, "R")
	if a.Sold != 60 || a.Available != 0 || !a.Consistent {
		t.Fatalf("audit after the outage = %+v; want exactly 60 sold", a)
	}
	_ = rs

	t0 = time.Now()
	srv.Start()
	t.Logf("restart took %v", time.Since(t0))
	ins[0].setStock(t, "R", 10)
	before := acquired()
	time.Sleep(1100 * time.Millisecond) // the service skips the lock for 1s after a failure
	// (An instance that has not heard of the restock yet tells an order
	// to retry: retried, as a client does.)
	for i := 0; i < 5; i++ {
		if r := ins[i%2].orderRetrying(t, testBuyer, "back-"+string(rune('a'+i)), "R", 1); r.status != http.StatusCreated {
			t.Fatalf("order after Redis returned = %d %s", r.status, r.body)
		}
	}
	if got := acquired() - before; got < 5 {
		t.Fatalf("lock acquisitions after Redis returned = %v; want at least 5 (back on the lock)", got)
	}
}

// STOCK_ON_REDIS_DOWN=reject: 503 with Retry-After, nothing sold, not ready.
func TestRedisDownReject(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t)
	d := newDB(t)
	in := newInstance(t, d, instanceOpts{redisAddr: srv.Addr, reject: true, strategy: service.StrategyLockVersion})
	in.setStock(t, "R", 5)
	srv.Kill()
	r := in.order(t, "k1", "R", 1)
	if r.status != http.StatusServiceUnavailable || r.problemType() != "unavailable" || r.header.Get("Retry-After") == "" {
		t.Fatalf("order with Redis down in reject mode = %d %s; want 503 unavailable with Retry-After", r.status, r.body)
	}
	if r := do(t, "GET", in.url+"/readyz", nil, ""); r.status != http.StatusServiceUnavailable {
		t.Fatalf("readyz with Redis down in reject mode = %d; want 503", r.status)
	}
	if a := in.audit(t, "R"); a.Sold != 0 || a.Orders != 0 {
		t.Fatalf("audit = %+v; want nothing sold", a)
	}
}
