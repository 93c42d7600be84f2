package handler_test

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/seckill/stock/internal/service"
)

// safeStrategies are the strategy table's safe rows.
var safeStrategies = func() []service.Strategy {
	var out []service.Strategy
	for _, s := range service.StrategyTable() {
		if s.Safe {
			out = append(out, s.Name)
		}
	}
	return out
}()

// checkExact asserts the proof's invariants from the server's own state: the
// audit, and the orders table read straight from MySQL against what the
// clients were told.
func checkExact(t *testing.T, d *db, in *instance, sku string, stock, demand int, rs []reply) {
	t.Helper()
	a := in.audit(t, sku)
	want := int64(min(stock, demand))
	if a.Sold != want || a.Available != int64(stock)-want || a.Oversold != 0 || !a.Consistent {
		t.Fatalf("audit = %+v; want sold %d, available %d, consistent", a, want, int64(stock)-want)
	}
	orders := d.ordersOf(t, sku)
	created := 0
	for i, r := range rs {
		if r.status == http.StatusCreated {
			created++
			var o struct {
				ID  int64  `json:"id"`
				Key string `json:"idempotency_key"`
			}
			r.json(t, &o)
			if orders[o.Key] != o.ID {
				t.Fatalf("buyer %d was told order %d (key %s); the database has %d", i, o.ID, o.Key, orders[o.Key])
			}
		}
	}
	if int64(len(orders)) != a.Orders || a.OrderedQuantity != want {
		t.Fatalf("orders in MySQL = %d (quantity %d); audit says %d; want quantity %d", len(orders), a.OrderedQuantity, a.Orders, want)
	}
	if created > len(orders) {
		t.Fatalf("%d buyers saw 201 but only %d orders exist", created, len(orders))
	}
}

// Two instances, 200 concurrent buyers, 50 units: every safe strategy sells
// exactly 50; `none` oversells in the same test.
func TestOversell(t *testing.T) {
	t.Parallel()
	for _, st := range append(safeStrategies, service.StrategyNone) {
		t.Run(string(st), func(t *testing.T) {
			t.Parallel()
			d := newDB(t)
			ins := []*instance{newInstance(t, d, instanceOpts{strategy: st}), newInstance(t, d, instanceOpts{strategy: st})}
			ins[0].setStock(t, "HOT", 50)
			rs := buyers(t, ins, "HOT", 200, 1)
			if st == service.StrategyNone {
				a := ins[0].audit(t, "HOT")
				if a.Oversold == 0 || a.Consistent {
					t.Fatalf("strategy none: audit = %+v; want an oversell detected", a)
				}
				t.Logf("strategy none oversold by %d (orders %d for 50 units), statuses %v", a.Oversold, a.Orders, count(rs))
				return
			}
			checkExact(t, d, ins[0], "HOT", 50, 200, rs)
			if c := count(rs); c[http.StatusCreated] != 50 || c[http.StatusConflict] != 150 {
				t.Fatalf("statuses %v; want 50 x 201 and 150 x 409", c)
			}
			if st == service.StrategyLockVersion {
				var batches, orders float64
				for _, in := range ins {
					var m dto.Metric
					_ = in.metrics.BatchSize.Write(&m)
					batches += float64(m.GetHistogram().GetSampleCount())
					orders += m.GetHistogram().GetSampleSum()
				}
				t.Logf("lock+version: %v orders requests in %v lock acquisitions", orders, batches)
				if batches == 0 || batches >= orders {
					t.Fatalf("%v lock acquisitions for %v order requests; want requests combined", batches, orders)
				}
			}
		})
	}
}

// 3 left, two concurrent orders of 2: exactly one succeeds.
func TestQuantityGuard(t *testing.T) {
	t.Parallel()
	for _, st := range safeStrategies {
		t.Run(string(st), func(t *testing.T) {
			t.Parallel()
			d := newDB(t)
			ins := []*instance{newInstance(t, d, instanceOpts{strategy: st}), newInstance(t, d, instanceOpts{strategy: st})}
			ins[0].setStock(t, "Q", 3)
			rs := buyers(t, ins, "Q", 2, 2)
			if c := count(rs); c[http.StatusCreated] != 1 || c[http.StatusConflict] != 1 {
				t.Fatalf("two orders of 2 against 3: statuses %v; want one 201 and one 409", c)
			}
			checkExact(t, d, ins[0], "Q", 3, 2, rs)
		})
	}
}

// anyoneLocker is a broken lock that grants every request at once.
type anyoneLocker struct{}

type noHold struct{}

func (noHold) Context() context.Context     { return context.Background() }
func (noHold) Fence() int64                 { return 1 } // one token for all, from 1 like a real lock's
func (noHold) Err() error                   { return nil }
func (noHold) Unlock(context.Context) error { return nil }

func (anyoneLocker) TryLock(context.Context, string, time.Duration, time.Duration) (service.Hold, error) {
	return noHold{}, nil
}

// The backstop: a writer that got past the lock with a stale version is
// rejected by the versioned UPDATE, the conflict is counted, and nothing is
// oversold.
func TestBackstopRejectsStaleWriter(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	var once sync.Once
	var rogue reply
	var in *instance
	done := make(chan struct{})
	// The first order, inside its transaction after its UPDATE, lets a
	// second order in past the (broken) lock: that one reads the old
	// version, and its UPDATE waits on the row lock until the first commits.
	// The first commits once MySQL shows that UPDATE waiting.
	blocked := d.stockUpdateWaits(t)
	hook := func() {
		once.Do(func() {
			go func() {
				defer close(done)
				rogue = in.order(t, "rogue", "ONE", 1)
			}()
			if !blocked(10 * time.Second) {
				t.Error("the stale writer's UPDATE never waited on the stock row")
			}
		})
	}
	// One order per transaction (no combining), so the stale writer runs
	// beside the first instead of joining its batch.
	in = newInstance(t, d, instanceOpts{strategy: service.StrategyLockVersion, locker: anyoneLocker{}, hook: hook, batchMax: 1})
	in.setStock(t, "ONE", 1)
	first := in.order(t, "first", "ONE", 1)
	<-done
	if first.status != http.StatusCreated || rogue.status != http.StatusConflict {
		t.Fatalf("first = %d, stale writer = %d %s; want 201 and 409 sold-out", first.status, rogue.status, rogue.body)
	}
	if n := testutil.ToFloat64(in.metrics.Conflicts.WithLabelValues("lock+version")); n < 1 {
		t.Fatalf("backstop conflicts = %v; want >= 1", n)
	}
	if a := in.audit(t, "ONE"); a.Sold != 1 || a.Oversold != 0 || !a.Consistent {
		t.Fatalf("audit = %+v; want exactly 1 sold", a)
	}
}

// The same broken lock with the naive `lock` strategy oversells: the reason
// the backstop exists.
func TestBrokenLockWithoutBackstopOversells(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	var started atomic.Int32
	blocked := d.stockUpdateWaits(t)
	hook := func() {
		// The first to get here commits once the other one, which read the
		// stock row before it, has its UPDATE waiting on that row.
		if started.Add(1) == 1 && !blocked(10*time.Second) {
			t.Error("the second order's UPDATE never waited on the stock row")
		}
	}
	in := newInstance(t, d, instanceOpts{strategy: service.StrategyLock, locker: anyoneLocker{}, hook: hook})
	in.setStock(t, "ONE", 1)
	var wg sync.WaitGroup
	rs := make([]reply, 2)
	for i := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 100 * time.Millisecond)
			rs[i] = in.order(t, "k"+strconv.Itoa(i), "ONE", 1)
		}()
	}
	wg.Wait()
	if a := in.audit(t, "ONE"); a.Oversold != 1 || a.Consistent {
		t.Fatalf("naive lock strategy with a broken lock: audit = %+v, statuses %v; want oversold 1", a, count(rs))
	}
}
