package service_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/seckill/stock/internal/service"
)

// The counter strategies beyond the decision table: what each does when the
// counter and MySQL disagree, and the reconcile that repairs the counter.

func counted(t *testing.T, st service.Strategy, stock, limit int64) *unit {
	t.Helper()
	u := newUnit(t, service.Config{Strategy: st})
	u.setStock(t, u.sku, stock, limit)
	return u
}

func (u *unit) counterLeft(t *testing.T) int64 {
	t.Helper()
	n, ok, err := u.counter.Available(context.Background(), u.sku)
	if err != nil || !ok {
		t.Fatalf("counter of %s: %d, %v, %v; want one", u.sku, n, ok, err)
	}
	return n
}

func (u *unit) order(t *testing.T, buyer, key string, q int) (service.Order, error) {
	t.Helper()
	o, _, err := u.svc.Place(context.Background(), service.PlaceRequest{Buyer: buyer, Key: key, SKU: u.sku, Quantity: q})
	return o, err
}

// A unit the counter let through but MySQL refused goes back to the
// counter under counter+conditional, and is lost to the sale under counter.
func TestCounterGivesBackWhatMySQLRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		st       service.Strategy
		leftover int64 // the counter after the refusal
	}{{service.StrategyCounterCond, 1}, {service.StrategyCounter, 0}} {
		t.Run(string(c.st), func(t *testing.T) {
			t.Parallel()
			u := counted(t, c.st, 1, 0)
			u.place(t, "b0", "elsewhere", u.sku, 1) // the last unit sold past the counter
			_, err := u.order(t, "b1", "k", 1)
			if !errors.Is(err, service.ErrSoldOut) {
				t.Fatalf("the order MySQL refuses = %v; want sold out", err)
			}
			if got := u.counterLeft(t); got != c.leftover {
				t.Fatalf("counter after MySQL's refusal = %d; want %d", got, c.leftover)
			}
		})
	}
}

// Under counter+conditional, units the counter took for an order MySQL
// refused for the buyer's unpaid units go back to the counter, and the
// answer is the refusal with its numbers.
func TestCounterGivesBackAnUnpaidRefusal(t *testing.T) {
	t.Parallel()
	u := counted(t, service.StrategyCounterCond, 10, 0)
	set := service.StockSetting{Available: 10, PaymentWindowSeconds: 60, MaxUnpaid: service.UnpaidSetting{Set: true, Cap: 2}}
	if _, err := u.store.SetStock(context.Background(), u.sku, set); err != nil {
		t.Fatal(err)
	}
	if _, err := u.order(t, "b1", "k1", 2); err != nil {
		t.Fatal(err)
	}
	_, err := u.order(t, "b1", "k2", 3)
	var ue *service.UnpaidError
	if !errors.As(err, &ue) || *ue != (service.UnpaidError{Cap: 2, Unpaid: 2, Requested: 3}) {
		t.Fatalf("an order of 3 with 2 unpaid of 2 = %v; want an *UnpaidError", err)
	}
	if got := u.counterLeft(t); got != 8 {
		t.Fatalf("counter after MySQL's unpaid refusal = %d; want 8 (the refused 3 given back)", got)
	}
}

// A counter that drifted low (it says sold out, MySQL has units) does not
// turn buyers away under counter+conditional: the refusal is checked
// against MySQL's row, which places the order. Under counter the buyers are
// refused while the units sit unsold.
func TestCounterDriftedLow(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		st     service.Strategy
		placed bool
	}{{service.StrategyCounterCond, true}, {service.StrategyCounter, false}} {
		t.Run(string(c.st), func(t *testing.T) {
			t.Parallel()
			u := counted(t, c.st, 3, 0)
			if _, err := u.counter.Repair(context.Background(), u.sku, 3, 0); err != nil { // drift: 3 units lost
				t.Fatal(err)
			}
			_, err := u.order(t, "b1", "k", 1)
			if (err == nil) != c.placed || !c.placed && !errors.Is(err, service.ErrSoldOut) {
				t.Fatalf("order with the counter at 0 and MySQL at 3 = %v; want placed %v", err, c.placed)
			}
			if a := u.audit(t); a.Available != 3-boolInt(c.placed) || !a.Consistent {
				t.Fatalf("audit = %+v", a)
			}
		})
	}
}

// While the counter cannot be trusted (missing, Redis down) counter+
// conditional places orders through MySQL alone, exactly; a missing counter
// is seeded from MySQL's row.
func TestCounterUntrusted(t *testing.T) {
	t.Parallel()
	u := counted(t, service.StrategyCounterCond, 2, 0)
	if err := u.counter.Drop(context.Background(), u.sku); err != nil { // a FLUSHALL
		t.Fatal(err)
	}
	if _, err := u.order(t, "b1", "k1", 1); err != nil {
		t.Fatalf("order with the counter missing: %v", err)
	}
	if got := u.counterLeft(t); got < 1 || got > 2 {
		t.Fatalf("counter seeded from MySQL = %d; want 1 or 2 (read before or after the order)", got)
	}
	u.counter.Fail(1, errors.New("test: redis down"))
	if _, err := u.order(t, "b2", "k2", 1); err != nil {
		t.Fatalf("order with Redis down: %v", err)
	}
	u.counter.Fail(1, errors.New("test: redis down"))
	if _, err := u.order(t, "b3", "k3", 1); !errors.Is(err, service.ErrSoldOut) {
		t.Fatalf("third order of 2 units with Redis down = %v; want sold out (MySQL's answer)", err)
	}
	if a := u.audit(t); a.Available != 0 || a.Oversold != 0 || !a.Consistent {
		t.Fatalf("audit = %+v", a)
	}
}

// An order whose MySQL outcome is unknown keeps its units taken from the
// counter (giving them back could oversell); the reconcile then sets the
// counter to MySQL's row once two rounds agree, in either direction, and
// never while the counter moves.
func TestCounterReconcile(t *testing.T) {
	t.Parallel()
	u := counted(t, service.StrategyCounterCond, 5, 0)
	ctx := context.Background()
	u.store.FailNext(1, fmt.Errorf("test: a lost reply: %w", service.ErrUnavailable))
	if _, err := u.order(t, "b1", "k1", 1); !errors.Is(err, service.ErrUnavailable) {
		t.Fatalf("order with the commit unknown = %v; want unavailable", err)
	}
	if got := u.counterLeft(t); got != 4 {
		t.Fatalf("counter after an unknown outcome = %d; want 4 (kept taken)", got)
	}
	if n := u.parts.Reconciler.Reconcile(ctx); n != 0 || u.counterLeft(t) != 4 {
		t.Fatalf("first round repaired %d SKUs, counter %d; want none yet (one reading)", n, u.counterLeft(t))
	}
	if n := u.parts.Reconciler.Reconcile(ctx); n != 1 || u.counterLeft(t) != 5 {
		t.Fatalf("second round repaired %d, counter %d; want 1 SKU, counter 5 (MySQL's row)", n, u.counterLeft(t))
	}
	if _, err := u.counter.Repair(ctx, u.sku, 5, 9); err != nil { // drift up: a failover that lost takes
		t.Fatal(err)
	}
	u.parts.Reconciler.Reconcile(ctx)
	if _, err := u.order(t, "b2", "k2", 1); err != nil { // the counter moves between the rounds
		t.Fatal(err)
	}
	if n := u.parts.Reconciler.Reconcile(ctx); n != 0 || u.counterLeft(t) != 8 {
		t.Fatalf("round after a take repaired %d, counter %d; want none, 8", n, u.counterLeft(t))
	}
	if n := u.parts.Reconciler.Reconcile(ctx); n != 1 || u.counterLeft(t) != 4 {
		t.Fatalf("quiet round repaired %d, counter %d; want 1 SKU, counter 4", n, u.counterLeft(t))
	}
	if err := u.counter.Drop(ctx, u.sku); err != nil {
		t.Fatal(err)
	}
	if n := u.parts.Reconciler.Reconcile(ctx); n != 1 || u.counterLeft(t) != 4 {
		t.Fatalf("round with the counter gone seeded %d, counter %d; want 1, 4", n, u.counterLeft(t))
	}
}

// A restock through the service seeds the counter again from the new row,
// and a cancelled order's units go back to it.
func TestCounterRestockAndReturn(t *testing.T) {
	t.Parallel()
	u := counted(t, service.StrategyCounterCond, 2, 0)
	ctx := context.Background()
	if _, err := u.parts.Inventory.SetStock(ctx, u.sku, service.StockSetting{Available: 7, PaymentWindowSeconds: 60}); err != nil {
		t.Fatal(err)
	}
	if got := u.counterLeft(t); got != 7 {
		t.Fatalf("counter after a restock to 7 = %d", got)
	}
	o, err := u.order(t, "b1", "k1", 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.parts.Lifecycle.Cancel(ctx, "b1", o.ID); err != nil {
		t.Fatal(err)
	}
	if got := u.counterLeft(t); got != 7 {
		t.Fatalf("counter after the cancel of 3 of 7 = %d; want 7", got)
	}
}

// A take that failed because the client left is not Redis down: the order
// is answered unavailable, and the next order still goes through the
// counter (Redis down would send the instance to MySQL alone for a while).
func TestCounterClientGoneIsNotRedisDown(t *testing.T) {
	t.Parallel()
	u := counted(t, service.StrategyCounterCond, 5, 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	u.counter.Fail(1, context.Canceled)
	if _, _, err := u.svc.Place(ctx, service.PlaceRequest{Buyer: "b1", Key: "k1", SKU: u.sku, Quantity: 1}); !errors.Is(err, service.ErrUnavailable) {
		t.Fatalf("order whose client left during the take = %v; want unavailable", err)
	}
	if _, err := u.order(t, "b2", "k2", 1); err != nil {
		t.Fatal(err)
	}
	if got := u.counterLeft(t); got != 4 {
		t.Fatalf("counter after the next order = %d; want 4 (taken from: Redis was never down)", got)
	}
}
