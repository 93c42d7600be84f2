package service_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/seckill/stock/internal/service"
)

// The pre-warm warms a SKU once per start, only within its lead, and
// through the service's warmer seeds the counter and takes the lock once.
func TestPrewarmOncePerStart(t *testing.T) {
	u := newUnit(t, service.Config{Strategy: service.StrategyCounterCond})
	ctx := context.Background()
	schedule := func(sku string, in time.Duration) {
		t.Helper()
		start := service.At(time.Now().Add(in))
		if _, err := u.store.SetStock(ctx, sku, service.StockSetting{Available: 7, StartsAt: service.TimeSetting{Set: true, At: start}}); err != nil {
			t.Fatal(err)
		}
	}
	schedule("SOON", 5*time.Second)
	schedule("LATER", time.Hour)
	schedule("BEGUN", -time.Second)
	var got []string
	pools := 0
	failing := func(context.Context, service.Stock) error { return errors.New("a part that fails") }
	p := &service.Prewarmer{Lead: 10 * time.Second, Store: u.store, Log: slog.New(slog.DiscardHandler), Warmers: []service.Warmer{
		failing, u.svc.Warm,
		func(_ context.Context, st service.Stock) error { got = append(got, st.SKU); return nil },
	}, Pools: []func(context.Context) error{func(context.Context) error { pools++; return nil }}}
	schedule("SOON2", 5*time.Second)
	if n := p.Once(ctx); n != 2 || len(got) != 2 || pools != 1 {
		t.Fatalf("first look warmed %d: %v, pools %d times; want SOON and SOON2 (LATER is past the lead, BEGUN has started), pools once", n, got, pools)
	}
	if n, ok, err := u.counter.Available(ctx, "SOON"); err != nil || !ok || n != 7 {
		t.Fatalf("SOON's counter after the warm = %d, %v, %v; want seeded with 7", n, ok, err)
	}
	if n := p.Once(ctx); n != 0 || pools != 1 {
		t.Fatalf("second look warmed %d, pools %d times; want 0 (once per start), pools still once", n, pools)
	}
	schedule("SOON", 6*time.Second) // a new start: warmed again
	if n := p.Once(ctx); n != 1 {
		t.Fatalf("after the start moved, warmed %d; want 1", n)
	}
}

// Under a locking strategy the warmer takes and releases the SKU's lock.
func TestWarmTakesTheLock(t *testing.T) {
	u := newUnit(t, service.Config{})
	calls := u.locks.Calls()
	if err := u.svc.Warm(context.Background(), service.Stock{SKU: "W"}); err != nil {
		t.Fatal(err)
	}
	if u.locks.Calls() != calls+1 || u.locks.Holder("W") != nil {
		t.Fatalf("lock calls %d -> %d, holder %v; want one take, released", calls, u.locks.Calls(), u.locks.Holder("W"))
	}
}
