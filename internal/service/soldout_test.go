package service_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/seckill/stock/internal/service"
)

// countingStore counts the store calls an order makes.
type countingStore struct {
	service.Store
	calls, prechecks atomic.Int64
	beforeRead       atomic.Pointer[func(keys []service.BuyerKey)] // runs before each PrecheckKeys
}

func (c *countingStore) OrderByKey(ctx context.Context, buyer, key string) (service.Order, error) {
	c.calls.Add(1)
	return c.Store.OrderByKey(ctx, buyer, key)
}

func (c *countingStore) Stock(ctx context.Context, sku string) (service.Stock, error) {
	c.calls.Add(1)
	return c.Store.Stock(ctx, sku)
}

func (c *countingStore) Precheck(ctx context.Context, sku, buyer, key string) (service.Stock, *service.Order, error) {
	c.calls.Add(1)
	c.prechecks.Add(1)
	return c.Store.Precheck(ctx, sku, buyer, key)
}

func (c *countingStore) PrecheckKeys(ctx context.Context, sku string, keys []service.BuyerKey) (service.Stock, []*service.Order, error) {
	c.calls.Add(1)
	c.prechecks.Add(1)
	if f := c.beforeRead.Load(); f != nil {
		(*f)(keys)
	}
	return c.Store.PrecheckKeys(ctx, sku, keys)
}

func (c *countingStore) Deduct(ctx context.Context, d service.Deduction) (service.Order, error) {
	c.calls.Add(1)
	return c.Store.Deduct(ctx, d)
}

func (c *countingStore) DeductBatch(ctx context.Context, b service.Batch) ([]service.Order, []error, error) {
	c.calls.Add(1)
	return c.Store.DeductBatch(ctx, b)
}

// clock is a settable clock for the sold-out fast path.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

// instance is another Service over e's database and lock, with a counting
// store and a settable sold-out clock.
func (e *env) instance(cfg service.Config) (*service.Service, *countingStore, *clock) {
	p, cs, c := e.build(cfg)
	return p.Service, cs, c
}

// build is instance with all of the instance's parts.
func (e *env) build(cfg service.Config) (service.Parts, *countingStore, *clock) {
	if cfg.Strategy == "" {
		cfg.Strategy = service.StrategyLockVersion
	}
	cfg.LockWait = 5 * time.Second
	if cfg.BatchMax == 0 {
		cfg.BatchMax = 64
	}
	cs := &countingStore{Store: e.store}
	p := service.Build(cfg, cs, e.locker, nil, e.metrics)
	c := &clock{t: time.Now()}
	service.SetSoldOutClock(p.Service, c.now)
	return p, cs, c
}

// place orders one unit of e's SKU at s; buyers are buyers of this SKU only.
func (e *env) place(s *service.Service, buyer, key string) (service.Order, bool, error) {
	return s.Place(context.Background(), service.PlaceRequest{Buyer: buyer + "@" + e.sku, Key: key, SKU: e.sku, Quantity: 1})
}

// After a sell-out, a SKU's orders skip the queue and the lock: each is
// answered from one pre-check read and nothing else. The answers are
// MySQL's at that moment: a replay gets its order, a key that placed an
// order of another SKU is refused as reused (not told "sold out"), and a
// restock behind this instance's back is seen by the very next order.
func TestSoldOutSkipsTheQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t, service.Config{})
	for _, strategy := range []service.Strategy{service.StrategyLockVersion, service.StrategyConditional} {
		t.Run(string(strategy), func(t *testing.T) {
			e.sku = "SKU-" + uuid.NewString()[:8]
			e.setStock(t, 3)
			s, cs, _ := e.instance(service.Config{Strategy: strategy, SoldOutTTL: time.Hour})
			placed := map[string]int64{}
			for i := range 3 {
				key := fmt.Sprintf("k%d", i)
				o, _, err := e.place(s, "b1", key)
				if err != nil {
					t.Fatalf("order %s with stock left = %v", key, err)
				}
				placed[key] = o.ID
			}
			if _, _, err := e.place(s, "b2", "first-late"); !errors.Is(err, service.ErrSoldOut) {
				t.Fatalf("order after the sell-out = %v; want ErrSoldOut", err)
			}
			if !service.SoldOutKnown(s, e.sku) {
				t.Fatal("the sold-out fast path does not hold the SKU after MySQL said it is sold out")
			}

			cs.calls.Store(0)
			cs.prechecks.Store(0)
			for i := range 50 {
				if _, _, err := e.place(s, fmt.Sprintf("late-%d", i), "k0"); !errors.Is(err, service.ErrSoldOut) {
					t.Fatalf("late order %d = %v; want ErrSoldOut", i, err)
				}
			}
			if c, p := cs.calls.Load(), cs.prechecks.Load(); c != 50 || p != 50 {
				t.Fatalf("50 sold-out orders made %d store calls, %d pre-checks; want one pre-check each and nothing else", c, p)
			}

			o, replayed, err := e.place(s, "b1", "k1")
			if err != nil || !replayed || o.ID != placed["k1"] {
				t.Fatalf("replay after the sell-out = %+v, %v, %v; want the replay of order %d", o, replayed, err, placed["k1"])
			}

			// A restock straight in MySQL, which no instance heard of: the
			// next order here finds the stock, but came before this instance
			// knew of the restock, so it is told to retry (restocked.go);
			// its retry is placed.
			e.setStock(t, 1)
			if _, _, err := e.place(s, "b3", "after-restock"); !errors.Is(err, service.ErrBusy) {
				t.Fatalf("order after a restock this instance did not hear of = %v; want ErrBusy (retry)", err)
			}
			if _, _, err := e.place(s, "b3", "after-restock"); err != nil {
				t.Fatalf("its retry = %v; want placed", err)
			}
			if service.SoldOutKnown(s, e.sku) {
				t.Fatal("the fast path still holds the SKU after an order found stock")
			}
		})
	}
}

// The fast path's reads are shared: the orders of a sold-out SKU that
// arrive while its read is in flight all go into the next one. The first
// read is held until 100 more orders wait; they then take one read, and
// each is answered from it.
func TestSoldOutReadsAreCombined(t *testing.T) {
	t.Parallel()
	e := newEnv(t, service.Config{})
	e.setStock(t, 0)
	s, cs, _ := e.instance(service.Config{SoldOutTTL: time.Hour})
	if _, _, err := e.place(s, "b0", "first"); !errors.Is(err, service.ErrSoldOut) || !service.SoldOutKnown(s, e.sku) {
		t.Fatalf("first order = %v; want ErrSoldOut and the SKU held", err)
	}
	release := make(chan struct{})
	var sizes []int
	var mu sync.Mutex
	hold := func(keys []service.BuyerKey) {
		mu.Lock()
		sizes = append(sizes, len(keys))
		first := len(sizes) == 1
		mu.Unlock()
		if first {
			<-release
		}
	}
	cs.beforeRead.Store(&hold)
	const n = 100
	errs := make(chan error, n+1)
	go func() { _, _, err := e.place(s, "b0", "held"); errs <- err }()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		started := len(sizes) == 1
		mu.Unlock()
		if started {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first read did not start within a minute")
		}
	}
	for i := range n {
		go func() { _, _, err := e.place(s, fmt.Sprint("b", i+1), "k"); errs <- err }()
	}
	for deadline := time.Now().Add(time.Minute); service.SoldOutWaiting(s, e.sku) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d orders waiting for the next read after a minute", service.SoldOutWaiting(s, e.sku), n)
		}
	}
	close(release)
	for range n + 1 {
		if err := <-errs; !errors.Is(err, service.ErrSoldOut) {
			t.Fatalf("order of the sold-out SKU = %v; want ErrSoldOut", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 2 || sizes[0] != 1 || sizes[1] != n {
		t.Fatalf("reads of %v keys; want one of 1 (held), then one of %d", sizes, n)
	}
}

// A key that placed an order of SKU X, sent for a sold-out SKU Y that the
// fast path holds, is a reused key (422), as the store would say, not a
// sold-out (409).
func TestSoldOutKeyReuseIsRefusedAsReuse(t *testing.T) {
	t.Parallel()
	e := newEnv(t, service.Config{})
	ctx := context.Background()
	e.setStock(t, 1)
	s, _, _ := e.instance(service.Config{SoldOutTTL: time.Hour})
	if _, _, err := e.place(s, "b1", "K"); err != nil {
		t.Fatal(err)
	}
	y := e.sku + "-Y"
	if _, err := e.store.SetStock(ctx, y, service.StockSetting{Available: 0}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Place(ctx, service.PlaceRequest{Buyer: "b9", Key: "y", SKU: y, Quantity: 1}); !errors.Is(err, service.ErrSoldOut) || !service.SoldOutKnown(s, y) {
		t.Fatalf("order of the sold-out %s = %v, known %v; want ErrSoldOut and the SKU held", y, err, service.SoldOutKnown(s, y))
	}
	reuse := service.PlaceRequest{Buyer: "b1@" + e.sku, Key: "K", SKU: y, Quantity: 1}
	if _, _, err := s.Place(ctx, reuse); !errors.Is(err, service.ErrKeyReused) {
		t.Fatalf("a key with an order of %s sent for the sold-out %s = %v; want ErrKeyReused", e.sku, y, err)
	}
}

// A retry told "sold out" by an instance that missed a restock, though its
// key had been placed at another after the restock: instance b holds the
// SKU as sold out; the SKU is restocked through a, which b does not hear
// of, and a places key K. K's retry at b gets its order (a replay), not 409.
func TestSoldOutReplayAfterAnUnheardRestock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, service.Config{})
	e.setStock(t, 0)
	ap, _, _ := e.build(service.Config{SoldOutTTL: time.Hour})
	a := ap.Service
	b, _, _ := e.instance(service.Config{SoldOutTTL: time.Hour})
	if _, _, err := e.place(b, "b1", "first"); !errors.Is(err, service.ErrSoldOut) || !service.SoldOutKnown(b, e.sku) {
		t.Fatalf("order of a sold-out SKU at b = %v, known %v; want ErrSoldOut and the SKU held", err, service.SoldOutKnown(b, e.sku))
	}
	if _, err := ap.Inventory.SetStock(context.Background(), e.sku, service.StockSetting{Available: 1}); err != nil {
		t.Fatal(err)
	}
	o, _, err := e.place(a, "b1", "K")
	if err != nil {
		t.Fatalf("order at a after its restock = %v", err)
	}
	if !service.SoldOutKnown(b, e.sku) {
		t.Fatal("b no longer holds the SKU: the test needs b not to have heard of the restock")
	}
	got, replayed, err := e.place(b, "b1", "K")
	if err != nil || !replayed || got.ID != o.ID {
		t.Fatalf("retry at b of the order placed at a = %+v, %v, %v; want the replay of order %d", got, replayed, err, o.ID)
	}
}

// With SoldOutTTL < 0 there is no fast path: every sold-out order asks MySQL.
func TestSoldOutFastPathOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, service.Config{})
	e.setStock(t, 0)
	s, cs, _ := e.instance(service.Config{SoldOutTTL: -1})
	for i := range 5 {
		if _, _, err := e.place(s, "b1", fmt.Sprintf("k%d", i)); !errors.Is(err, service.ErrSoldOut) {
			t.Fatal(err)
		}
	}
	if n := cs.calls.Load(); n != 5 {
		t.Fatalf("5 sold-out orders with the fast path off made %d store calls; want 5", n)
	}
}

// A restock published over Redis reaches the other instances: their
// sold-out entry ends with the message, not with the TTL, and a replay of
// an order placed elsewhere after the restock is a replay.
func TestRestockEventReachesOtherInstances(t *testing.T) {
	t.Parallel()
	e := newEnv(t, service.Config{})
	events := sharedEvents(t)
	ap, _, _ := e.build(service.Config{Events: events, SoldOutTTL: time.Hour})
	a := ap.Service
	b, _, _ := e.instance(service.Config{Events: events, SoldOutTTL: time.Hour})
	listenUntilCleanup(t, events, b)

	e.setStock(t, 0)
	if _, _, err := e.place(b, "b1", "k0"); !errors.Is(err, service.ErrSoldOut) || !service.SoldOutKnown(b, e.sku) {
		t.Fatalf("order of a sold-out SKU at b = %v, known %v; want ErrSoldOut and the SKU held", err, service.SoldOutKnown(b, e.sku))
	}
	if _, err := ap.Inventory.SetStock(context.Background(), e.sku, service.StockSetting{Available: 1}); err != nil {
		t.Fatal(err)
	}
	o, _, err := e.place(a, "b1", "k1")
	if err != nil {
		t.Fatalf("order at a after its restock = %v", err)
	}
	for deadline := time.Now().Add(5 * time.Second); service.SoldOutKnown(b, e.sku); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("b still holds the SKU sold out 5s after a restock was published (TTL 1h)")
		}
	}
	got, replayed, err := e.place(b, "b1", "k1")
	if err != nil || !replayed || got.ID != o.ID {
		t.Fatalf("replay at b of the order placed at a = %+v, %v, %v; want the replay of order %d", got, replayed, err, o.ID)
	}
	// The message carried the restock sequence: a new order at b is placed
	// at once, not told to retry as one admitted before the restock.
	if _, err := ap.Inventory.SetStock(context.Background(), e.sku, service.StockSetting{Available: 3}); err != nil { // 0 left: room again
		t.Fatal(err)
	}
	want := service.KnownRestockSeq(a, e.sku)
	for deadline := time.Now().Add(5 * time.Second); service.KnownRestockSeq(b, e.sku) < want; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("b knows restock sequence %d 5s after a's restock to %d was published", service.KnownRestockSeq(b, e.sku), want)
		}
	}
	if _, _, err := e.place(b, "b2", "k2"); err != nil {
		t.Fatalf("order at b after the published restock = %v; want placed", err)
	}
}

// Combined lock+version orders skip the pre-check read: the batch reads the
// stock and the keys for all its orders. A replay, a sold-out answer and an
// over-the-limit replay still come out right. With BatchMax 1 every order
// reads first.
func TestBatchPathSkipsThePrecheck(t *testing.T) {
	t.Parallel()
	e := newEnv(t, service.Config{})
	ctx := context.Background()
	if _, err := e.store.SetStock(ctx, e.sku, service.StockSetting{Available: 3, PerBuyerLimit: 1}); err != nil { // a per-buyer limit of 1
		t.Fatal(err)
	}
	s, cs, _ := e.instance(service.Config{})
	first, _, err := e.place(s, "b1", "k1")
	if err != nil {
		t.Fatal(err)
	}
	if n := cs.prechecks.Load(); n != 0 {
		t.Fatalf("a combined lock+version order made %d pre-check reads; want 0", n)
	}
	// The replay, with the buyer at its limit: the same order, 200.
	o, replayed, err := e.place(s, "b1", "k1")
	if err != nil || !replayed || o.ID != first.ID {
		t.Fatalf("replay at the limit = %+v, %v, %v; want the replay of order %d", o, replayed, err, first.ID)
	}
	if _, _, err := e.place(s, "b1", "k2"); !errors.Is(err, service.ErrLimitExceeded) {
		t.Fatalf("a second key over the limit = %v; want ErrLimitExceeded", err)
	}
	for _, b := range []string{"b2", "b3"} {
		if _, _, err := e.place(s, b, "k1"); err != nil {
			t.Fatal(err)
		}
	}
	if n := cs.prechecks.Load(); n != 0 {
		t.Fatalf("%d pre-check reads on the batch path; want 0", n)
	}
	if _, _, err := e.place(s, "b4", "k1"); !errors.Is(err, service.ErrSoldOut) {
		t.Fatalf("order after the sell-out = %v; want ErrSoldOut", err)
	}
	// Sold out: the fast path pre-checks the SKU's orders from now on.
	if o, replayed, err := e.place(s, "b1", "k1"); err != nil || !replayed || o.ID != first.ID {
		t.Fatalf("replay after the sell-out = %+v, %v, %v; want the replay of order %d", o, replayed, err, first.ID)
	}
	if n := cs.prechecks.Load(); n != 2 {
		t.Fatalf("%d pre-check reads after the sell-out; want 2 (the refusal's key read on the fast path, and the replay's)", n)
	}

	alone, cs1, _ := e.instance(service.Config{BatchMax: 1})
	if _, _, err := e.place(alone, "b5", "k1"); !errors.Is(err, service.ErrSoldOut) {
		t.Fatalf("order after the sell-out, BatchMax 1 = %v; want ErrSoldOut", err)
	}
	if n := cs1.prechecks.Load(); n != 1 {
		t.Fatalf("BatchMax 1: %d pre-check reads; want 1", n)
	}
}
