package repo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/testserver"
)

func openStore(t *testing.T) *Store { t.Helper(); return openStoreConns(t, 20) }

// openStoreConns opens a Store on a fresh database with a pool of conns
// (the migrations, whose lock takes a connection of its own, run with two).
func openStoreConns(t *testing.T, conns int) *Store {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, testserver.Database(t), Options{MaxOpenConns: max(conns, 2)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	s.sql.SetMaxOpenConns(conns)
	if s.multi != nil {
		s.multi.SetMaxOpenConns(conns)
	}
	return s
}

// queries counts the COM_QUERY packets sent on connections of the
// "counted" network: every statement and transaction command, whatever
// path (gorm or the raw connection) sent it.
var queries atomic.Int64

type countingConn struct{ net.Conn }

func (c countingConn) Write(b []byte) (int, error) {
	if len(b) > 4 && b[4] == 0x03 && b[3] == 0 { // sequence 0: a new command
		queries.Add(1)
	}
	return c.Conn.Write(b)
}

func init() {
	mysql.RegisterDialContext("counted", func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c}, nil
	})
}

// openCounted opens a Store whose statements are counted in queries.
func openCounted(t *testing.T) *Store {
	t.Helper()
	dsn := strings.Replace(testserver.Database(t), "@tcp(", "@counted(", 1)
	s, err := Open(context.Background(), dsn, Options{MaxOpenConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func batchOf(n int, prefix string) []service.BatchItem {
	items := make([]service.BatchItem, n)
	for i := range items {
		items[i] = service.BatchItem{Buyer: "b", Key: fmt.Sprintf("%s-%d", prefix, i), RequestHash: "h", Quantity: 1}
	}
	return items
}

// A batch costs the same handful of statements whatever its size (it was
// one INSERT per order).
func TestBatchStatementsAreFlat(t *testing.T) {
	s := openCounted(t)
	ctx := context.Background()
	if _, err := s.SetStock(ctx, "F", service.StockSetting{Available: 1000}); err != nil {
		t.Fatal(err)
	}
	n := &queries
	var per []int64
	for _, size := range []int{1, 8, 64} {
		before := n.Load()
		orders, errs, err := s.DeductBatch(ctx, service.Batch{SKU: "F", Items: batchOf(size, fmt.Sprint("s", size)), Fence: 1})
		if err != nil {
			t.Fatal(err)
		}
		for i := range orders {
			if errs[i] != nil || orders[i].ID == 0 {
				t.Fatalf("batch of %d, item %d = %+v, %v", size, i, orders[i], errs[i])
			}
		}
		per = append(per, n.Load()-before)
	}
	t.Logf("statements per batch of 1, 8, 64: %v", per)
	if per[0] == 0 || per[1] != per[2] || per[2] > 8 {
		t.Fatalf("statements for batches of 1, 8, 64 = %v; want the same handful (at most 8, BEGIN and COMMIT included)", per)
	}
}

// On the multi-statement path the unique index checks the keys the caller
// did not read: a batch of new keys is three queries (the stock read, the
// multi-statement, COMMIT), with no key read under the lock. A key that has
// an order fails that INSERT; the batch is rolled back and placed again
// with every key read (beside the stock read), and the replay is still
// answered as one, alone.
func TestMultiBatchChecksKeysByIndex(t *testing.T) {
	s := openCounted(t)
	if s.multi == nil {
		t.Skip("the server does not number a statement's rows consecutively: no multi-statement batch")
	}
	ctx := context.Background()
	if _, err := s.SetStock(ctx, "IX", service.StockSetting{Available: 100}); err != nil {
		t.Fatal(err)
	}
	place := func(items []service.BatchItem) ([]service.Order, []error, int64) {
		t.Helper()
		before := queries.Load()
		orders, errs, err := s.DeductBatch(ctx, service.Batch{SKU: "IX", Items: items, Fence: 3})
		if err != nil {
			t.Fatal(err)
		}
		return orders, errs, queries.Load() - before
	}
	first := batchOf(8, "n")
	orders, errs, sent := place(first)
	if err := errors.Join(errs...); err != nil || sent != 3 {
		t.Fatalf("a batch of 8 new keys = %v in %d queries; want every order placed in 3", err, sent)
	}

	again := batchOf(8, "m")
	again[5] = first[2] // a replay of an order placed above, unread by the caller
	_, errs, sent = place(again)
	for i := range again {
		if want := i == 5; errors.Is(errs[i], service.ErrDuplicateKey) != want || (errs[i] == nil) == want {
			t.Fatalf("item %d of the batch with a replay = %v; want a duplicate for item 5 alone", i, errs[i])
		}
	}
	// stock read, failed multi-statement, ROLLBACK; key read, stock read,
	// multi-statement, COMMIT
	if sent != 7 {
		t.Fatalf("the batch with a replay took %d queries; want 7", sent)
	}
	if got, err := s.OrderByKey(ctx, "b", first[2].Key); err != nil || got.ID != orders[2].ID {
		t.Fatalf("the replayed key's order = %+v, %v; want the first batch's (id %d)", got, err, orders[2].ID)
	}
	st, err := s.Stock(ctx, "IX")
	if err != nil || st.Sold != 15 || st.Available != 85 || st.Version != 3 {
		t.Fatalf("stock after both batches = %+v, %v; want 15 sold, 85 left, version 3 (a bump per batch)", st, err)
	}
	var ledger int64
	if err := s.sql.QueryRowContext(ctx, "SELECT COUNT(*) FROM stock_ledger l JOIN orders o ON o.id = l.order_id WHERE l.sku = 'IX' AND l.kind = 'sale'").Scan(&ledger); err != nil || ledger != 15 {
		t.Fatalf("sale ledger rows joined to their orders = %d, %v; want 15", ledger, err)
	}
}

// A batch never holds two connections of a pool at once, so batches never
// wait for each other in a full pool: with one connection, or two for
// eight SKUs' batches at once, every batch is placed long before its
// deadline, by either writer.
func TestBatchKeyReadsDoNotStarveThePool(t *testing.T) {
	for _, c := range []struct {
		conns int
		multi bool
	}{{1, false}, {2, false}, {1, true}, {2, true}} {
		t.Run(fmt.Sprintf("conns=%d,multi=%v", c.conns, c.multi), func(t *testing.T) {
			conns := c.conns
			s := openStoreConns(t, conns)
			if !c.multi {
				s.multi = nil
			} else if s.multi == nil {
				t.Skip("the server does not number a statement's rows consecutively: no multi-statement batch")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			const skus, rounds = 8, 5
			var wg sync.WaitGroup
			errs := make(chan error, skus*rounds)
			for k := range skus {
				sku := fmt.Sprint("P", k)
				if _, err := s.SetStock(ctx, sku, service.StockSetting{Available: 1000}); err != nil {
					t.Fatal(err)
				}
				wg.Go(func() {
					for r := range rounds {
						items := batchOf(4, fmt.Sprint(sku, "-", r)) // none KeyChecked: the store reads them all
						_, itemErrs, err := s.DeductBatch(ctx, service.Batch{SKU: sku, Items: items, Fence: 1})
						if err == nil {
							err = errors.Join(itemErrs...)
						}
						if err != nil {
							errs <- fmt.Errorf("%s round %d: %w", sku, r, err)
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			for k := range skus {
				if st, err := s.Stock(ctx, fmt.Sprint("P", k)); err != nil || st.Sold != 4*rounds {
					t.Fatalf("P%d: %+v, %v; want %d sold", k, st, err, 4*rounds)
				}
			}
		})
	}
}

// Concurrent batches of several SKUs each get back the ids of their own
// orders: numbered from the multi-row INSERT's LastInsertId where the server
// promises consecutive ids (this MariaDB: innodb_autoinc_lock_mode 1), read
// back by buyer and key where it does not; by both writers.
func TestConcurrentBatchesGetTheirOwnIDs(t *testing.T) {
	for _, c := range []struct{ consecutive, multi bool }{{true, true}, {true, false}, {false, false}} {
		t.Run(fmt.Sprintf("consecutive=%v,multi=%v", c.consecutive, c.multi), func(t *testing.T) {
			s := openStore(t)
			if c.consecutive && !s.consecutiveIDs {
				t.Skip("the server does not promise consecutive ids (innodb_autoinc_lock_mode 2 or auto_increment_increment > 1)")
			}
			s.consecutiveIDs = c.consecutive
			if !c.multi {
				s.multi = nil
			}
			concurrentBatches(t, s)
		})
	}
}

func concurrentBatches(t *testing.T, s *Store) {
	ctx := context.Background()
	const skus, rounds = 6, 10
	for k := range skus {
		if _, err := s.SetStock(ctx, fmt.Sprint("C", k), service.StockSetting{Available: 10_000}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[int64]string{}
	for k := range skus {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				items := batchOf(32, fmt.Sprintf("c%d-r%d", k, r))
				orders, errs, err := s.DeductBatch(ctx, service.Batch{SKU: fmt.Sprint("C", k), Items: items, Fence: int64(r)})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for i, o := range orders {
					if errs[i] != nil {
						t.Errorf("item %d: %v", i, errs[i])
						continue
					}
					if prev, dup := got[o.ID]; dup {
						t.Errorf("id %d answered to %s and %s", o.ID, prev, o.Key)
					}
					got[o.ID] = o.Key
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for id, key := range got {
		o, err := s.Order(ctx, id)
		if err != nil || o.Key != key {
			t.Fatalf("order %d in MySQL = %+v, %v; the batch answered key %s", id, o, err, key)
		}
	}
	if len(got) != skus*rounds*32 {
		t.Fatalf("%d orders answered; want %d", len(got), skus*rounds*32)
	}
	// Each sale's ledger row names its own order (the multi-statement
	// numbers them from LAST_INSERT_ID()), once.
	var rows, orders, bad int64
	if err := s.sql.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(DISTINCT o.id),
		COALESCE(SUM(o.id IS NULL OR o.sku <> l.sku OR l.delta <> -CAST(o.quantity AS SIGNED)), 0)
		FROM stock_ledger l LEFT JOIN orders o ON o.id = l.order_id WHERE l.kind = 'sale'`).Scan(&rows, &orders, &bad); err != nil {
		t.Fatal(err)
	}
	if rows != int64(len(got)) || orders != rows || bad != 0 {
		t.Fatalf("sale ledger rows %d naming %d distinct orders, %d not their order's; want %d, %d, 0", rows, orders, bad, len(got), len(got))
	}
}

// The multi-statement batch whose stock row moved after its read (the lock
// failed) matches no row with its versioned UPDATE: ErrConflict, and its
// transaction is rolled back whole (no order, no ledger row), as it is when
// BeforeCommit fails or panics, leaving its connection (the pool's only one)
// fit for the next batch.
func TestMultiBatchConflictRollsBack(t *testing.T) {
	s := openStoreConns(t, 1)
	if s.multi == nil {
		t.Skip("the server does not number a statement's rows consecutively: no multi-statement batch")
	}
	s.multi.SetMaxOpenConns(1)
	ctx := context.Background()
	if _, err := s.SetStock(ctx, "MC", service.StockSetting{Available: 100}); err != nil {
		t.Fatal(err)
	}
	s.afterStockRead = func() {
		s.afterStockRead = nil
		if _, err := s.SetStock(ctx, "MC", service.StockSetting{Available: 50}); err != nil { // another writer, past a failed lock
			t.Error(err)
		}
	}
	if _, _, err := s.DeductBatch(ctx, service.Batch{SKU: "MC", Items: batchOf(3, "c"), Fence: 1}); !errors.Is(err, service.ErrConflict) {
		t.Fatalf("DeductBatch after the row moved = %v; want ErrConflict", err)
	}
	var orders, sales int64
	count := func() {
		t.Helper()
		if err := s.sql.QueryRowContext(ctx, "SELECT (SELECT COUNT(*) FROM orders WHERE sku = 'MC'), (SELECT COUNT(*) FROM stock_ledger WHERE sku = 'MC' AND kind = 'sale')").Scan(&orders, &sales); err != nil {
			t.Fatal(err)
		}
	}
	if count(); orders != 0 || sales != 0 {
		t.Fatalf("after the conflict: %d orders, %d sale ledger rows; want none", orders, sales)
	}
	if st, err := s.Stock(ctx, "MC"); err != nil || st.Available != 50 || st.Sold != 0 {
		t.Fatalf("stock after the conflict = %+v, %v; want 50 available, none sold", st, err)
	}
	// BeforeCommit refusing (the lock was lost), or panicking: rolled back
	// too, on the pool's one connection.
	hookErr := errors.New("lock lost")
	if _, _, err := s.DeductBatch(ctx, service.Batch{SKU: "MC", Items: batchOf(3, "e"), Fence: 2,
		BeforeCommit: func() error { return hookErr }}); !errors.Is(err, hookErr) {
		t.Fatalf("DeductBatch with a failing BeforeCommit = %v; want its error", err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("a panic in BeforeCommit did not reach the caller")
			}
		}()
		_, _, _ = s.DeductBatch(ctx, service.Batch{SKU: "MC", Items: batchOf(3, "p"), Fence: 2,
			BeforeCommit: func() error { panic("hook") }})
	}()
	if count(); orders != 0 || sales != 0 {
		t.Fatalf("after a failing and a panicking BeforeCommit: %d orders, %d sale ledger rows; want none", orders, sales)
	}
	orders2, errs, err := s.DeductBatch(ctx, service.Batch{SKU: "MC", Items: batchOf(3, "d"), Fence: 2})
	if err != nil || errors.Join(errs...) != nil || orders2[2].ID != orders2[0].ID+2 {
		t.Fatalf("the next batch on the same connection = %+v, %v, %v; want 3 orders", orders2, errs, err)
	}
	if count(); orders != 3 || sales != 3 {
		t.Fatalf("after the next batch: %d orders, %d sale ledger rows; want 3 each", orders, sales)
	}
}

// A return between a limited batch's stock read and its purchase rows' read
// gives a refused buyer's allowance back behind the read: the batch's
// versioned UPDATE also needs the restock sequence it read, so it misses
// (ErrConflict) and the retry refuses the order admitted before the return
// instead of placing it.
func TestLimitedBatchMissesAReturnBehindItsRead(t *testing.T) {
	s := openStoreConns(t, 4)
	ctx := context.Background()
	if _, err := s.SetStock(ctx, "LR", service.StockSetting{Available: 100, PerBuyerLimit: 1, PaymentWindowSeconds: 60}); err != nil {
		t.Fatal(err)
	}
	k1, err := s.Deduct(ctx, service.Deduction{Buyer: "b", Key: "k1", RequestHash: "h1", SKU: "LR", Quantity: 1, Write: service.WriteVersioned})
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Stock(ctx, "LR")
	if err != nil {
		t.Fatal(err)
	}
	admitted := st.RestockSeq
	s.afterStockRead = func() {
		s.afterStockRead = nil
		if _, err := s.Transition(ctx, service.Transition{ID: k1.ID, Op: service.OpCancel}); err != nil {
			t.Error(err)
		}
	}
	batch := service.Batch{SKU: "LR", Fence: 1, Items: []service.BatchItem{{Buyer: "b", Key: "k2", RequestHash: "h2", Quantity: 1, Admitted: &admitted}}}
	if orders, errs, err := s.write(ctx, &batch, false); !errors.Is(err, service.ErrConflict) {
		t.Fatalf("the batch read before the cancel = %+v, %v, %v; want ErrConflict", orders, errs, err)
	}
	var re *service.RestockedError
	if orders, errs, err := s.DeductBatch(ctx, batch); err != nil || len(errs) != 1 || !errors.As(errs[0], &re) {
		t.Fatalf("its retry = %+v, %v, %v; want the order refused with a *RestockedError", orders, errs, err)
	}
	if _, err := s.OrderByKey(ctx, "b", "k2"); !errors.Is(err, service.ErrOrderNotFound) {
		t.Fatalf("k2's order = %v; want none", err)
	}
}

// A multi-statement batch whose UPDATE misses writes no event and answers
// ErrConflict, whatever its size (its events go with the COMMIT, numbered
// only from an UPDATE that matched).
func TestMultiBatchConflictWritesNoEvent(t *testing.T) {
	s := openStoreConns(t, 1)
	if s.multi == nil {
		t.Skip("the server does not number a statement's rows consecutively: no multi-statement batch")
	}
	ctx := context.Background()
	if _, err := s.SetStock(ctx, "ME", service.StockSetting{Available: 100}); err != nil {
		t.Fatal(err)
	}
	s.afterStockRead = func() {
		s.afterStockRead = nil
		if _, err := s.SetStock(ctx, "ME", service.StockSetting{Available: 90}); err != nil {
			t.Error(err)
		}
	}
	if _, _, err := s.DeductBatch(ctx, service.Batch{SKU: "ME", Items: batchOf(20, "u"), Fence: 1}); !errors.Is(err, service.ErrConflict) {
		t.Fatalf("DeductBatch after the row moved = %v; want ErrConflict", err)
	}
	evs, err := s.EventsOf(ctx, "ME")
	if err != nil || len(evs) != 2 || evs[1].Seq != 2 || evs[1].Type != "stock.changed" {
		t.Fatalf("events after the conflict: %+v, %v; want the two stock changes only", evs, err)
	}
	if _, _, err := s.DeductBatch(ctx, service.Batch{SKU: "ME", Items: batchOf(20, "v"), Fence: 2}); err != nil {
		t.Fatal(err)
	}
	if evs, err = s.EventsOf(ctx, "ME"); err != nil || len(evs) != 22 || evs[21].Seq != 22 {
		t.Fatalf("events after the batch: %d, %v; want 22 numbered 1..22", len(evs), err)
	}
}
