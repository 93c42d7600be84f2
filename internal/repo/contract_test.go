package repo_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/seckill/stock/internal/repo"
	"github.com/seckill/stock/internal/service/servicetest"
	"github.com/seckill/stock/internal/testserver"
)

// The MySQL store keeps the Store contract (the in-memory store of
// servicetest runs the same cases).
func TestStoreContract(t *testing.T) {
	t.Parallel()
	servicetest.StoreContract(t, func(t *testing.T) servicetest.ContractStore {
		dsn := testserver.Database(t)
		s, err := repo.Open(context.Background(), dsn, repo.Options{MaxOpenConns: 8})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		if _, err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return servicetest.ContractStore{Store: s, LedgerRows: func(t *testing.T, sku string) int {
			t.Helper()
			var n int
			if err := db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM stock_ledger WHERE sku = ?", sku).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}, HoldRow: func(t *testing.T, sku string) func() { return holdRow(t, db, sku) }, Now: func(t *testing.T) time.Time {
			t.Helper()
			var now time.Time
			if err := db.QueryRowContext(t.Context(), "SELECT UTC_TIMESTAMP(6)").Scan(&now); err != nil {
				t.Error(err)
			}
			return now
		}}
	})
}

// holdRow locks sku's stock row in a transaction of its own, as a writer
// does, until the returned release rolls it back.
func holdRow(t testing.TB, db *sql.DB, sku string) func() {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got string
	if err := tx.QueryRowContext(context.Background(), "SELECT sku FROM stock WHERE sku = ? FOR UPDATE", sku).Scan(&got); err != nil {
		_ = tx.Rollback()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() }) // a second rollback is a no-op
	return func() { _ = tx.Rollback() }
}
