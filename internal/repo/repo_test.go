package repo_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/seckill/stock/internal/repo"
	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/testserver"
)

func newStore(t *testing.T) *repo.Store {
	t.Helper()
	s, _ := newStoreDSN(t)
	return s
}

// newStoreDSN opens a Store on a fresh, migrated database and returns it
// with the database's DSN.
func newStoreDSN(t *testing.T) (*repo.Store, string) {
	t.Helper()
	dsn := testserver.Database(t)
	s, err := repo.Open(context.Background(), dsn, repo.Options{MaxOpenConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, dsn
}

// A batch is filled in order while stock lasts; a key that exists already
// is skipped without spoiling the batch; one versioned UPDATE books the total.
func TestDeductBatchFillsInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	if _, err := s.SetStock(ctx, "B", service.StockSetting{Available: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Deduct(ctx, service.Deduction{Buyer: "b1", Key: "old", RequestHash: "h", SKU: "B", Quantity: 1, Write: service.WriteConditional}); err != nil {
		t.Fatal(err)
	}
	items := []service.BatchItem{
		{Buyer: "b1", Key: "k1", RequestHash: "h1", Quantity: 2},
		{Buyer: "b1", Key: "old", RequestHash: "h", Quantity: 1}, // exists already
		{Buyer: "b1", Key: "k2", RequestHash: "h2", Quantity: 2},
		{Buyer: "b1", Key: "k3", RequestHash: "h3", Quantity: 5}, // does not fit
		{Buyer: "b1", Key: "k1", RequestHash: "h1", Quantity: 2}, // twice in one batch
	}
	orders, errs, err := s.DeductBatch(ctx, service.Batch{SKU: "B", Items: items, Fence: 7})
	if err != nil {
		t.Fatal(err)
	}
	want := []error{nil, service.ErrDuplicateKey, nil, service.ErrSoldOut, service.ErrSoldOut}
	for i := range items {
		if !errors.Is(errs[i], want[i]) || (want[i] == nil) != (errs[i] == nil) {
			t.Fatalf("item %d (%s x%d) = %v; want %v", i, items[i].Key, items[i].Quantity, errs[i], want[i])
		}
		if errs[i] == nil && (orders[i].ID == 0 || orders[i].Fence == nil || *orders[i].Fence != 7) {
			t.Fatalf("item %d order = %+v; want an id and fence 7", i, orders[i])
		}
	}
	a, err := s.Audit(ctx, "B")
	if err != nil {
		t.Fatal(err)
	}
	if a.Sold != 5 || a.Available != 0 || a.Orders != 3 || !a.Consistent {
		t.Fatalf("audit = %+v; want 5 sold in 3 orders, consistent", a)
	}
	// The key twice in one batch: the second is sold out here only because
	// stock ran out first; with stock left it would be a duplicate.
	if _, err := s.SetStock(ctx, "B", service.StockSetting{Available: 10}); err != nil {
		t.Fatal(err)
	}
	_, errs, err = s.DeductBatch(ctx, service.Batch{SKU: "B", Items: []service.BatchItem{
		{Key: "k9", RequestHash: "h9", Quantity: 1}, {Key: "k9", RequestHash: "h9", Quantity: 1}}})
	if err != nil || errs[0] != nil || !errors.Is(errs[1], service.ErrDuplicateKey) {
		t.Fatalf("same key twice in a batch = %v, %v; want placed, then duplicate", errs, err)
	}
}

func TestDuplicateKeyIsTranslated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	if _, err := s.SetStock(ctx, "D", service.StockSetting{Available: 5}); err != nil {
		t.Fatal(err)
	}
	d := service.Deduction{Buyer: "b1", Key: "dup", RequestHash: "h", SKU: "D", Quantity: 1, Write: service.WriteConditional}
	if _, err := s.Deduct(ctx, d); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Deduct(ctx, d); !errors.Is(err, service.ErrDuplicateKey) {
		t.Fatalf("second insert of a key = %v; want service.ErrDuplicateKey", err)
	}
	if _, err := s.OrderByKey(ctx, "b1", "nope"); !errors.Is(err, service.ErrOrderNotFound) {
		t.Fatalf("OrderByKey(nope) = %v; want ErrOrderNotFound", err)
	}
	if _, err := s.Stock(ctx, "nope"); !errors.Is(err, service.ErrUnknownSKU) {
		t.Fatalf("Stock(nope) = %v; want ErrUnknownSKU", err)
	}
}

func TestUnreachableIsUnavailable(t *testing.T) {
	t.Parallel()
	port := testserver.FreePort(t)
	_, err := repo.Open(context.Background(), "root@tcp(127.0.0.1:"+strconv.Itoa(port)+")/x?timeout=300ms", repo.Options{})
	if !errors.Is(err, service.ErrUnavailable) {
		t.Fatalf("Open on a closed port = %v; want an error wrapping service.ErrUnavailable", err)
	}
}

// Precheck reads the stock row and the key's order in one statement.
func TestPrecheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	if _, _, err := s.Precheck(ctx, "P", "b1", "k"); !errors.Is(err, service.ErrUnknownSKU) {
		t.Fatalf("Precheck of an unknown SKU = %v; want ErrUnknownSKU", err)
	}
	if _, err := s.SetStock(ctx, "P", service.StockSetting{Available: 4}); err != nil {
		t.Fatal(err)
	}
	st, o, err := s.Precheck(ctx, "P", "b1", "k")
	if err != nil || o != nil || st.Available != 4 {
		t.Fatalf("Precheck before the order = %+v, %v, %v; want available 4, no order", st, o, err)
	}
	placed, err := s.Deduct(ctx, service.Deduction{Buyer: "b1", Key: "k", RequestHash: "h", SKU: "P", Quantity: 3, Write: service.WriteConditional})
	if err != nil {
		t.Fatal(err)
	}
	st, o, err = s.Precheck(ctx, "P", "b1", "k")
	if err != nil || o == nil || st.Available != 1 {
		t.Fatalf("Precheck after the order = %+v, %v, %v", st, o, err)
	}
	if o.ID != placed.ID || o.SKU != "P" || o.Quantity != 3 || o.RequestHash != "h" || o.Key != "k" || !o.CreatedAt.Equal(placed.CreatedAt) {
		t.Fatalf("Precheck order = %+v; want %+v", *o, placed)
	}
}

// Buyer ids match byte for byte in every read by buyer: "alice " (a padded
// id, which a PAD SPACE collation would take for "alice") finds none of
// alice's orders, and the column itself compares exactly.
func TestBuyerMatchesExactly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, dsn := newStoreDSN(t)
	mustSet(t, s, "EX", 10, 0)
	if _, err := s.Deduct(ctx, deduction("EX", "alice", "k1", service.WriteConditional)); err != nil {
		t.Fatal(err)
	}
	for _, other := range []string{"alice ", "alice  ", "ALICE"} {
		if o, err := s.OrderByKey(ctx, other, "k1"); !errors.Is(err, service.ErrOrderNotFound) {
			t.Errorf("OrderByKey(%q, k1) = %+v, %v; want ErrOrderNotFound", other, o, err)
		}
		if os, err := s.Orders(ctx, other, service.OrderFilter{Limit: 10}); err != nil || len(os) != 0 {
			t.Errorf("Orders(%q) = %+v, %v; want none", other, os, err)
		}
		if _, prev, err := s.Precheck(ctx, "EX", other, "k1"); err != nil || prev != nil {
			t.Errorf("Precheck(EX, %q, k1) = %+v, %v; want no order", other, prev, err)
		}
		if taken, err := s.KeysTaken(ctx, []service.BuyerKey{{Buyer: other, Key: "k1"}}); err != nil || taken[0] {
			t.Errorf("KeysTaken(%q, k1) = %v, %v; want false", other, taken, err)
		}
		var n int
		if err := sqlDB(t, dsn).QueryRowContext(ctx, "SELECT COUNT(*) FROM orders WHERE buyer = ?", other).Scan(&n); err != nil || n != 0 {
			t.Errorf("orders WHERE buyer = %q: %d, %v; want 0 (the column compares byte for byte)", other, n, err)
		}
	}
	if o, err := s.OrderByKey(ctx, "alice", "k1"); err != nil || o.Buyer != "alice" {
		t.Fatalf("OrderByKey(alice, k1) = %+v, %v; want alice's order", o, err)
	}
}
