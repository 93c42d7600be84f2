package service_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/stockevents"
	"github.com/seckill/stock/internal/testserver"
)

// soldOutNotices records the sold-out notices a service publishes.
type soldOutNotices struct {
	mu   sync.Mutex
	skus []string
	seqs []int64
}

func (n *soldOutNotices) StockChanged(context.Context, string, int64) error { return nil }

func (n *soldOutNotices) SoldOut(_ context.Context, sku string, seq int64) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.skus, n.seqs = append(n.skus, sku), append(n.seqs, seq)
	return nil
}

// waitFor waits up to 5s for a notice and returns the first one's seq.
func (n *soldOutNotices) waitFor(t *testing.T) int64 {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); n.count() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no sold-out notice 5s after a batch was answered sold out")
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.seqs[0]
}

func (n *soldOutNotices) count() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.skus)
}

// lockResults is the SKU lock's outcomes counted with result r.
func lockResults(t *testing.T, reg *prometheus.Registry, r string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "stock_lock_results_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == r {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// answered waits up to d for an order's answer; ok is false if none came.
func answered(ch <-chan placed, d time.Duration) (p placed, ok bool) {
	select {
	case p = <-ch:
		return p, true
	case <-time.After(d):
		return p, false
	}
}

// A batch that MySQL answers sold out tells the other instances, once:
// the orders after it, answered on the fast path, tell nobody again.
func TestSoldOutBatchTellsTheOtherInstances(t *testing.T) {
	t.Parallel()
	notices := &soldOutNotices{}
	e := newEnv(t, service.Config{Events: notices, SoldOutTTL: time.Hour})
	e.setStock(t, 1)
	if _, _, err := e.svc.Place(t.Context(), service.PlaceRequest{Buyer: "b1", Key: "k1", SKU: e.sku, Quantity: 1}); err != nil {
		t.Fatal(err)
	}
	if n := notices.count(); n != 0 {
		t.Fatalf("%d sold-out notices after an order placed; want 0", n)
	}
	soldOut := func(key string) {
		t.Helper()
		if _, _, err := e.svc.Place(t.Context(), service.PlaceRequest{Buyer: "b1", Key: key, SKU: e.sku, Quantity: 1}); !errors.Is(err, service.ErrSoldOut) {
			t.Fatalf("order %s after the last unit = %v; want ErrSoldOut", key, err)
		}
	}
	soldOut("k2")
	notices.waitFor(t) // published once the batch has answered and released the lock
	soldOut("k3")
	if !service.SoldOutKnown(e.svc, e.sku) {
		t.Fatal("the SKU is not on the sold-out fast path after its sold-out batch")
	}
	if n := notices.count(); n != 1 {
		t.Fatalf("%d sold-out notices after two sold-out answers; want 1 (the batch's; the fast path's answer tells nobody)", n)
	}
}

// A sold-out notice ends a batch's wait for the SKU's lock, held
// elsewhere: its order is answered from a read of its key, long before the
// lock is free, and the wait counts as abandoned. A notice older than a
// restock known here is ignored, and one that MySQL does not bear out
// (units left) leaves the order to the lock after all.
func TestSoldOutNoticeEndsTheLockWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t, service.Config{SoldOutTTL: time.Hour})
	e.setStock(t, 2)
	h := e.holdSKU(t)
	defer func() { _ = h.Unlock(context.Background()) }()
	waiting := e.placeAsync(t.Context(), "k1")
	e.waitForLock(t)

	e.svc.SoldOut(e.sku, -1) // older than any restock sequence
	if service.SoldOutKnown(e.svc, e.sku) {
		t.Fatal("a notice older than the known restock sequence marked the SKU sold out")
	}
	seq := service.KnownRestockSeq(e.svc, e.sku)
	e.svc.SoldOut(e.sku, seq) // MySQL still has 2 units
	if p, ok := answered(waiting, 300*time.Millisecond); ok {
		t.Fatalf("order answered %+v after a notice MySQL does not bear out; want it still waiting for the lock", p)
	}
	if service.SoldOutKnown(e.svc, e.sku) {
		t.Fatal("the SKU is still held sold out after a read found units")
	}
	e.waitForLock(t) // in the lock's line again

	if _, err := e.store.SetStock(t.Context(), e.sku, service.StockSetting{Available: 0}); err != nil {
		t.Fatal(err)
	}
	e.svc.SoldOut(e.sku, seq)
	soldOutSoon(t, waiting, "the order after a sold-out notice")
	if h.Err() != nil {
		t.Fatalf("the other holder lost the lock: %v", h.Err())
	}
	if n := lockResults(t, e.reg, "abandoned"); n != 2 {
		t.Fatalf("%v lock waits counted abandoned; want 2 (one per notice that ended a wait)", n)
	}
}

// Over Redis: an instance whose batch finds the SKU sold out tells
// another, whose batch waiting for the lock (held elsewhere) is answered
// sold out at once.
func TestSoldOutNoticeReachesAWaitingBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, service.Config{})
	events := sharedEvents(t)
	// a, the instance that finds the sell-out, takes a lock of its own: the
	// SKU's is held elsewhere for the whole test.
	a := service.Build(service.Config{Strategy: service.StrategyLockVersion, BatchMax: 64, Events: events, SoldOutTTL: time.Hour},
		e.store, memLocker{}, nil, nil).Service
	b, _, _ := e.instance(service.Config{Events: events, SoldOutTTL: time.Hour})
	listenUntilCleanup(t, events, b)

	e.setStock(t, 0)
	h := e.holdSKU(t)
	defer func() { _ = h.Unlock(context.Background()) }()
	waiting := make(chan placed, 1)
	go func() {
		o, rep, err := e.place(b, "b1", "k1")
		waiting <- placed{o, rep, err}
	}()
	e.waitForLock(t)
	if _, _, err := e.place(a, "b2", "k2"); !errors.Is(err, service.ErrSoldOut) {
		t.Fatalf("order at a = %v; want ErrSoldOut", err)
	}
	soldOutSoon(t, waiting, "b's order, after a found the SKU sold out")
}

// soldOutSoon fails unless the order waiting for the lock (held elsewhere;
// lock wait 5s) is answered sold out within 3s.
func soldOutSoon(t *testing.T, waiting <-chan placed, what string) {
	t.Helper()
	p, ok := answered(waiting, 3*time.Second)
	switch {
	case !ok:
		t.Fatalf("%s: still waiting for the lock after 3s", what)
	case !errors.Is(p.err, service.ErrSoldOut):
		t.Fatalf("%s = %+v; want ErrSoldOut", what, p)
	}
}

// sharedEvents is stock events over the shared Redis, on a prefix of the
// test's own.
func sharedEvents(t *testing.T) *stockevents.Redis {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: testserver.SharedRedis})
	t.Cleanup(func() { _ = rdb.Close() })
	return stockevents.New(rdb, "test-"+uuid.NewString()[:8]+":")
}

// listenUntilCleanup hands events' messages to s until the test ends,
// once subscribed.
func listenUntilCleanup(t *testing.T, events *stockevents.Redis, s *service.Service) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &subscribedListener{Service: s, subscribed: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Go(func() { events.Listen(ctx, l) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	select {
	case <-l.subscribed:
	case <-time.After(10 * time.Second):
		t.Fatal("not subscribed after 10s")
	}
}

// subscribedListener is a service's listener that closes subscribed at
// the first subscription.
type subscribedListener struct {
	*service.Service
	once       sync.Once
	subscribed chan struct{}
}

func (l *subscribedListener) StockChanged(sku string, seq int64) {
	if sku == "" {
		l.once.Do(func() { close(l.subscribed) })
	}
	l.Service.StockChanged(sku, seq)
}

// A notice is dated by the restock sequence its batch knew before it read
// the row, not by one learnt between that read and the publish (a return
// at this instance meanwhile): dated after the return, it would put the
// SKU back on every listener's sold-out path with the returned unit on
// sale, and end their batches' waits for nothing.
func TestSoldOutNoticeIsDatedBeforeItsRead(t *testing.T) {
	t.Parallel()
	notices := &soldOutNotices{}
	var learnt atomic.Pointer[func()]
	e := newEnv(t, service.Config{Events: notices, SoldOutTTL: time.Hour, CriticalSectionHook: func() {
		if f := learnt.Load(); f != nil {
			(*f)()
		}
	}})
	e.setStock(t, 1)
	before := service.KnownRestockSeq(e.svc, e.sku)
	learn := func() { e.svc.StockChanged(e.sku, before+1000) } // inside the batch's transaction, after its read
	learnt.Store(&learn)
	// Two orders in one batch: the lock held elsewhere while both queue.
	h := e.holdSKU(t)
	first := e.placeAsync(t.Context(), "k1")
	e.waitForLock(t)
	second := e.placeAsync(t.Context(), "k2")
	e.waitInQueue(t, 1)
	if err := h.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	a, okA := answered(first, 10*time.Second)
	b, okB := answered(second, 10*time.Second)
	if !okA || !okB || a.err != nil || !errors.Is(b.err, service.ErrSoldOut) {
		t.Fatalf("the batch's answers: %+v %v, %+v %v; want k1 placed, k2 sold out", a, okA, b, okB)
	}
	if seq := notices.waitFor(t); seq >= before+1000 {
		t.Errorf("the sold-out notice is dated %d, after the restock sequence %d learnt during its batch; want at most %d", seq, before+1000, before)
	}
}
