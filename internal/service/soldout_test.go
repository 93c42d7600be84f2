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
	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/stockevents"
	"github.com/seckill/stock/internal/testserver"
)

// countingStore counts the store calls an order makes.
type countingStore struct {
	service.Store
	calls, prechecks atomic.Int64
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

func (c *countingStore) SoldOutKeys(ctx context.Context, sku string, limit int) ([]service.BuyerKey, bool, error) {
	c.calls.Add(1)
	return c.Store.SoldOutKeys(ctx, sku, limit)
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

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// instance is another Service over e's database and lock, with a counting
// store and a settable sold-out clock.
func (e *env) instance(cfg service.Config) (*service.Service, *countingStore, *clock) {
	if cfg.Strategy == "" {
		cfg.Strategy = service.StrategyLockVersion
	}
	cfg.LockWait = 5 * time.Second
	if cfg.BatchMax == 0 {
		cfg.BatchMax = 64
	}
	cs := &countingStore{Store: e.store}
	s := service.New(cfg, cs, e.locker, nil, e.metrics)
	c := &clock{t: time.Now()}
	service.SetSoldOutClock(s, c.now)
	return s, cs, c
}

// place orders one unit of e's SKU at s; buyers are buyers of this SKU only.
func (e *env) place(s *service.Service, buyer, key string) (service.Order, bool, error) {
	return s.Place(context.Background(), service.PlaceRequest{Buyer: buyer + "@" + e.sku, Key: key, SKU: e.sku, Quantity: 1})
}

// After a sell-out, orders with new keys are answered sold-out without a
// store call; a replay still gets its order; a restock is seen at once by
// the instance that made it and, by the others, once the TTL has passed.
func TestSoldOutIsAnsweredFromMemory(t *testing.T) {
	t.Parallel()
	e := newEnv(t, service.Config{})
	for _, strategy := range []service.Strategy{service.StrategyLockVersion, service.StrategyConditional} {
		t.Run(string(strategy), func(t *testing.T) {
			e.sku = "SKU-" + uuid.NewString()[:8]
			e.setStock(t, 3)
			s, cs, clk := e.instance(service.Config{Strategy: strategy, SoldOutTTL: time.Second})
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
			for i := range 50 {
				if _, _, err := e.place(s, fmt.Sprintf("late-%d", i), "k0"); !errors.Is(err, service.ErrSoldOut) {
					t.Fatalf("late order %d = %v; want ErrSoldOut", i, err)
				}
			}
			if n := cs.calls.Load(); n != 0 {
				t.Fatalf("50 sold-out orders made %d store calls; want 0", n)
			}

			// A replay of a placed key is a replay, not a 409.
			o, replayed, err := e.place(s, "b1", "k1")
			if err != nil || !replayed || o.ID != placed["k1"] {
				t.Fatalf("replay after the sell-out = %+v, %v, %v; want the replay of order %d", o, replayed, err, placed["k1"])
			}

			// A restock through another instance: stale here until the TTL.
			if _, err := e.svc.SetStock(context.Background(), e.sku, 2, 0); err != nil {
				t.Fatal(err)
			}
			if _, _, err := e.place(s, "b3", "after-restock"); !errors.Is(err, service.ErrSoldOut) {
				t.Fatalf("order within the TTL after a restock elsewhere = %v; want the stale ErrSoldOut the TTL allows", err)
			}
			clk.add(time.Second)
			if _, _, err := e.place(s, "b3", "after-restock"); err != nil {
				t.Fatalf("order once the TTL has passed after a restock = %v; want placed", err)
			}

			// Sold out again, then a restock through this instance: seen at once.
			if _, _, err := e.place(s, "b4", "last"); err != nil {
				t.Fatal(err)
			}
			if _, _, err := e.place(s, "b5", "late-again"); !errors.Is(err, service.ErrSoldOut) || !service.SoldOutKnown(s, e.sku) {
				t.Fatalf("order after the second sell-out = %v, known %v; want ErrSoldOut from a loaded entry", err, service.SoldOutKnown(s, e.sku))
			}
			if _, err := s.SetStock(context.Background(), e.sku, 1, 0); err != nil {
				t.Fatal(err)
			}
			if _, _, err := e.place(s, "b5", "late-again"); err != nil {
				t.Fatalf("order right after a restock through the same instance = %v; want placed", err)
			}
		})
	}
}

// With the real clock, a restock elsewhere is placeable once SoldOutTTL has
// passed, however the entry was loaded.
func TestSoldOutTTLBoundsAStaleAnswer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, service.Config{})
	e.setStock(t, 0)
	const ttl = 200 * time.Millisecond
	s := service.New(service.Config{Strategy: service.StrategyLockVersion, LockWait: 5 * time.Second, SoldOutTTL: ttl}, e.store, e.locker, nil, e.metrics)
	if _, _, err := e.place(s, "b1", "k1"); !errors.Is(err, service.ErrSoldOut) || !service.SoldOutKnown(s, e.sku) {
		t.Fatalf("order of a sold-out SKU = %v, known %v; want ErrSoldOut and the SKU held", err, service.SoldOutKnown(s, e.sku))
	}
	e.setStock(t, 1) // behind every instance's back, straight in MySQL
	time.Sleep(ttl)
	if _, _, err := e.place(s, "b1", "k1"); err != nil {
		t.Fatalf("order %v after a restock = %v; want placed", ttl, err)
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

// A restock published over Redis reaches the other instances: the stale
// "sold out" ends with the message, not with the TTL, and a replay of an
// order placed elsewhere after the restock is a replay.
func TestRestockEventReachesOtherInstances(t *testing.T) {
	t.Parallel()
	e := newEnv(t, service.Config{})
	rdb := redis.NewClient(&redis.Options{Addr: testserver.SharedRedis})
	t.Cleanup(func() { _ = rdb.Close() })
	events := stockevents.New(rdb, "test-"+uuid.NewString()[:8]+":")

	a, _, _ := e.instance(service.Config{Events: events, SoldOutTTL: time.Hour})
	b, _, _ := e.instance(service.Config{Events: events, SoldOutTTL: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	subscribed := make(chan struct{})
	var once sync.Once
	wg.Go(func() {
		events.Listen(ctx, func(sku string) {
			if sku == "" {
				once.Do(func() { close(subscribed) })
			}
			b.StockChanged(sku)
		})
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	<-subscribed

	e.setStock(t, 0)
	if _, _, err := e.place(b, "b1", "k0"); !errors.Is(err, service.ErrSoldOut) || !service.SoldOutKnown(b, e.sku) {
		t.Fatalf("order of a sold-out SKU at b = %v, known %v; want ErrSoldOut and the SKU held", err, service.SoldOutKnown(b, e.sku))
	}
	if _, err := a.SetStock(context.Background(), e.sku, 1, 0); err != nil {
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
}

// Combined lock+version orders skip the pre-check read: the batch reads the
// stock and the keys for all its orders. A replay, a sold-out answer and an
// over-the-limit replay still come out right. With BatchMax 1 every order
// reads first.
func TestBatchPathSkipsThePrecheck(t *testing.T) {
	t.Parallel()
	e := newEnv(t, service.Config{})
	ctx := context.Background()
	if _, err := e.store.SetStock(ctx, e.sku, 3, 1); err != nil { // a per-buyer limit of 1
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
	if _, _, err := e.place(s, "b4", "k1"); !errors.Is(err, service.ErrSoldOut) {
		t.Fatalf("order after the sell-out = %v; want ErrSoldOut", err)
	}
	if o, replayed, err := e.place(s, "b1", "k1"); err != nil || !replayed || o.ID != first.ID {
		t.Fatalf("replay after the sell-out = %+v, %v, %v; want the replay of order %d", o, replayed, err, first.ID)
	}
	if n := cs.prechecks.Load(); n != 0 {
		t.Fatalf("%d pre-check reads on the batch path; want 0", n)
	}

	alone, cs1, _ := e.instance(service.Config{BatchMax: 1})
	if _, _, err := e.place(alone, "b5", "k1"); !errors.Is(err, service.ErrSoldOut) {
		t.Fatalf("order after the sell-out, BatchMax 1 = %v; want ErrSoldOut", err)
	}
	if n := cs1.prechecks.Load(); n != 1 {
		t.Fatalf("BatchMax 1: %d pre-check reads; want 1", n)
	}
}
