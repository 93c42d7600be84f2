package service_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill/stock/internal/service"
)

// A refusal stays final across instances. Attempt 1 of key K waits in
// instance a's queue for the SKU lock (held elsewhere). The SKU sells out;
// the client gives up and retries K at instance b, which answers 409 from
// MySQL. Then the SKU is restocked, and a's batch takes the lock: it must
// not place K (it answers "retry": ErrBusy), so the 409 is never
// contradicted by an order of K. The restock is made straight in MySQL, or
// through a third instance whose SetStock waits for the lock beside a's
// batch (in either order).
func TestRefusalStaysFinalAcrossInstances(t *testing.T) {
	t.Parallel()
	for _, via := range []string{"mysql", "instance"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, service.Config{})
			ctx := context.Background()
			cfg := service.Config{Strategy: service.StrategyLockVersion, LockWait: time.Minute, BatchMax: 64}
			a := service.New(cfg, e.store, e.locker, nil, e.metrics)
			cfg.BatchMax = 1 // b pre-checks every order: its 409 comes from MySQL
			b := service.New(cfg, e.store, e.locker, nil, e.metrics)
			c := service.Build(cfg, e.store, e.locker, nil, e.metrics).Inventory
			e.setStock(t, 1)
			h := e.holdSKU(t)

			first := make(chan placed, 1)
			go func() {
				o, r, err := e.place(a, "b1", "K")
				first <- placed{o, r, err}
			}()
			for deadline := time.Now().Add(time.Minute); service.Admitted(a, e.sku) == 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("attempt 1 did not reach a's queue within a minute")
				}
			}
			if _, err := e.store.SetStock(ctx, e.sku, service.StockSetting{Available: 0}); err != nil { // sold out meanwhile
				t.Fatal(err)
			}
			if _, _, err := e.place(b, "b1", "K"); !errors.Is(err, service.ErrSoldOut) {
				t.Fatalf("retry of K at b = %v; want ErrSoldOut (a final 409)", err)
			}

			restocked := make(chan error, 1)
			if via == "mysql" {
				_, err := e.store.SetStock(ctx, e.sku, service.StockSetting{Available: 5})
				restocked <- err
			} else {
				go func() { _, err := c.SetStock(ctx, e.sku, service.StockSetting{Available: 5}); restocked <- err }()
			}
			if err := h.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			got := <-first
			if err := <-restocked; err != nil {
				t.Fatal(err)
			}
			if got.err == nil {
				t.Fatalf("attempt 1 of K = order %d, after b answered K with 409; want it refused", got.o.ID)
			}
			if !errors.Is(got.err, service.ErrBusy) && !errors.Is(got.err, service.ErrSoldOut) {
				t.Fatalf("attempt 1 of K = %v; want ErrBusy (restocked since it arrived: retry) or ErrSoldOut (its batch ran before the restock)", got.err)
			}
			if o, err := e.store.OrderByKey(ctx, "b1@"+e.sku, "K"); !errors.Is(err, service.ErrOrderNotFound) {
				t.Fatalf("K has order %+v (%v) after b's final 409; want none", o, err)
			}
			// A new request with K after the refusal is a new attempt: b,
			// which has not heard of the restock, tells it to retry, and the
			// retry is placed.
			if _, _, err := e.place(b, "b1", "K"); err != nil && !errors.Is(err, service.ErrBusy) {
				t.Fatalf("a new request with K after the restock = %v; want placed, or ErrBusy", err)
			} else if err != nil {
				if _, _, err := e.place(b, "b1", "K"); err != nil {
					t.Fatalf("its retry = %v; want placed", err)
				}
			}
		})
	}
}

// A limit refusal stays final when a return gives the allowance back. The
// buyer holds reservation K1 of a SKU with plenty of units and a limit of
// one. Attempt 1 of K2 waits in instance a's queue for the SKU lock; the
// client's retry of K2 at instance b (the DB-only path) is refused for the
// limit. Then K1 is cancelled, and a's batch takes the lock: it must not
// place K2 (ErrBusy: retry), so the 409 is never contradicted.
func TestLimitRefusalStaysFinalAfterAReturn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, service.Config{})
	ctx := context.Background()
	a := service.New(service.Config{Strategy: service.StrategyLockVersion, LockWait: time.Minute, BatchMax: 64}, e.store, e.locker, nil, e.metrics)
	bParts := service.Build(service.Config{Strategy: service.StrategyConditional}, e.store, e.locker, nil, e.metrics)
	b := bParts.Service
	if _, err := e.store.SetStock(ctx, e.sku, service.StockSetting{Available: 1000, PerBuyerLimit: 1, PaymentWindowSeconds: 60}); err != nil {
		t.Fatal(err)
	}
	k1, _, err := e.place(b, "b1", "K1")
	if err != nil || k1.Status != service.StatusReserved {
		t.Fatalf("K1 = %+v, %v; want reserved", k1, err)
	}
	h := e.holdSKU(t)
	first := make(chan placed, 1)
	go func() {
		o, r, err := e.place(a, "b1", "K2")
		first <- placed{o, r, err}
	}()
	for deadline := time.Now().Add(time.Minute); service.Admitted(a, e.sku) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("attempt 1 of K2 did not reach a's queue within a minute")
		}
	}
	if _, _, err := e.place(b, "b1", "K2"); !errors.Is(err, service.ErrLimitExceeded) {
		t.Fatalf("retry of K2 at b = %v; want ErrLimitExceeded (a final 409)", err)
	}
	if _, err := bParts.Lifecycle.Cancel(ctx, "b1@"+e.sku, k1.ID); err != nil {
		t.Fatalf("cancel K1 = %v", err)
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if got := <-first; !errors.Is(got.err, service.ErrBusy) {
		t.Fatalf("attempt 1 of K2 after b's 409 and K1's cancel = %+v, %v; want ErrBusy (retry), not an order", got.o, got.err)
	}
	if o, err := e.store.OrderByKey(ctx, "b1@"+e.sku, "K2"); !errors.Is(err, service.ErrOrderNotFound) {
		t.Fatalf("K2 has order %+v (%v) after b's final 409; want none", o, err)
	}
}
