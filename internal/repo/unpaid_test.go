package repo_test

import (
	"context"
	"testing"

	"github.com/seckill/stock/internal/repo"
	"github.com/seckill/stock/internal/service"
)

// Migration 9 counts the reserved orders placed before it: per buyer and
// SKU, in the purchase row kept for a limit where there is one, in a new
// row otherwise; confirmed and returned orders are not unpaid.
func TestUnpaidMigrationCountsReservedOrders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, db, p := gooseOnFreshDB(t)
	if _, err := p.UpTo(ctx, 8); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"INSERT INTO stock (sku, available, reserved, sold, stocked, version, updated_at, per_buyer_limit, payment_window_seconds) VALUES " +
			"('LIM', 0, 3, 1, 4, 1, NOW(6), 5, 60), ('FREE', 0, 6, 0, 6, 1, NOW(6), 0, 60)",
		"INSERT INTO buyer_purchases (buyer, sku, quantity) VALUES ('a', 'LIM', 4)",
		"INSERT INTO orders (buyer, idempotency_key, request_hash, sku, quantity, status, created_at) VALUES " +
			"('a', 'k1', 'h', 'LIM', 1, 'reserved', NOW(6)), ('a', 'k2', 'h', 'LIM', 2, 'reserved', NOW(6)), " +
			"('a', 'k3', 'h', 'LIM', 1, 'confirmed', NOW(6)), ('a', 'k4', 'h', 'FREE', 4, 'reserved', NOW(6)), " +
			"('b', 'k5', 'h', 'FREE', 2, 'reserved', NOW(6)), ('b', 'k6', 'h', 'FREE', 7, 'cancelled', NOW(6))",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := p.UpTo(ctx, 9); err != nil {
		t.Fatal(err)
	}
	want := map[[2]string][2]int64{{"a", "LIM"}: {4, 3}, {"a", "FREE"}: {0, 4}, {"b", "FREE"}: {0, 2}}
	rows, err := db.QueryContext(ctx, "SELECT buyer, sku, quantity, unpaid FROM buyer_purchases")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rows.Close() }()
	n := 0
	for rows.Next() {
		var k [2]string
		var got [2]int64
		if err := rows.Scan(&k[0], &k[1], &got[0], &got[1]); err != nil {
			t.Fatal(err)
		}
		if n++; want[k] != got {
			t.Errorf("purchase row of %v after the migration = quantity %d, unpaid %d; want %v", k, got[0], got[1], want[k])
		}
	}
	if err := rows.Err(); err != nil || n != len(want) {
		t.Fatalf("%d purchase rows after the migration (%v); want %d", n, err, len(want))
	}
	s, err := repo.Open(ctx, dsn, repo.Options{MaxOpenConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	for _, sku := range []string{"LIM", "FREE"} {
		if a, err := s.Audit(ctx, sku); err != nil || a.UnpaidMismatch != 0 {
			t.Fatalf("Audit(%q) after the migration = %+v, %v; want no unpaid mismatch", sku, a, err)
		}
	}
}

// The audit finds a buyer whose unpaid count disagrees with their reserved
// orders: a count off by one, or reserved orders without a row.
func TestAuditFindsUnpaidMismatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, dsn := newStoreDSN(t)
	db := sqlDB(t, dsn)
	if _, err := s.SetStock(ctx, "U", service.StockSetting{Available: 10, PaymentWindowSeconds: 60}); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"a", "b"} {
		if _, err := s.Deduct(ctx, deduction("U", b, "k-"+b, service.WriteConditional)); err != nil {
			t.Fatal(err)
		}
	}
	if a, err := s.Audit(ctx, "U"); err != nil || !a.Consistent {
		t.Fatalf("Audit before any tampering = %+v, %v; want consistent", a, err)
	}
	for _, q := range []string{
		"UPDATE buyer_purchases SET unpaid = unpaid + 1 WHERE buyer = 'a'",
		"DELETE FROM buyer_purchases WHERE buyer = 'b'",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	a, err := s.Audit(ctx, "U")
	if err != nil || a.UnpaidMismatch != 2 || a.Consistent {
		t.Fatalf("Audit with one count off and one row gone = %+v, %v; want 2 unpaid mismatches, inconsistent", a, err)
	}
}
