package outbox_test

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/stock/events"
	"github.com/seckill/stock/internal/outbox"
	"github.com/seckill/stock/internal/repo"
	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/testserver"
)

// newStore opens a store on a fresh, migrated database.
func newStore(t testing.TB) *repo.Store {
	t.Helper()
	return openStore(t, testserver.Database(t))
}

// openStore opens a store on dsn's database, migrated.
func openStore(t testing.TB, dsn string) *repo.Store {
	t.Helper()
	s, err := repo.Open(context.Background(), dsn, repo.Options{MaxOpenConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// recorder is a sink that keeps what it was sent; fail, when set, decides
// an attempt's error.
type recorder struct {
	name string
	mu   sync.Mutex
	got  []events.Event
	fail func(e events.Event) error
}

func (r *recorder) Name() string { return r.name }

func (r *recorder) Send(_ context.Context, e events.Event, _ []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		if err := r.fail(e); err != nil {
			return err
		}
	}
	r.got = append(r.got, e)
	return nil
}

// batchRecorder is a recorder that takes a SKU's events in batches
// (outbox.BatchSink), stopping at the first fail refuses; batches counts
// its calls.
type batchRecorder struct {
	recorder
	batches atomic.Int64
}

func (r *batchRecorder) SendBatch(ctx context.Context, evs []events.Event, _ [][]byte) (int, error) {
	r.batches.Add(1)
	for i, e := range evs {
		if err := r.Send(ctx, e, nil); err != nil {
			return i, err
		}
	}
	return len(evs), nil
}

func (r *recorder) events() []events.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// run starts a relay of targets on s until the test ends.
func run(t *testing.T, s *repo.Store, owner string, targets ...outbox.Target) {
	t.Helper()
	runWith(t, s, outbox.Config{Owner: owner, Targets: targets})
}

// runWith starts a relay of cfg (ticks of 10ms, leases of 1s unless set)
// on s until the test ends.
func runWith(t *testing.T, s *repo.Store, cfg outbox.Config) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg.Tick = cmp.Or(cfg.Tick, 10*time.Millisecond)
	cfg.Lease = cmp.Or(cfg.Lease, time.Second)
	r := outbox.New(cfg, s.Outbox(), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// waitFor polls cond for up to 20s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("not within 20s: %s", what)
}

// sale writes a small sale of two SKUs: stock set, orders placed singly and
// in a batch, one confirmed, one cancelled by its buyer, one by an admin.
// It returns the number of events it wrote per SKU.
func sale(t *testing.T, s *repo.Store) map[string]int {
	t.Helper()
	ctx := context.Background()
	for _, sku := range []string{"A", "B"} {
		if _, err := s.SetStock(ctx, sku, service.StockSetting{Available: 50, PaymentWindowSeconds: 600}); err != nil {
			t.Fatal(err)
		}
	}
	var ids []int64
	for i := range 6 {
		o, err := s.Deduct(ctx, service.Deduction{Buyer: fmt.Sprintf("u%d", i), Key: fmt.Sprintf("k%d", i), RequestHash: "h", SKU: "A", Quantity: 1, Write: service.WriteVersioned})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, o.ID)
	}
	items := []service.BatchItem{{Buyer: "v1", Key: "b1", RequestHash: "h", Quantity: 2}, {Buyer: "v2", Key: "b2", RequestHash: "h", Quantity: 1}}
	if _, _, err := s.DeductBatch(ctx, service.Batch{SKU: "B", Items: items}); err != nil {
		t.Fatal(err)
	}
	for _, tr := range []service.Transition{{ID: ids[0], Op: service.OpConfirm, PaymentRef: "pay-1"}, {ID: ids[1], Op: service.OpCancel, Buyer: "u1"}, {ID: ids[2], Op: service.OpCancel}} {
		if _, err := s.Transition(ctx, tr); err != nil {
			t.Fatal(err)
		}
	}
	return map[string]int{"A": 1 + 6 + 3, "B": 1 + 2}
}

// checkSeqs fails unless got holds, per SKU, seq 1..want[sku] exactly once
// each and in order.
func checkSeqs(t *testing.T, got []events.Event, want map[string]int) {
	t.Helper()
	next := map[string]int64{}
	for _, e := range got {
		if e.Seq != next[e.SKU]+1 {
			t.Fatalf("%s: seq %d after %d (event %s %s)", e.SKU, e.Seq, next[e.SKU], e.ID, e.Type)
		}
		next[e.SKU] = e.Seq
	}
	for sku, n := range want {
		if next[sku] != int64(n) {
			t.Errorf("%s: got up to seq %d, want %d", sku, next[sku], n)
		}
	}
}

// Every change's event reaches every sink once, per SKU in seq order, with
// what MySQL's order rows say; the feed pages through them in commit order
// with their delivery state.
func TestRelayDeliversEveryChange(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	want := sale(t, s)
	a, b := &recorder{name: "a"}, &batchRecorder{recorder: recorder{name: "b"}}
	run(t, s, "r1", outbox.Target{Sink: a}, outbox.Target{Sink: b})
	waitFor(t, "every event at both sinks", func() bool { return len(a.events()) == 13 && len(b.events()) == 13 })
	checkSeqs(t, a.events(), want)
	checkSeqs(t, b.events(), want)
	if n := b.batches.Load(); n >= 13 {
		t.Errorf("the batch sink took 13 events in %d calls; want fewer (a SKU's events together)", n)
	}
	byType := map[string]int{}
	for _, e := range a.events() {
		byType[e.Type]++
		switch e.Type {
		case events.OrderConfirmed:
			if e.Order.PaymentRef == nil || *e.Order.PaymentRef != "pay-1" || e.Order.Status != "confirmed" {
				t.Errorf("confirmed event %+v", e.Order)
			}
		case events.OrderCancelled:
			if e.Order.CancelledBy != "buyer" && e.Order.CancelledBy != "admin" {
				t.Errorf("cancelled event without cancelled_by: %+v", e.Order)
			}
		case events.OrderPlaced:
			if e.Order.Status != "reserved" || e.Order.ExpiresAt == nil || e.Order.PaymentRef != nil {
				t.Errorf("placed event %+v", e.Order)
			}
		case events.StockChanged:
			if e.Stock == nil || e.Stock.Available != 50 || e.Stock.PaymentWindowSeconds != 600 {
				t.Errorf("stock.changed %+v", e.Stock)
			}
		}
	}
	if byType[events.OrderPlaced] != 8 || byType[events.OrderConfirmed] != 1 || byType[events.OrderCancelled] != 2 || byType[events.StockChanged] != 2 {
		t.Errorf("events by type %v", byType)
	}
	feed := outbox.Feed{Store: s.Outbox(), Sinks: []string{"a"}}
	waitFor(t, "every event stamped in the feed, marked delivered", func() bool {
		p, err := feed.Page(context.Background(), "", "", 100)
		return err == nil && len(p.Events) == 13 && !slices.ContainsFunc(p.Events, func(e events.FeedEvent) bool { return e.Delivery["a"] != "delivered" })
	})
	var paged []events.Event
	after := ""
	for range 10 {
		p, err := feed.Page(context.Background(), after, "", 4)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range p.Events {
			if e.Delivery["a"] != "delivered" {
				t.Errorf("event %s delivery %v", e.ID, e.Delivery)
			}
			paged = append(paged, e.Event)
		}
		if len(p.Events) == 0 {
			if p.Next != after && after != "" {
				t.Errorf("an empty page's next %q, want %q", p.Next, after)
			}
			break
		}
		after = p.Next
	}
	if len(paged) != 13 {
		t.Fatalf("the feed paged %d events, want 13", len(paged))
	}
	checkSeqs(t, paged, want)
}

// A refused or rolled-back change writes no event, and the numbers stay
// gapless.
func TestNoEventWithoutItsChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	if _, err := s.SetStock(ctx, "C", service.StockSetting{Available: 1}); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	_, err := s.Deduct(ctx, service.Deduction{Buyer: "u", Key: "k1", RequestHash: "h", SKU: "C", Quantity: 1, Write: service.WriteVersioned,
		BeforeCommit: func() error { return boom }})
	if !errors.Is(err, boom) {
		t.Fatalf("deduct: %v, want boom", err)
	}
	_, _, err = s.DeductBatch(ctx, service.Batch{SKU: "C", Items: []service.BatchItem{{Buyer: "u", Key: "k2", RequestHash: "h", Quantity: 1}},
		BeforeCommit: func() error { return boom }})
	if !errors.Is(err, boom) {
		t.Fatalf("batch: %v, want boom", err)
	}
	if _, err := s.Deduct(ctx, service.Deduction{Buyer: "u", Key: "k3", RequestHash: "h", SKU: "C", Quantity: 1, Write: service.WriteVersioned}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Deduct(ctx, service.Deduction{Buyer: "u", Key: "k4", RequestHash: "h", SKU: "C", Quantity: 1, Write: service.WriteVersioned}); !errors.Is(err, service.ErrSoldOut) {
		t.Fatalf("sold out: %v", err)
	}
	evs, err := s.Outbox().After(ctx, "C", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	checkSeqs(t, evs, map[string]int{"C": 2})
	if evs[1].Type != events.OrderPlaced || evs[1].Order.Buyer != "u" {
		t.Errorf("second event %+v", evs[1])
	}
}

// Two relays share the work: each SKU's events go out once, in order, and
// a relay that stops has its SKUs taken over.
func TestRelaysShareAndTakeOver(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	want := sale(t, s)
	sink := &recorder{name: "a"}
	ctx, stop := context.WithCancel(context.Background())
	r1 := outbox.New(outbox.Config{Owner: "r1", Targets: []outbox.Target{{Sink: sink}}, Tick: 10 * time.Millisecond, Lease: time.Second},
		s.Outbox(), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	done := make(chan struct{})
	go func() { defer close(done); r1.Run(ctx) }()
	run(t, s, "r2", outbox.Target{Sink: sink})
	waitFor(t, "every event once", func() bool { return len(sink.events()) >= 13 })
	stop()
	<-done
	ctx2 := context.Background()
	for range 5 {
		if _, err := s.Deduct(ctx2, service.Deduction{Buyer: "late", Key: fmt.Sprint(time.Now().UnixNano()), RequestHash: "h", SKU: "A", Quantity: 1, Write: service.WriteVersioned}); err != nil {
			t.Fatal(err)
		}
	}
	want["A"] += 5
	waitFor(t, "the later events through the relay left", func() bool { return len(sink.events()) >= 18 })
	time.Sleep(100 * time.Millisecond)
	checkSeqs(t, sink.events(), want)
}

// A sink that keeps failing past MaxAge has the event marked failed, the
// SKU goes on, the feed says so, and a redelivery sends it once it works.
func TestGiveUpAndRedeliver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	if _, err := s.SetStock(ctx, "D", service.StockSetting{Available: 5}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	down := true
	hook := &recorder{name: "webhook", fail: func(e events.Event) error {
		mu.Lock()
		defer mu.Unlock()
		if down && e.Seq == 1 {
			return errors.New("503")
		}
		return nil
	}}
	run(t, s, "r1", outbox.Target{Sink: hook, MaxAge: 300 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	if _, err := s.Deduct(ctx, service.Deduction{Buyer: "u", Key: "k", RequestHash: "h", SKU: "D", Quantity: 1, Write: service.WriteVersioned}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second event past the failed first", func() bool { return len(hook.events()) == 1 })
	feed := outbox.Feed{Store: s.Outbox(), Sinks: []string{"webhook"}, Webhook: "webhook"}
	var first events.FeedEvent
	waitFor(t, "the feed", func() bool {
		p, err := feed.Page(ctx, "", "D", 10)
		if err != nil || len(p.Events) != 2 {
			return false
		}
		first = p.Events[0]
		return first.Delivery["webhook"] == "failed" && p.Events[1].Delivery["webhook"] == "delivered"
	})
	if err := feed.Redeliver(ctx, "999999"); !errors.Is(err, outbox.ErrNoEvent) {
		t.Errorf("redeliver of no event: %v", err)
	}
	mu.Lock()
	down = false
	mu.Unlock()
	if err := feed.Redeliver(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the redelivery", func() bool { return len(hook.events()) == 2 })
	if got := hook.events()[1]; got.ID != first.ID {
		t.Errorf("redelivered %s, want %s", got.ID, first.ID)
	}
	waitFor(t, "delivered in the feed", func() bool {
		p, _ := feed.Page(ctx, "", "D", 10)
		return len(p.Events) == 2 && p.Events[0].Delivery["webhook"] == "delivered"
	})
}

// The backlog counts what a sink has not had, and its oldest's age.
func TestBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	sale(t, s)
	b, err := s.Outbox().Backlog(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if b.Pending != 13 || b.Oldest <= 0 || b.Failed != 0 {
		t.Errorf("before delivery: %+v, want 13 pending", b)
	}
	a := &recorder{name: "a"}
	run(t, s, "r1", outbox.Target{Sink: a})
	waitFor(t, "no backlog", func() bool {
		b, err := s.Outbox().Backlog(ctx, "a")
		return err == nil && b.Pending == 0 && b.Oldest == 0
	})
}

// An event whose transaction commits after a later id's did (its id was
// skipped over while the transaction was open) is still found by the
// relay's discovery, not left to the backlog's rescan (here an hour).
func TestDiscoveryFindsALateCommit(t *testing.T) {
	t.Parallel()
	dsn := testserver.Database(t)
	s := openStore(t, dsn)
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx := context.Background()
	for _, sku := range []string{"slow", "fast"} {
		if _, err := s.SetStock(ctx, sku, service.StockSetting{Available: 5}); err != nil {
			t.Fatal(err)
		}
	}
	sink := &recorder{name: "a"}
	runWith(t, s, outbox.Config{Owner: "r1", Targets: []outbox.Target{{Sink: sink, Timeout: 100 * time.Millisecond}}, Rescan: time.Hour})
	waitFor(t, "both stockings delivered", func() bool { return len(sink.events()) == 2 })
	time.Sleep(time.Second) // the SKUs' workers let their cursors go: only discovery starts one again

	// slow's next event, written as the stores write one, left uncommitted.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	body, _ := json.Marshal(events.Stock{Available: 4})
	if _, err := tx.ExecContext(ctx, "UPDATE stock SET event_seq = event_seq + 1 WHERE sku = 'slow'"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO outbox_events (sku, seq, type, occurred_at, stock)
		VALUES ('slow', 2, 'stock.changed', UTC_TIMESTAMP(6), ?)`, string(body)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetStock(ctx, "fast", service.StockSetting{Available: 6}); err != nil { // a later id, committed first
		t.Fatal(err)
	}
	waitFor(t, "fast's second event delivered", func() bool { return len(sink.events()) == 3 })
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "slow's second event delivered", func() bool { return len(sink.events()) == 4 })
	checkSeqs(t, sink.events(), map[string]int{"slow": 2, "fast": 2})
}

// The feed is stamped when it is read: with no relay running, a page holds
// every committed event, per SKU in seq order, at rising positions.
func TestFeedStampsWhenRead(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	want := sale(t, s)
	p, err := outbox.Feed{Store: s.Outbox()}.Page(context.Background(), "", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []events.Event
	for i, e := range p.Events {
		if i > 0 && e.Position <= p.Events[i-1].Position {
			t.Errorf("event %d at position %d, after %d; want rising positions", i, e.Position, p.Events[i-1].Position)
		}
		got = append(got, e.Event)
	}
	if len(got) != 13 {
		t.Fatalf("the feed has %d events, want 13", len(got))
	}
	checkSeqs(t, got, want)
}

// A batch refused part way: what went before the refused event is marked
// and not sent again; the refused one and those after it are sent again
// after the backoff, in order.
func TestBatchRefusedPartWay(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	want := sale(t, s)
	var refused atomic.Bool
	b := &batchRecorder{recorder: recorder{name: "b", fail: func(e events.Event) error {
		if e.SKU == "A" && e.Seq == 4 && refused.CompareAndSwap(false, true) {
			return errors.New("refused once")
		}
		return nil
	}}}
	run(t, s, "r1", outbox.Target{Sink: b})
	waitFor(t, "every event at the sink", func() bool { return len(b.events()) == 13 })
	time.Sleep(100 * time.Millisecond)
	checkSeqs(t, b.events(), want)
	if !refused.Load() {
		t.Error("the refusal never happened")
	}
}

// A SKU with a backlog is sent page after page, the next page read while
// one is sent; a failed attempt mid-page drops the page read ahead, and
// the retry goes on from the event that failed: every event once, in order.
func TestReadAheadKeepsTheOrder(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	if _, err := s.SetStock(ctx, "R", service.StockSetting{Available: 100}); err != nil {
		t.Fatal(err)
	}
	var items []service.BatchItem
	for i := range 24 {
		items = append(items, service.BatchItem{Buyer: "u", Key: fmt.Sprintf("r%d", i), RequestHash: "h", Quantity: 1})
	}
	if _, _, err := s.DeductBatch(ctx, service.Batch{SKU: "R", Items: items}); err != nil {
		t.Fatal(err)
	}
	failed := map[int64]bool{}
	a := &recorder{name: "a", fail: func(e events.Event) error {
		if (e.Seq == 10 || e.Seq == 17) && !failed[e.Seq] { // the second of a page, the first of one
			failed[e.Seq] = true
			return errors.New("refused once")
		}
		return nil
	}}
	runWith(t, s, outbox.Config{Owner: "r1", Targets: []outbox.Target{{Sink: a}}, Batch: 4})
	waitFor(t, "the 25 events of R", func() bool { return len(a.events()) == 25 })
	checkSeqs(t, a.events(), map[string]int{"R": 25})
	if !failed[10] || !failed[17] {
		t.Errorf("attempts refused: %v; want seq 10 and 17", failed)
	}
}
