package service_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/stock/internal/metrics"
	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/service/servicetest"
)

// The service's unit tests run on servicetest's in-memory store and fake
// lock: no database, no Redis.

// unit is a Service over a MemStore and a fake Locker (and a MemCounter
// under the counter strategies).
type unit struct {
	svc     *service.Service // parts.Service
	parts   service.Parts
	store   *servicetest.MemStore
	locks   *servicetest.Locker
	counter *servicetest.MemCounter // nil but for the counter strategies
	reg     *prometheus.Registry
	cfg     service.Config
	sku     string
}

func newUnit(t *testing.T, cfg service.Config) *unit {
	t.Helper()
	if cfg.Strategy == "" {
		cfg.Strategy = service.StrategyLockVersion
	}
	if cfg.LockWait == 0 {
		cfg.LockWait = 5 * time.Second
	}
	store, locks := servicetest.NewMemStore(), servicetest.NewLocker()
	reg := prometheus.NewRegistry()
	var locker service.Locker
	if cfg.Strategy.Info().UsesLock {
		locker = locks
	}
	var counter *servicetest.MemCounter
	if cfg.Strategy.Info().Counted && cfg.Counter == nil {
		counter = servicetest.NewMemCounter()
		cfg.Counter = counter
	}
	parts := service.Build(cfg, store, locker, nil, metrics.New(reg))
	return &unit{svc: parts.Service, parts: parts, store: store, locks: locks, counter: counter,
		reg: reg, cfg: cfg, sku: "SKU-1"}
}

// setStock sets the stock in the store, and seeds the counter from it as a
// restock through the service would.
func (u *unit) setStock(t *testing.T, sku string, n, limit int64) {
	t.Helper()
	if _, err := u.store.SetStock(context.Background(), sku, service.StockSetting{Available: n, PerBuyerLimit: limit}); err != nil {
		t.Fatal(err)
	}
	if u.counter != nil {
		_ = u.counter.Drop(context.Background(), sku)
		if _, err := u.counter.Seed(context.Background(), sku, n, limit); err != nil {
			t.Fatal(err)
		}
	}
}

func (u *unit) req(key string, q int) service.PlaceRequest {
	return service.PlaceRequest{Buyer: "b1", Key: key, SKU: u.sku, Quantity: q}
}

// place places an order straight through the store, as another instance
// would.
func (u *unit) place(t *testing.T, buyer, key, sku string, q int) service.Order {
	t.Helper()
	r := service.PlaceRequest{Buyer: buyer, Key: key, SKU: sku, Quantity: q}
	o, err := u.store.Deduct(context.Background(), service.Deduction{Buyer: buyer, Key: key, RequestHash: r.Hash(), SKU: sku,
		Quantity: q, Write: service.WriteConditional})
	if err != nil {
		t.Fatalf("Deduct(%s/%s x%d) = %v", buyer, key, q, err)
	}
	return o
}

func (u *unit) audit(t *testing.T) service.Audit {
	t.Helper()
	a, err := u.store.Audit(context.Background(), u.sku)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// placeAsync places r in a goroutine.
func (u *unit) placeAsync(ctx context.Context, r service.PlaceRequest) <-chan placed {
	ch := make(chan placed, 1)
	go func() {
		o, rep, err := u.svc.Place(ctx, r)
		ch <- placed{o, rep, err}
	}()
	return ch
}

// waitFor polls cond for up to 5s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not %s after 5s", what)
		}
	}
}

// setup is a service configuration the decision table runs on.
type setup struct {
	name string
	cfg  service.Config
}

// setups is every strategy of the table, plus lock+version without request
// combining and without the sold-out fast path (which brings the pre-check
// back in front of the batch).
func setups() []setup {
	var out []setup
	for _, s := range service.StrategyTable() {
		out = append(out, setup{string(s.Name), service.Config{Strategy: s.Name, BatchMax: 64}})
	}
	return append(out,
		setup{"lock+version/batch-max-1", service.Config{Strategy: service.StrategyLockVersion, BatchMax: 1}},
		setup{"lock+version/no-fast-path", service.Config{Strategy: service.StrategyLockVersion, BatchMax: 64, SoldOutTTL: -1}})
}

// Place's answer to each situation of a key and its SKU, under every
// strategy: a new order, a replay (also when sold out or over the limit
// since), a reused key, sold out, unknown, invalid, the limit, and the races
// a concurrent writer of another instance brings (a duplicate insert, the
// last unit taken between the read and the write).
func TestPlaceDecisionTable(t *testing.T) {
	t.Parallel()
	type result struct {
		placed, replayed bool
		err              error
		oversold         bool // by a strategy that trusts no guard
	}
	created, replay := result{placed: true}, result{placed: true, replayed: true}
	for _, c := range []struct {
		name  string
		stock int64
		limit int64
		prep  func(t *testing.T, u *unit) (prior *service.Order) // the order a replay must return
		req   service.PlaceRequest                               // Buyer b1 and SKU-1 unless set
		raced bool                                               // prep's writer writes during Place
		want  func(service.StrategyInfo) result
	}{
		{name: "new key", stock: 5, req: service.PlaceRequest{Key: "k", Quantity: 2},
			want: func(service.StrategyInfo) result { return created }},
		{name: "replay", stock: 5, req: service.PlaceRequest{Key: "k", Quantity: 1},
			prep: func(t *testing.T, u *unit) *service.Order { o := u.place(t, "b1", "k", u.sku, 1); return &o },
			want: func(service.StrategyInfo) result { return replay }},
		{name: "replay of the order that took the last unit", stock: 1, req: service.PlaceRequest{Key: "k", Quantity: 1},
			prep: func(t *testing.T, u *unit) *service.Order { o := u.place(t, "b1", "k", u.sku, 1); return &o },
			want: func(service.StrategyInfo) result { return replay }},
		{name: "replay over the limit", stock: 5, limit: 1, req: service.PlaceRequest{Key: "k", Quantity: 1},
			prep: func(t *testing.T, u *unit) *service.Order { o := u.place(t, "b1", "k", u.sku, 1); return &o },
			want: func(service.StrategyInfo) result { return replay }},
		{name: "key reused with another quantity", stock: 5, req: service.PlaceRequest{Key: "k", Quantity: 2},
			prep: func(t *testing.T, u *unit) *service.Order { u.place(t, "b1", "k", u.sku, 1); return nil },
			want: func(service.StrategyInfo) result { return result{err: service.ErrKeyReused} }},
		{name: "key reused for another SKU", stock: 5, req: service.PlaceRequest{Key: "k", Quantity: 1},
			prep: func(t *testing.T, u *unit) *service.Order {
				u.setStock(t, "SKU-2", 5, 0)
				u.place(t, "b1", "k", "SKU-2", 1)
				return nil
			},
			want: func(service.StrategyInfo) result { return result{err: service.ErrKeyReused} }},
		{name: "key reused when sold out", stock: 1, req: service.PlaceRequest{Key: "k", Quantity: 2},
			prep: func(t *testing.T, u *unit) *service.Order { u.place(t, "b1", "k", u.sku, 1); return nil },
			want: func(service.StrategyInfo) result { return result{err: service.ErrKeyReused} }},
		{name: "another buyer's key", stock: 5, req: service.PlaceRequest{Key: "k", Quantity: 1},
			prep: func(t *testing.T, u *unit) *service.Order { u.place(t, "b2", "k", u.sku, 1); return nil },
			want: func(service.StrategyInfo) result { return created }},
		{name: "sold out", stock: 0, req: service.PlaceRequest{Key: "k", Quantity: 1},
			want: func(service.StrategyInfo) result { return result{err: service.ErrSoldOut} }},
		{name: "not enough left", stock: 1, req: service.PlaceRequest{Key: "k", Quantity: 2},
			want: func(service.StrategyInfo) result { return result{err: service.ErrSoldOut} }},
		{name: "unknown SKU", stock: 5, req: service.PlaceRequest{Key: "k", SKU: "SKU-404", Quantity: 1},
			want: func(service.StrategyInfo) result { return result{err: service.ErrUnknownSKU} }},
		{name: "invalid quantity", stock: 5, req: service.PlaceRequest{Key: "k", Quantity: 0},
			want: func(service.StrategyInfo) result { return result{err: service.ErrInvalid} }},
		{name: "invalid key", stock: 5, req: service.PlaceRequest{Key: "a key", Quantity: 1},
			want: func(service.StrategyInfo) result { return result{err: service.ErrInvalid} }},
		{name: "over the limit", stock: 5, limit: 2, req: service.PlaceRequest{Key: "k", Quantity: 2},
			prep: func(t *testing.T, u *unit) *service.Order { u.place(t, "b1", "k0", u.sku, 1); return nil },
			want: func(service.StrategyInfo) result { return result{err: service.ErrLimitExceeded} }},
		{name: "database down", stock: 5, req: service.PlaceRequest{Key: "k", Quantity: 1},
			prep: func(t *testing.T, u *unit) *service.Order {
				u.store.FailNext(1, fmt.Errorf("test: %w", service.ErrUnavailable))
				return nil
			},
			want: func(service.StrategyInfo) result { return result{err: service.ErrUnavailable} }},
		{name: "duplicate insert whose order rolled back", stock: 5, req: service.PlaceRequest{Key: "k", Quantity: 1},
			prep: func(t *testing.T, u *unit) *service.Order { u.store.FailNext(1, service.ErrDuplicateKey); return nil },
			want: func(service.StrategyInfo) result { return result{err: service.ErrBusy} }},
		{name: "another instance places the key first", stock: 5, req: service.PlaceRequest{Key: "k", Quantity: 1}, raced: true,
			prep: func(t *testing.T, u *unit) *service.Order {
				var o service.Order
				once(u, func() { o = u.place(t, "b1", "k", u.sku, 1) })
				return &o
			},
			want: func(service.StrategyInfo) result { return replay }},
		{name: "another instance places the key first with another body", stock: 5, req: service.PlaceRequest{Key: "k", Quantity: 1}, raced: true,
			prep: func(t *testing.T, u *unit) *service.Order {
				once(u, func() { u.place(t, "b1", "k", u.sku, 2) })
				return nil
			},
			want: func(service.StrategyInfo) result { return result{err: service.ErrKeyReused} }},
		{name: "another writer takes the last unit between read and write", stock: 1, req: service.PlaceRequest{Key: "k", Quantity: 1}, raced: true,
			prep: func(t *testing.T, u *unit) *service.Order {
				once(u, func() { u.place(t, "b2", "other", u.sku, 1) })
				return nil
			},
			// The strategies that trust no lock or their lock alone write
			// absolute values over the other's sale: oversold.
			want: func(s service.StrategyInfo) result {
				if s.Write == service.WritePlain {
					return result{placed: true, oversold: true}
				}
				return result{err: service.ErrSoldOut}
			}},
	} {
		for _, st := range setups() {
			t.Run(c.name+"/"+st.name, func(t *testing.T) {
				t.Parallel()
				u := newUnit(t, st.cfg)
				u.setStock(t, u.sku, c.stock, c.limit)
				var prior *service.Order
				if c.prep != nil {
					prior = c.prep(t, u)
				}
				before := u.audit(t)
				r := c.req
				r.Buyer = "b1"
				if r.SKU == "" {
					r.SKU = u.sku
				}
				o, replayed, err := u.svc.Place(context.Background(), r)
				want := c.want(st.cfg.Strategy.Info())
				if (err == nil) != want.placed || want.err != nil && !errors.Is(err, want.err) || replayed != want.replayed {
					t.Fatalf("Place(%+v) = %v, replayed %v; want %+v", r, err, replayed, want)
				}
				after := u.audit(t)
				written := after.Orders - before.Orders - boolInt(c.raced)
				if want.replayed {
					if prior != nil && (o.ID != prior.ID || o.Quantity != prior.Quantity) {
						t.Fatalf("replay = order %d x%d; want order %d x%d", o.ID, o.Quantity, prior.ID, prior.Quantity)
					}
				} else if want.placed {
					got, err := u.store.OrderByKey(context.Background(), "b1", r.Key)
					if o.ID == 0 || o.Key != r.Key || o.Quantity != r.Quantity || o.Buyer != "b1" || err != nil || got.ID != o.ID {
						t.Fatalf("Place(%+v) = %+v; stored %+v, %v; want the request's order, stored", r, o, got, err)
					}
				}
				if written != boolInt(want.placed && !want.replayed) {
					t.Fatalf("orders %d -> %d (%d by another writer); want %d new", before.Orders, after.Orders, boolInt(c.raced), boolInt(want.placed && !want.replayed))
				}
				if after.Consistent == want.oversold || want.oversold && after.Oversold != 1 {
					t.Fatalf("audit after the order = %+v; want oversold %v", after, want.oversold)
				}
				learnt := st.cfg.SoldOutTTL >= 0 // every sold-out answer from MySQL
				if errors.Is(err, service.ErrSoldOut) && service.SoldOutKnown(u.svc, u.sku) != learnt {
					t.Fatalf("sold-out fast path knows %s: %v; want %v (SoldOutTTL %v, %d available)", u.sku, !learnt, learnt, st.cfg.SoldOutTTL, after.Available)
				}
			})
		}
	}
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// once runs f the first time the store is about to write, as another
// instance would between this one's read and write.
func once(u *unit, f func()) {
	var done atomic.Bool
	u.store.AfterRead(func(string) {
		if done.CompareAndSwap(false, true) {
			f()
		}
	})
}

// A versioned write that conflicts is retried in a new transaction, up to
// VersionRetries times (the strategy table's default), then answered
// ErrBusy with nothing written.
func TestVersionConflictRetries(t *testing.T) {
	t.Parallel()
	for _, st := range []setup{
		{"version", service.Config{Strategy: service.StrategyVersion}},
		{"lock+version", service.Config{Strategy: service.StrategyLockVersion, BatchMax: 64}},
		{"lock+version/batch-max-1", service.Config{Strategy: service.StrategyLockVersion, BatchMax: 1}},
	} {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			retries := st.cfg.Strategy.Info().Retries
			writes := func(u *unit) int {
				s := u.store.Stats()
				return s.Deducts[service.WriteVersioned] + len(s.BatchSizes)
			}
			u := newUnit(t, st.cfg)
			u.setStock(t, u.sku, 5, 0)
			u.store.ConflictNext(retries)
			if _, _, err := u.svc.Place(context.Background(), u.req("k1", 1)); err != nil {
				t.Fatalf("Place after %d conflicts = %v; want placed (%d retries allowed)", retries, err, retries)
			}
			if n := writes(u); n != retries+1 {
				t.Fatalf("versioned writes for %d conflicts = %d; want %d", retries, n, retries+1)
			}
			if n := conflicts(t, u.reg); n != float64(retries) {
				t.Fatalf("stock_backstop_conflicts_total = %v; want %d", n, retries)
			}

			u = newUnit(t, st.cfg)
			u.setStock(t, u.sku, 5, 0)
			u.store.ConflictNext(retries + 1)
			_, _, err := u.svc.Place(context.Background(), u.req("k1", 1))
			if !errors.Is(err, service.ErrBusy) {
				t.Fatalf("Place after %d conflicts = %v; want ErrBusy", retries+1, err)
			}
			if n := writes(u); n != retries+1 {
				t.Fatalf("versioned writes before ErrBusy = %d; want %d (1 + %d retries)", n, retries+1, retries)
			}
			if a := u.audit(t); a.Orders != 0 || a.Sold != 0 || !a.Consistent {
				t.Fatalf("audit after ErrBusy = %+v; want nothing written", a)
			}
			if _, _, err := u.svc.Place(context.Background(), u.req("k1", 1)); err != nil {
				t.Fatalf("retry of the key after ErrBusy = %v; want placed", err)
			}
		})
	}
}

// Concurrent orders of one SKU, behind a start barrier, sell exactly the
// stock under every safe strategy.
func TestSafeStrategiesSellExactly(t *testing.T) {
	t.Parallel()
	const buyers, stock = 60, 25
	for _, st := range setups() {
		if !st.cfg.Strategy.Info().Safe {
			continue
		}
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			u := newUnit(t, st.cfg)
			u.setStock(t, u.sku, stock, 0)
			var wg sync.WaitGroup
			var mu sync.Mutex
			results := map[string]int{}
			start := make(chan struct{})
			for i := range buyers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					_, _, err := u.svc.Place(context.Background(), service.PlaceRequest{Buyer: fmt.Sprintf("b%d", i), Key: "k", SKU: u.sku, Quantity: 1})
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						results["placed"]++
					case errors.Is(err, service.ErrSoldOut):
						results["sold out"]++
					default:
						results[err.Error()]++
					}
				}()
			}
			close(start)
			wg.Wait()
			if results["placed"] != stock || results["sold out"] != buyers-stock {
				t.Fatalf("%d buyers of %d units under %s: %v; want %d placed, %d sold out", buyers, stock, st.name, results, stock, buyers-stock)
			}
			if a := u.audit(t); !a.Consistent || a.Orders != stock {
				t.Fatalf("audit = %+v; want consistent with %d orders", a, stock)
			}
		})
	}
}
