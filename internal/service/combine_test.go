package service_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/service/servicetest"
)

// newQueueUnit is newUnit with a gate in the critical section, for queueUp.
func newQueueUnit(t *testing.T, cfg service.Config) (*unit, *gate) {
	t.Helper()
	g := &gate{entered: make(chan struct{}), open: make(chan struct{})}
	cfg.CriticalSectionHook = g.hook
	return newUnit(t, cfg), g
}

// gate, once armed, stops the next batch in its critical section (lock
// held, before COMMIT) until opened.
type gate struct {
	armed         atomic.Bool
	entered, open chan struct{}
}

func (g *gate) hook() {
	if g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.open
	}
}

// queueUp starts a leader whose batch of one takes the lock and stops in its
// critical section, then queues reqs one by one, so their
// order in the queue is the order of reqs. The queue is the next batch, taken
// (and its keys read) before its lock wait, once release lets the leader
// finish. (queueUpWaiting queues them while the leader waits for the lock.)
func (u *unit) queueUp(t *testing.T, g *gate, ctxs []context.Context, reqs []service.PlaceRequest) (release func(), lead <-chan placed, out []<-chan placed) {
	t.Helper()
	g.armed.Store(true)
	lead = u.placeAsync(context.Background(), u.req(fmt.Sprintf("lead-%d", len(u.store.Stats().BatchSizes)), 1))
	select {
	case <-g.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the leader did not reach its critical section in 5s")
	}
	out = u.queue(t, ctxs, reqs)
	return func() {
		t.Helper()
		close(g.open)
		if p := <-lead; p.err != nil {
			t.Fatal(p.err)
		}
		g.entered, g.open = make(chan struct{}), make(chan struct{})
	}, lead, out
}

// queue places reqs one by one, each once the one before waits in the queue.
func (u *unit) queue(t *testing.T, ctxs []context.Context, reqs []service.PlaceRequest) []<-chan placed {
	t.Helper()
	var out []<-chan placed
	for i, r := range reqs {
		out = append(out, u.placeAsync(ctxs[i], r))
		waitFor(t, fmt.Sprintf("%d orders in the queue", i+1), func() bool { return service.Waiting(u.svc, u.sku) == i+1 })
	}
	return out
}

// queueUpWaiting holds the SKU lock as another instance would, starts a
// leader (its batch of one waits for the lock), then queues reqs behind
// it. Once the hold ends, the leader's batch takes the queue in too.
func (u *unit) queueUpWaiting(t *testing.T, ctxs []context.Context, reqs []service.PlaceRequest) (*servicetest.Hold, <-chan placed, []<-chan placed) {
	t.Helper()
	h, err := u.locks.Lock(u.sku)
	if err != nil {
		t.Fatal(err)
	}
	lead := u.placeAsync(context.Background(), u.req("lead", 1))
	waitFor(t, "the leader waiting for the lock", func() bool { return u.locks.Waiting(u.sku) == 1 })
	return h, lead, u.queue(t, ctxs, reqs)
}

// release ends the hold queueUpWaiting took and waits for the leader's own order.
func (u *unit) release(t *testing.T, h *servicetest.Hold, lead <-chan placed) {
	t.Helper()
	if err := h.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p := <-lead; p.err != nil {
		t.Fatal(p.err)
	}
}

func background(n int) []context.Context {
	out := make([]context.Context, n)
	for i := range out {
		out[i] = context.Background()
	}
	return out
}

// Orders of one SKU that wait while it is served go into one batch under
// one lock hold, and each gets its own order back.
func TestCombinerBatchesTheQueue(t *testing.T) {
	t.Parallel()
	u, g := newQueueUnit(t, service.Config{BatchMax: 64})
	u.setStock(t, u.sku, 100, 0)
	var reqs []service.PlaceRequest
	for i := range 8 {
		reqs = append(reqs, service.PlaceRequest{Buyer: fmt.Sprintf("b%d", i), Key: fmt.Sprintf("k%d", i), SKU: u.sku, Quantity: 1 + i%3})
	}
	release, _, waiting := u.queueUp(t, g, background(len(reqs)), reqs)
	release()
	var fence int64
	ids := map[int64]bool{}
	for i, ch := range waiting {
		p := <-ch
		r := reqs[i]
		if p.err != nil || p.replayed || p.o.Buyer != r.Buyer || p.o.Key != r.Key || p.o.Quantity != r.Quantity || ids[p.o.ID] || p.o.Fence == nil {
			t.Fatalf("order %d (%s/%s x%d) = %+v, %v; want its own new order with a fence", i, r.Buyer, r.Key, r.Quantity, p.o, p.err)
		}
		ids[p.o.ID] = true
		if i == 0 {
			fence = *p.o.Fence
		} else if *p.o.Fence != fence {
			t.Fatalf("order %d has fence %d, order 0 fence %d; want one lock hold for the batch", i, *p.o.Fence, fence)
		}
	}
	if got := u.store.Stats().BatchSizes; !slices.Equal(got, []int{1, len(reqs)}) {
		t.Fatalf("batch sizes %v; want [1 %d]: the leader alone, then the whole queue", got, len(reqs))
	}
	if a := u.audit(t); !a.Consistent || a.Orders != int64(len(reqs)+1) {
		t.Fatalf("audit = %+v; want consistent with %d orders", a, len(reqs)+1)
	}
}

// A batch that runs out of stock part-way is filled in arrival order: the
// orders that fit are placed (a later, smaller one too), the others are
// sold out, and the SKU is then answered sold out from memory.
func TestCombinerSellsOutMidBatch(t *testing.T) {
	t.Parallel()
	u, g := newQueueUnit(t, service.Config{BatchMax: 64})
	u.setStock(t, u.sku, 1+4, 0) // the leader's unit, then 4 for the batch
	qs := []int{2, 3, 1, 1, 1}
	wantPlaced := []bool{true, false, true, true, false}
	var reqs []service.PlaceRequest
	for i, q := range qs {
		reqs = append(reqs, service.PlaceRequest{Buyer: fmt.Sprintf("b%d", i), Key: fmt.Sprintf("k%d", i), SKU: u.sku, Quantity: q})
	}
	release, _, waiting := u.queueUp(t, g, background(len(reqs)), reqs)
	release()
	for i, ch := range waiting {
		p := <-ch
		if wantPlaced[i] != (p.err == nil) || !wantPlaced[i] && !errors.Is(p.err, service.ErrSoldOut) {
			t.Fatalf("order %d (x%d) of a batch over 4 units = %v; want placed %v, else sold out", i, qs[i], p.err, wantPlaced[i])
		}
	}
	if got := u.store.Stats().BatchSizes; !slices.Equal(got, []int{1, len(reqs)}) {
		t.Fatalf("batch sizes %v; want [1 %d]", got, len(reqs))
	}
	if a := u.audit(t); !a.Consistent || a.Available != 0 || a.Orders != 4 {
		t.Fatalf("audit = %+v; want consistent, sold out, 4 orders", a)
	}
	if !service.SoldOutKnown(u.svc, u.sku) {
		t.Fatal("the sold-out fast path does not know the SKU after a batch sold it out")
	}
	batches := len(u.store.Stats().BatchSizes)
	if _, _, err := u.svc.Place(context.Background(), u.req("late", 1)); !errors.Is(err, service.ErrSoldOut) || len(u.store.Stats().BatchSizes) != batches {
		t.Fatalf("a late order = %v after %d more batches; want ErrSoldOut from memory", err, len(u.store.Stats().BatchSizes)-batches)
	}
}

// A client that gives up while its order waits in the queue leaves it: it is
// answered ErrUnavailable, nothing is written for it, and the orders around
// it are placed.
func TestCombinerClientLeavesTheQueue(t *testing.T) {
	t.Parallel()
	u := newUnit(t, service.Config{BatchMax: 64})
	u.setStock(t, u.sku, 100, 0)
	ctxs := background(3)
	quit, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctxs[1] = quit
	reqs := []service.PlaceRequest{u.req("k0", 1), u.req("k1", 1), u.req("k2", 1)}
	h, lead, waiting := u.queueUpWaiting(t, ctxs, reqs)
	cancel()
	if p := <-waiting[1]; !errors.Is(p.err, service.ErrUnavailable) || !errors.Is(p.err, context.Canceled) {
		t.Fatalf("order that gave up in the queue = %v; want ErrUnavailable (context canceled)", p.err)
	}
	if n := service.Waiting(u.svc, u.sku); n != 2 {
		t.Fatalf("orders in the queue after one gave up = %d; want 2", n)
	}
	if err := h.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []<-chan placed{lead, waiting[0], waiting[2]} {
		if p := <-ch; p.err != nil {
			t.Fatal(p.err)
		}
	}
	if _, err := u.store.OrderByKey(context.Background(), "b1", "k1"); !errors.Is(err, service.ErrOrderNotFound) {
		t.Fatalf("order of the client that left = %v; want none", err)
	}
	if got := u.store.Stats().BatchSizes; !slices.Equal(got, []int{3}) {
		t.Fatalf("batch sizes %v; want [3]: the leader takes the queue in, without the one that left", got)
	}
	if a := u.audit(t); !a.Consistent || a.Orders != 3 {
		t.Fatalf("audit = %+v; want 3 orders", a)
	}
}

// replayAgain places r, whose order exists, through the service: it must
// come back as a replay, which turns on the reads of a batch's keys before
// the lock for a while.
func (u *unit) replayAgain(t *testing.T, r service.PlaceRequest) {
	t.Helper()
	if _, replayed, err := u.svc.Place(context.Background(), r); err != nil || !replayed {
		t.Fatalf("Place(%s/%s) again = replayed %v, %v; want its order back", r.Buyer, r.Key, replayed, err)
	}
}

// Once a replay came, the batch's keys are read before the lock: a replay
// in the queue gets its order back without being written again, the rest go
// into the batch, and a batch of replays only does not take the lock at all.
func TestCombinerAnswersReplaysBeforeTheLock(t *testing.T) {
	t.Parallel()
	u, g := newQueueUnit(t, service.Config{BatchMax: 64})
	first, reqs := u.replayQueue(t, 1, 1)
	u.replayAgain(t, reqs[1]) // a batch of one, under the lock
	release, _, waiting := u.queueUp(t, g, background(len(reqs)), reqs)
	release()
	answersWithReplay(t, waiting, reqs, 1, first.ID)
	if got := u.store.Stats().BatchSizes; !slices.Equal(got, []int{1, 1, 2}) {
		t.Fatalf("batch sizes %v; want [1 1 2]: the first replay, the leader, then the queue without its replay", got)
	}
	if got := u.store.Stats().KeysChecked; !slices.Equal(got, []int{0, 0, 2}) {
		t.Fatalf("items with KeyChecked per batch %v; want [0 0 2]: a batch of one reads nothing first", got)
	}

	// A queue of replays only: answered from the read, no lock taken.
	release, _, waiting = u.queueUp(t, g, background(2), []service.PlaceRequest{reqs[0], reqs[2]})
	calls := u.locks.Calls()
	release()
	for i, ch := range waiting {
		if p := <-ch; p.err != nil || !p.replayed {
			t.Fatalf("replay %d = %+v, %v; want its order back", i, p.o, p.err)
		}
	}
	if got := u.locks.Calls(); got != calls {
		t.Fatalf("%d more lock calls for a queue of replays; want none", got-calls)
	}
	// stock_lock_batch_orders counts what went under the lock: the first
	// replay's 1, the two leaders' 1 each and the first queue's 2, not its
	// replay nor the second queue.
	if n, sum := batchOrders(t, u); n != 4 || sum != 5 {
		t.Fatalf("stock_lock_batch_orders: %d batches of %v orders; want 4 of 5", n, sum)
	}
	if a := u.audit(t); !a.Consistent || a.Orders != 5 { // placed, the two leaders, k1, k2
		t.Fatalf("audit = %+v; want consistent with 5 orders", a)
	}
}

// batchOrders reads the stock_lock_batch_orders histogram: its count and sum.
func batchOrders(t *testing.T, u *unit) (uint64, float64) {
	t.Helper()
	mfs, err := u.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "stock_lock_batch_orders" {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	return 0, 0
}

// When the read before the lock fails, the batch is placed whole and the
// store reads the keys itself: a replay still gets its order back.
func TestCombinerKeysReadFails(t *testing.T) {
	t.Parallel()
	u, g := newQueueUnit(t, service.Config{BatchMax: 64})
	u.setStock(t, u.sku, 100, 0)
	first := u.place(t, "b1", "placed", u.sku, 2)
	reqs := []service.PlaceRequest{
		{Buyer: "b2", Key: "k1", SKU: u.sku, Quantity: 1},
		{Buyer: "b1", Key: "placed", SKU: u.sku, Quantity: 2}, // a replay
	}
	u.replayAgain(t, reqs[1]) // the reads before the lock are on
	u.store.FailKeysTaken(errors.New("read refused"))
	release, _, waiting := u.queueUp(t, g, background(len(reqs)), reqs)
	release()
	for i, ch := range waiting {
		p := <-ch
		if p.err != nil || (i == 1) != p.replayed || i == 1 && p.o.ID != first.ID {
			t.Fatalf("order %d = %+v, replayed %v, %v; want the replay's order back, the other placed", i, p.o, p.replayed, p.err)
		}
	}
	st := u.store.Stats()
	if !slices.Equal(st.BatchSizes, []int{1, 1, 2}) || !slices.Equal(st.KeysChecked, []int{0, 0, 0}) {
		t.Fatalf("batches %v, items with KeyChecked %v; want [1 1 2] and [0 0 0]: the whole queue, keys read by the store", st.BatchSizes, st.KeysChecked)
	}
}

// A batch reads its keys before the lock only within replayWindow (10s)
// of the last replay a batch met: a flood of new keys reads none and
// leaves them to the unique index. A replay in such a batch is still
// answered with its order (the store finds it), and turns the reads on.
func TestCombinerReadsKeysFirstOnlyAfterAReplay(t *testing.T) {
	t.Parallel()
	u, g := newQueueUnit(t, service.Config{BatchMax: 64})
	var now atomic.Int64
	now.Store(time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC).UnixNano())
	service.SetReplayClock(u.svc, func() time.Time { return time.Unix(0, now.Load()) })
	first, replaying := u.replayQueue(t, 1)
	queue := func(keys ...string) []service.PlaceRequest {
		var reqs []service.PlaceRequest
		for _, k := range keys {
			reqs = append(reqs, service.PlaceRequest{Buyer: "b9", Key: k, SKU: u.sku, Quantity: 1})
		}
		return reqs
	}
	steps := []struct {
		reqs    []service.PlaceRequest
		replay  int   // the index of the replay in reqs, -1: none
		advance int64 // nanoseconds the clock moves on before the queue
		checked int   // items of the queue's batch read before the lock
		what    string
	}{
		{queue("n1", "n2"), -1, 0, 0, "no replay yet: nothing read"},
		{replaying, 1, 0, 0, "the first replay: found by the store, not read"},
		{queue("n3", "n4"), -1, int64(9 * time.Second), 2, "9s after a replay: read"},
		{queue("n5", "n6"), -1, int64(time.Second), 0, "10s after the last replay: nothing read again"},
	}
	for i, st := range steps {
		now.Add(st.advance)
		release, _, waiting := u.queueUp(t, g, background(len(st.reqs)), st.reqs)
		release()
		answersWithReplay(t, waiting, st.reqs, st.replay, first.ID)
		checked := u.store.Stats().KeysChecked
		if got := checked[len(checked)-1]; got != st.checked {
			t.Fatalf("step %d: %d of the queue's keys read before the lock (per batch %v); want %d: %s", i, got, checked, st.checked, st.what)
		}
	}
	if a := u.audit(t); !a.Consistent || a.Orders != 1+4+1+6 { // placed, 4 leaders, k1, n1-n6
		t.Fatalf("audit = %+v; want consistent with 12 orders", a)
	}
}

// The orders that join the queue while a batch waits for the lock go into
// that batch once it holds the lock (up to BatchMax), their keys read by the
// store: a replay among them gets its order back, the rest are placed under
// the one hold; what is past BatchMax is the next batch.
func TestCombinerTakesTheQueueInOnceLocked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		batchMax       int
		sizes, checked []int
		description    string
	}{
		{64, []int{6}, []int{0}, "the leader and the whole queue, none read before"},
		{4, []int{4, 2}, []int{0, 2}, "the leader and 3 of the queue, then the other 2, read before the lock"},
	} {
		t.Run(fmt.Sprint("BatchMax=", tc.batchMax), func(t *testing.T) {
			t.Parallel()
			u := newUnit(t, service.Config{BatchMax: tc.batchMax})
			first, reqs := u.replayQueue(t, 1, 3, 1, 2)
			h, lead, waiting := u.queueUpWaiting(t, background(len(reqs)), reqs)
			u.release(t, h, lead)
			fences := map[int64]int{}
			for i, p := range answersWithReplay(t, waiting, reqs, 1, first.ID) {
				if i != 1 {
					fences[*p.o.Fence]++
				}
			}
			st := u.store.Stats()
			if !slices.Equal(st.BatchSizes, tc.sizes) || !slices.Equal(st.KeysChecked, tc.checked) {
				t.Fatalf("batches %v, items with KeyChecked %v; want %v and %v: %s", st.BatchSizes, st.KeysChecked, tc.sizes, tc.checked, tc.description)
			}
			if len(fences) != len(tc.sizes) {
				t.Fatalf("the queue's orders were placed under %d lock holds (fences %v); want %d", len(fences), fences, len(tc.sizes))
			}
			if a := u.audit(t); !a.Consistent || a.Orders != 6 || a.Available != 100-2-1-1-3-1-2 {
				t.Fatalf("audit = %+v; want consistent with 6 orders", a)
			}
		})
	}
}

// answersWithReplay receives the answers of reqs: the one at replay must be
// order firstID given back, every other its own new order with a fence.
func answersWithReplay(t *testing.T, waiting []<-chan placed, reqs []service.PlaceRequest, replay int, firstID int64) []placed {
	t.Helper()
	out := make([]placed, len(waiting))
	for i, ch := range waiting {
		p := <-ch
		switch {
		case p.err != nil:
			t.Fatalf("order %d = %v", i, p.err)
		case i == replay && (!p.replayed || p.o.ID != firstID):
			t.Fatalf("the replay = %+v, replayed %v; want order %d back", p.o, p.replayed, firstID)
		case i != replay && (p.replayed || p.o.Key != reqs[i].Key || p.o.Fence == nil):
			t.Fatalf("order %d = %+v, replayed %v; want its own new order with a fence", i, p.o, p.replayed)
		}
		out[i] = p
	}
	return out
}

// replayQueue stocks 100 units, places b1's order "placed" of 2, and returns
// it with a queue of new orders of quantities qs (buyer b2, b3, ..., keys k1,
// k2, ...) with b1's replay of "placed" second.
func (u *unit) replayQueue(t *testing.T, qs ...int) (service.Order, []service.PlaceRequest) {
	t.Helper()
	u.setStock(t, u.sku, 100, 0)
	first := u.place(t, "b1", "placed", u.sku, 2)
	var reqs []service.PlaceRequest
	for i, q := range qs {
		reqs = append(reqs, service.PlaceRequest{Buyer: fmt.Sprint("b", i+2), Key: fmt.Sprint("k", i+1), SKU: u.sku, Quantity: q})
		if i == 0 {
			reqs = append(reqs, service.PlaceRequest{Buyer: "b1", Key: "placed", SKU: u.sku, Quantity: 2}) // a replay
		}
	}
	return first, reqs
}

// Orders still queued when their SKU sells out take no turn of the lock:
// the batch that sold the last unit puts the SKU on the sold-out fast path,
// and the next batch answers its orders, and every order queued behind
// them, from a read of their keys. Each is answered as a new order on the
// fast path would be: sold out, or its order back when its key placed one.
func TestQueuedOrdersLeaveForTheSoldOutPath(t *testing.T) {
	t.Parallel()
	u, g := newQueueUnit(t, service.Config{BatchMax: 4, SoldOutTTL: time.Hour})
	u.setStock(t, u.sku, 5, 0)
	first := u.place(t, "b1", "first", u.sku, 1)
	reqs := make([]service.PlaceRequest, 40)
	for i := range reqs {
		reqs[i] = service.PlaceRequest{Buyer: fmt.Sprint("q", i), Key: "k", SKU: u.sku, Quantity: 1}
	}
	reqs[30] = u.req("first", 1) // a retry of the first order: its replay
	release, _, out := u.queueUp(t, g, background(len(reqs)), reqs)
	release()
	placed, soldOut, replays := 0, 0, 0
	for i, ch := range out {
		p := <-ch
		switch {
		case p.err == nil && p.replayed && p.o.ID == first.ID:
			replays++
		case p.err == nil:
			placed++
		case errors.Is(p.err, service.ErrSoldOut):
			soldOut++
		default:
			t.Fatalf("order %d = %v; want placed, a replay or sold out", i, p.err)
		}
	}
	if placed != 3 || replays != 1 || soldOut != 36 {
		t.Fatalf("placed %d, replays %d, sold out %d; want 3 (the units the leader left), 1 and 36", placed, replays, soldOut)
	}
	// The leader's batch, then one batch of 4 that sold the last 3 units.
	if got := u.store.Stats().BatchSizes; !slices.Equal(got, []int{1, 4}) {
		t.Fatalf("batches %v; want [1 4]: the orders queued past the sell-out took no batch", got)
	}
}

// Orders that come while a batch reads its stock row join it: they are
// placed in the same hold (one store call, one fence), not in a batch of
// their own after it.
func TestOrdersDuringTheStockReadJoinTheBatch(t *testing.T) {
	t.Parallel()
	u := newUnit(t, service.Config{BatchMax: 64})
	u.setStock(t, u.sku, 10, 0)
	ctx := context.Background()
	var once sync.Once
	var joined []<-chan placed
	u.store.AfterRead(func(string) {
		once.Do(func() {
			for i := range 5 {
				joined = append(joined, u.placeAsync(ctx, u.req(fmt.Sprintf("j%d", i), 1)))
			}
			for deadline := time.Now().Add(5 * time.Second); service.Waiting(u.svc, u.sku) < 5; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Errorf("%d orders queued 5s after they were sent; want 5", service.Waiting(u.svc, u.sku))
					return
				}
			}
		})
	})
	lead := <-u.placeAsync(ctx, u.req("lead", 1))
	if lead.err != nil || lead.o.Fence == nil {
		t.Fatalf("lead = %+v; want placed with a fence", lead)
	}
	for i, ch := range joined {
		p := <-ch
		if p.err != nil || p.o.Fence == nil || *p.o.Fence != *lead.o.Fence {
			t.Fatalf("order j%d = %+v; want placed under the lead's hold (fence %d)", i, p, *lead.o.Fence)
		}
	}
	if got := u.store.Stats().BatchSizes; len(got) != 1 {
		t.Fatalf("store calls with batch sizes %v; want one call (the joined orders in it)", got)
	}
	if a := u.audit(t); !a.Consistent || a.Orders != 6 {
		t.Fatalf("audit = %+v; want consistent with 6 orders", a)
	}
}
