package service_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/stock/internal/service"
)

// lockSetups are the strategies that take the SKU lock.
func lockSetups() []setup {
	var out []setup
	for _, s := range setups() {
		if s.cfg.Strategy.Info().UsesLock {
			out = append(out, s)
		}
	}
	return out
}

var errRedis = errors.New("redis: connection refused")

// While the lock cannot be asked for, orders take the DB-only conditional
// write and skip the lock for a window; once the window is over the lock is
// asked again, and orders take it as soon as it answers.
func TestRedisDownDBOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, st := range lockSetups() {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			u := newUnit(t, st.cfg)
			u.setStock(t, u.sku, 10, 0)
			u.locks.SetDown(errRedis)
			before := time.Now()
			o, _, err := u.svc.Place(ctx, u.req("k1", 1))
			if err != nil || o.Fence != nil {
				t.Fatalf("Place with the lock down = %+v, %v; want placed without a fence", o, err)
			}
			s := u.store.Stats()
			if s.Deducts[service.WriteConditional] != 1 || len(s.BatchSizes) != 0 || s.Deducts[service.WritePlain] != 0 {
				t.Fatalf("writes with the lock down = %+v; want one conditional Deduct and nothing else", s)
			}
			until := service.RedisDownUntil(u.svc)
			if !until.After(before) || until.After(time.Now().Add(2*time.Second)) {
				t.Fatalf("the lock is skipped until %v (now %v); want a window of about a second", until, time.Now())
			}
			// Within the window the lock is not asked, for orders or restocks.
			calls := u.locks.Calls()
			if _, _, err := u.svc.Place(ctx, u.req("k2", 1)); err != nil {
				t.Fatal(err)
			}
			if _, err := u.parts.Inventory.SetStock(ctx, u.sku, service.StockSetting{Available: 20}); err != nil {
				t.Fatal(err)
			}
			if n := u.locks.Calls() - calls; n != 0 {
				t.Fatalf("lock asked %d times within the window; want 0", n)
			}
			if n := u.store.Stats().Deducts[service.WriteConditional]; n != 2 {
				t.Fatalf("conditional writes = %d; want 2", n)
			}
			// After the window, still down: asked once, DB-only again.
			service.EndRedisBackoff(u.svc)
			if _, _, err := u.svc.Place(ctx, u.req("k3", 1)); err != nil {
				t.Fatal(err)
			}
			if n := u.locks.Calls() - calls; n != 1 || !service.RedisDownUntil(u.svc).After(time.Now()) {
				t.Fatalf("after the window with the lock still down: asked %d times, window until %v; want 1 and a new window", n, service.RedisDownUntil(u.svc))
			}
			// Back up: the next order after the window takes the lock.
			u.locks.SetDown(nil)
			service.EndRedisBackoff(u.svc)
			o, _, err = u.svc.Place(ctx, u.req("k4", 1))
			if err != nil || o.Fence == nil {
				t.Fatalf("Place once the lock answers = %+v, %v; want placed under the lock (with a fence)", o, err)
			}
			if n := u.store.Stats().Deducts[service.WriteConditional]; n != 3 {
				t.Fatalf("conditional writes after recovery = %d; want still 3", n)
			}
			if a := u.audit(t); !a.Consistent || a.Orders != 4 {
				t.Fatalf("audit = %+v; want consistent with 4 orders", a)
			}
		})
	}
}

// In reject mode an order is refused with ErrUnavailable while the lock
// cannot be asked for, with nothing written, and placed once it answers.
func TestRedisDownReject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, st := range lockSetups() {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			cfg := st.cfg
			cfg.OnRedisDown = service.OnRedisDownReject
			u := newUnit(t, cfg)
			u.setStock(t, u.sku, 10, 0)
			u.locks.SetDown(errRedis)
			for _, key := range []string{"k1", "k2"} { // asked, then within the window
				if _, _, err := u.svc.Place(ctx, u.req(key, 1)); !errors.Is(err, service.ErrUnavailable) {
					t.Fatalf("Place(%s) with the lock down in reject mode = %v; want ErrUnavailable", key, err)
				}
			}
			if s := u.store.Stats(); len(s.Deducts) != 0 || len(s.BatchSizes) != 0 {
				t.Fatalf("writes in reject mode = %+v; want none", s)
			}
			u.locks.SetDown(nil)
			service.EndRedisBackoff(u.svc)
			if o, _, err := u.svc.Place(ctx, u.req("k1", 1)); err != nil || o.Fence == nil {
				t.Fatalf("Place once the lock answers = %+v, %v; want placed under the lock", o, err)
			}
			if a := u.audit(t); !a.Consistent || a.Orders != 1 {
				t.Fatalf("audit = %+v; want 1 order", a)
			}
		})
	}
}

// A lock wait that runs out is ErrBusy, not the DB-only path: the lock
// answered, it is just held.
func TestLockWaitRunsOut(t *testing.T) {
	t.Parallel()
	for _, st := range lockSetups() {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			cfg := st.cfg
			cfg.LockWait = 20 * time.Millisecond
			u := newUnit(t, cfg)
			u.setStock(t, u.sku, 10, 0)
			h, err := u.locks.Lock(u.sku)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = h.Unlock(context.Background()) }()
			if _, _, err := u.svc.Place(context.Background(), u.req("k1", 1)); !errors.Is(err, service.ErrBusy) {
				t.Fatalf("Place while another instance holds the lock past LockWait = %v; want ErrBusy", err)
			}
			if s := u.store.Stats(); len(s.Deducts) != 0 || len(s.BatchSizes) != 0 || !service.RedisDownUntil(u.svc).IsZero() {
				t.Fatalf("writes %+v, lock skipped until %v; want no write and no DB-only window", s, service.RedisDownUntil(u.svc))
			}
		})
	}
}

// lock+version checks the hold just before COMMIT: a lock lost in the
// critical section (taken over, or its fixed lease run out) is ErrLockLost
// and nothing is written. The `lock` strategy trusts its lock and writes.
func TestLockLostBeforeCommit(t *testing.T) {
	t.Parallel()
	for _, st := range lockSetups() {
		for _, how := range []string{"lost", "lease ran out"} {
			t.Run(st.name+"/"+how, func(t *testing.T) {
				t.Parallel()
				cfg := st.cfg
				var u *unit
				var fired atomic.Bool
				lose := func() {
					if !fired.CompareAndSwap(false, true) {
						return
					}
					if how == "lost" {
						u.locks.Holder(u.sku).Lose()
						return
					}
					time.Sleep(2 * cfg.LockLease)
				}
				cfg.CriticalSectionHook = func() { lose() }
				if how == "lease ran out" {
					cfg.LockLease = 20 * time.Millisecond
				}
				u = newUnit(t, cfg)
				u.setStock(t, u.sku, 10, 0)
				before := u.audit(t)
				o, _, err := u.svc.Place(context.Background(), u.req("k1", 1))
				after := u.audit(t)
				if st.cfg.Strategy == service.StrategyLock {
					if err != nil || after.Orders != 1 {
						t.Fatalf("lock strategy, lock %s before commit: %v, %d orders; want it written (it trusts the lock)", how, err, after.Orders)
					}
					return
				}
				if !errors.Is(err, service.ErrLockLost) {
					t.Fatalf("Place with the lock %s before commit = %+v, %v; want ErrLockLost", how, o, err)
				}
				if after.Orders != 0 || after.Sold != 0 || !after.Consistent || u.store.LedgerRows(u.sku) != 1 {
					t.Fatalf("audit after ErrLockLost = %+v (before %+v); want nothing written", after, before)
				}
				if _, err := u.store.OrderByKey(context.Background(), "b1", "k1"); !errors.Is(err, service.ErrOrderNotFound) {
					t.Fatalf("order of the key after ErrLockLost = %v; want none", err)
				}
				// The SKU is free again, and the key can be retried.
				if _, _, err := u.svc.Place(context.Background(), u.req("k1", 1)); err != nil {
					t.Fatalf("retry after ErrLockLost = %v; want placed", err)
				}
			})
		}
	}
}
