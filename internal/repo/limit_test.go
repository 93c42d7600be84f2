package repo_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/seckill/stock/internal/repo"
	"github.com/seckill/stock/internal/service"
)

// An order that read the SKU's per-buyer limit (none) before the admin
// switched one on must not commit as if there were none: the recount of the
// SKU's purchases would miss it, and the buyer could then exceed the limit.
// The order is held between its read and its INSERT (another transaction
// holds a gap lock where its key goes), the limit of 1 is set, the order
// goes on; whatever its answer, a second order of the buyer must then be
// refused if the first was placed, and the audit must find no one over the
// limit. Each write path that reads the limit: the versioned and the
// conditional Deduct, and the batch (the multi-statement when the SKU has
// no limit).
func TestLimitSwitchedOnMidOrder(t *testing.T) {
	t.Parallel()
	paths := []struct {
		name  string
		place func(s *repo.Store, sku string) error
	}{
		{"versioned", func(s *repo.Store, sku string) error {
			_, err := s.Deduct(context.Background(), deduction(sku, "alice", "k1", service.WriteVersioned))
			return err
		}},
		{"conditional", func(s *repo.Store, sku string) error {
			_, err := s.Deduct(context.Background(), deduction(sku, "alice", "k1", service.WriteConditional))
			return err
		}},
		{"batch", func(s *repo.Store, sku string) error {
			_, errs, err := s.DeductBatch(context.Background(), service.Batch{SKU: sku, Fence: 1, Items: []service.BatchItem{
				{Buyer: "alice", Key: "k1", RequestHash: "h", Quantity: 1},
				{Buyer: "bob", Key: "b1", RequestHash: "h", Quantity: 1},
			}})
			return errors.Join(append(errs, err)...)
		}},
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, dsn := newStoreDSN(t)
			db := sqlDB(t, dsn)
			const sku = "LIM"
			mustSet(t, s, sku, 10, 0)

			release := gapLock(t, db, "alice", "k1")
			placed := make(chan error, 1)
			go func() { placed <- p.place(s, sku) }()
			waitInsertBlocked(t, db)
			mustSet(t, s, sku, 10, 1)
			release()
			first := <-placed
			t.Logf("first order, placed across the limit change: %v", first)

			_, err := s.Deduct(ctx, deduction(sku, "alice", "k2", service.WriteConditional))
			var le *service.LimitError
			if err != nil && !errors.As(err, &le) && !errors.Is(err, service.ErrConflict) {
				t.Fatalf("second order of alice = %v; want placed, or refused by the limit", err)
			}
			a, err := s.Audit(ctx, sku)
			if err != nil {
				t.Fatal(err)
			}
			if a.BuyersOverLimit != 0 || !a.Consistent {
				t.Fatalf("%s: audit after a limit of 1 was switched on mid-order = %+v; want no buyer over the limit", p.name, a)
			}
		})
	}
}

func deduction(sku, buyer, key string, w service.Write) service.Deduction {
	return service.Deduction{Buyer: buyer, Key: key, RequestHash: "h", SKU: sku, Quantity: 1, Write: w}
}

func mustSet(t *testing.T, s *repo.Store, sku string, available, limit int64) {
	t.Helper()
	if _, err := s.SetStock(context.Background(), sku, service.StockSetting{Available: available, PerBuyerLimit: limit}); err != nil {
		t.Fatalf("SetStock(%q, %d, %d) = %v", sku, available, limit, err)
	}
}

func sqlDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// gapLock holds, in a transaction of its own, the gap of the unique (buyer,
// idempotency_key) index where buyer's key would go, so that an INSERT of
// it waits; release rolls the transaction back.
func gapLock(t *testing.T, db *sql.DB, buyer, key string) (release func()) {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRowContext(context.Background(),
		"SELECT COUNT(*) FROM orders WHERE buyer = ? AND idempotency_key = ? FOR UPDATE", buyer, key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			_ = tx.Rollback()
		}
	}
	t.Cleanup(release)
	return release
}

// waitInsertBlocked waits until an INSERT into orders of this database has
// been waiting for at least 100 ms (blocked by the gap lock).
func waitInsertBlocked(t *testing.T, db *sql.DB) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		var n int
		if err := db.QueryRowContext(context.Background(), `SELECT COUNT(*) FROM information_schema.processlist
			WHERE db = DATABASE() AND command = 'Query' AND time_ms >= 100 AND info LIKE '%INSERT INTO%orders%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no INSERT into orders blocked within a minute")
		}
	}
}

// An order of the conditional write that read the SKU's restock sequence
// before a restock, and reaches its UPDATE after it, is refused with a
// *service.RestockedError (the UPDATE matches the sequence it read), not
// placed: the restock may have come after a refusal of its key elsewhere.
// The order is held between its read and its INSERT by a gap lock.
func TestRestockMidConditionalOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, dsn := newStoreDSN(t)
	db := sqlDB(t, dsn)
	const sku = "RMID"
	mustSet(t, s, sku, 1, 0)
	release := gapLock(t, db, "alice", "k1")
	placed := make(chan error, 1)
	go func() {
		d := deduction(sku, "alice", "k1", service.WriteConditional)
		admitted := int64(0)
		d.Admitted = &admitted
		_, err := s.Deduct(ctx, d)
		placed <- err
	}()
	waitInsertBlocked(t, db)
	mustSet(t, s, sku, 5, 0) // more units where fewer than an order may ask were left
	release()
	var re *service.RestockedError
	if err := <-placed; !errors.As(err, &re) || re.Seq != 1 {
		t.Fatalf("conditional order admitted at sequence 0, restocked before its UPDATE = %v; want a *RestockedError{1}", err)
	}
	if _, err := s.OrderByKey(ctx, "alice", "k1"); !errors.Is(err, service.ErrOrderNotFound) {
		t.Fatalf("the refused order's key has an order (%v); want none", err)
	}
}
