package service_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/seckill/stock/internal/lock"
	"github.com/seckill/stock/internal/metrics"
	"github.com/seckill/stock/internal/repo"
	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/skulock"
	"github.com/seckill/stock/internal/skulock/redisson"
	"github.com/seckill/stock/internal/testserver"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("github.com/go-sql-driver/mysql.(*mysqlConn).startWatcher.func1"),
	)
}

// env is a Service over a database of its own and the shared Redis, plus a
// second lock client that plays another instance holding the SKU lock.
type env struct {
	svc     *service.Service // parts.Service
	parts   service.Parts
	store   *repo.Store
	locker  service.Locker // svc's
	db      *sql.DB
	other   *lock.Client
	metrics *metrics.Metrics
	reg     *prometheus.Registry
	sku     string
}

func newEnv(t *testing.T, cfg service.Config) *env {
	t.Helper()
	ctx := context.Background()
	dsn := testserver.Database(t)
	store, err := repo.Open(ctx, dsn, repo.Options{MaxOpenConns: 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	if _, err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	newLocks := func() *lock.Client {
		rdb := redis.NewClient(&redis.Options{Addr: testserver.SharedRedis})
		c := lock.New(rdb)
		t.Cleanup(func() { _ = c.Close(); _ = rdb.Close() })
		return c
	}
	if cfg.Strategy == "" {
		cfg.Strategy = service.StrategyLockVersion
	}
	if cfg.LockWait == 0 {
		cfg.LockWait = 5 * time.Second
	}
	if cfg.BatchMax == 0 {
		cfg.BatchMax = 64
	}
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	locker := redisson.Locker{Client: newLocks()}
	parts := service.Build(cfg, store, locker, nil, m)
	return &env{svc: parts.Service, parts: parts, store: store, locker: locker, db: db, other: newLocks(), metrics: m, reg: reg, sku: "SKU-" + uuid.NewString()[:8]}
}

// holdSKU takes the SKU's lock as another instance would.
func (e *env) holdSKU(t *testing.T) *lock.Hold {
	t.Helper()
	h, err := e.other.Mutex(skulock.Name(e.sku)).Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (e *env) setStock(t *testing.T, n int64) {
	t.Helper()
	if _, err := e.store.SetStock(context.Background(), e.sku, service.StockSetting{Available: n}); err != nil {
		t.Fatal(err)
	}
}

type placed struct {
	o        service.Order
	replayed bool
	err      error
}

func (e *env) placeAsync(ctx context.Context, key string) <-chan placed {
	ch := make(chan placed, 1)
	go func() {
		o, rep, err := e.svc.Place(ctx, service.PlaceRequest{Buyer: "b1", Key: key, SKU: e.sku, Quantity: 1})
		ch <- placed{o, rep, err}
	}()
	return ch
}

// waitInQueue waits until n orders of the SKU wait in the service's queue.
func (e *env) waitInQueue(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); service.Waiting(e.svc, e.sku) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d orders in the queue after 5s; want %d", service.Waiting(e.svc, e.sku), n)
		}
	}
}

// waitForLock waits until the service's lock client is in the SKU lock's
// line of waiting clients in Redis (a leader is waiting for the lock).
func (e *env) waitForLock(t *testing.T) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: testserver.SharedRedis})
	defer func() { _ = rdb.Close() }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if n, _ := rdb.LLen(context.Background(), "golock_line:"+skulock.Name(e.sku)).Result(); n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no client waiting for the SKU lock after 5s")
		}
	}
}

// A retry whose first attempt still waits in the queue is never told "sold out":
// a restock could still let the first attempt through, and the client would
// hold a final 409 for a key that has an order.
func TestRetryWhileFirstAttemptWaitsIsNotSoldOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, service.Config{})
	e.setStock(t, 1)
	h := e.holdSKU(t)
	first := e.placeAsync(ctx, "key-1")
	e.waitForLock(t) // the first attempt has passed its pre-check...
	e.setStock(t, 0) // ...and another buyer takes the last unit meanwhile

	rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, _, err := e.svc.Place(rctx, service.PlaceRequest{Buyer: "b1", Key: "key-1", SKU: e.sku, Quantity: 1})
	if errors.Is(err, service.ErrSoldOut) {
		t.Fatalf("retry while the first attempt waits = %v; want a retryable answer, never a final sold-out", err)
	}
	if !errors.Is(err, service.ErrInProgress) {
		t.Fatalf("retry while the first attempt waits = %v; want ErrInProgress", err)
	}
	// A restock after the first attempt came: it is told to retry (another
	// instance may have refused its key before the restock: restocked.go),
	// and its retry is placed.
	e.setStock(t, 5)
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if p := <-first; !errors.Is(p.err, service.ErrBusy) || p.o.ID != 0 {
		t.Fatalf("first attempt, admitted before the restock = %+v, %v; want ErrBusy (retry), nothing placed", p.o, p.err)
	}
	o, replayed, err := e.svc.Place(ctx, service.PlaceRequest{Buyer: "b1", Key: "key-1", SKU: e.sku, Quantity: 1})
	if err != nil || replayed || o.ID == 0 {
		t.Fatalf("retry after the first attempt = %+v, %v, %v; want placed", o, replayed, err)
	}
}

// The write's time bound starts when the write starts: an order that waited
// in the queue longer than WriteTimeout and then found the stock gone is a 409
// sold-out, not a 503 from a follow-up lookup on an expired context.
func TestWriteBoundStartsAfterTheWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, service.Config{WriteTimeout: 300 * time.Millisecond})
	e.setStock(t, 1)
	h := e.holdSKU(t)
	res := e.placeAsync(ctx, "key-1")
	time.Sleep(100 * time.Millisecond)
	e.setStock(t, 0)
	time.Sleep(500 * time.Millisecond) // longer in the queue than the write bound
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if p := <-res; !errors.Is(p.err, service.ErrSoldOut) {
		t.Fatalf("order after a long wait in the queue that found the stock gone = %v; want ErrSoldOut", p.err)
	}
}

// Past QueueMax orders of one SKU waiting at an instance, an order is
// answered ErrBusy at once; the ones in the queue are all served.
func TestLineCap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, batchMax := range []int{64, 1} {
		t.Run(fmt.Sprintf("batch-max-%d", batchMax), func(t *testing.T) {
			e := newEnv(t, service.Config{QueueMax: 5, BatchMax: batchMax})
			e.setStock(t, 100)
			h := e.holdSKU(t)
			// The cap counts every order of the SKU in progress here: with
			// combining the leader's own is in a batch waiting for the lock,
			// the others in the queue.
			n := 5
			var waiting []<-chan placed
			for i := range n {
				waiting = append(waiting, e.placeAsync(ctx, fmt.Sprintf("key-%d", i)))
			}
			// Every one admitted, and one waiting for the lock (with
			// combining, how many ride in the leader's batch depends on
			// arrival: the rest wait in the queue).
			for deadline := time.Now().Add(5 * time.Second); service.Admitted(e.svc, e.sku) < n; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d orders admitted after 5s; want %d", service.Admitted(e.svc, e.sku), n)
				}
			}
			e.waitForLock(t)
			if batchMax == 1 {
				e.waitInQueue(t, 5)
			}
			_, _, err := e.svc.Place(ctx, service.PlaceRequest{Buyer: "b1", Key: "key-over", SKU: e.sku, Quantity: 1})
			if !errors.Is(err, service.ErrBusy) {
				t.Fatalf("an order with 5 in the queue and QueueMax 5 = %v; want ErrBusy", err)
			}
			if err := h.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			for i, ch := range waiting {
				if p := <-ch; p.err != nil {
					t.Fatalf("order %d in the queue = %v; want placed", i, p.err)
				}
			}
			st, err := e.store.Stock(ctx, e.sku)
			if err != nil || st.Sold != int64(n) {
				t.Fatalf("stock after %d placed and one refused = %+v, %v; want sold %d", n, st, err, n)
			}
		})
	}
}

// Requests that give up while in the queue leave it: nothing is written for
// them, the queue is empty afterwards, and the order behind them is served.
func TestGivingUpLeavesTheQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, service.Config{})
	e.setStock(t, 100)
	h := e.holdSKU(t)
	lead := e.placeAsync(ctx, "key-lead") // the leader, waiting for the lock
	e.waitForLock(t)
	gctx, cancel := context.WithCancel(ctx)
	var quit []<-chan placed
	for i := range 200 {
		quit = append(quit, e.placeAsync(gctx, fmt.Sprintf("key-quit-%d", i)))
	}
	e.waitInQueue(t, 200)
	last := e.placeAsync(ctx, "key-last")
	e.waitInQueue(t, 201)
	cancel()
	for _, ch := range quit {
		if p := <-ch; !errors.Is(p.err, service.ErrUnavailable) {
			t.Fatalf("order that gave up in the queue = %v; want ErrUnavailable", p.err)
		}
	}
	if n := service.Waiting(e.svc, e.sku); n != 1 {
		t.Fatalf("orders in the queue after 200 gave up = %d; want 1", n)
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []<-chan placed{lead, last} {
		if p := <-ch; p.err != nil {
			t.Fatal(p.err)
		}
	}
	st, _ := e.store.Stock(ctx, e.sku)
	if st.Sold != 2 {
		t.Fatalf("sold = %d after 2 placed and 200 that gave up; want 2", st.Sold)
	}
}

// A restock takes the SKU lock like any writer, so restocks racing with
// batches never count as backstop conflicts (which would say the lock was
// violated); a restock to the current value writes nothing.
func TestRestockIsNotALockViolation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, service.Config{})
	e.setStock(t, 1_000_000)
	var wg sync.WaitGroup
	for i := range 400 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := e.svc.Place(ctx, service.PlaceRequest{Buyer: "b1", Key: fmt.Sprintf("key-%d", i), SKU: e.sku, Quantity: 1}); err != nil {
				t.Error(err)
			}
		}()
	}
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := e.parts.Inventory.SetStock(ctx, e.sku, service.StockSetting{Available: int64(2_000_000 + i)}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := conflicts(t, e.reg); n != 0 {
		t.Fatalf("stock_backstop_conflicts_total after restocks racing orders under a healthy lock = %v; want 0", n)
	}

	// A restock waits for the SKU lock.
	h := e.holdSKU(t)
	done := make(chan error, 1)
	go func() {
		_, err := e.parts.Inventory.SetStock(ctx, e.sku, service.StockSetting{Available: 7})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("restock returned (%v) while another instance held the SKU lock; want it to wait", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// A restock to the current value is a no-op.
	before, _ := e.store.Stock(ctx, e.sku)
	rows := ledgerRows(t, e)
	st, err := e.parts.Inventory.SetStock(ctx, e.sku, service.StockSetting{Available: before.Available})
	if err != nil || st.Version != before.Version || st.Available != before.Available {
		t.Fatalf("SetStock to the current value = %+v, %v; want %+v unchanged", st, err, before)
	}
	after, _ := e.store.Stock(ctx, e.sku)
	if after.Version != before.Version || ledgerRows(t, e) != rows {
		t.Fatalf("restock to the current value: version %d -> %d, ledger rows %d -> %d; want no change",
			before.Version, after.Version, rows, ledgerRows(t, e))
	}
}

func conflicts(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == "stock_backstop_conflicts_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

func ledgerRows(t *testing.T, e *env) int {
	t.Helper()
	var n int
	if err := e.db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM stock_ledger WHERE sku = ?", e.sku).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
