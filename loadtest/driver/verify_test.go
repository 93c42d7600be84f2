package driver

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"testing"

	"github.com/seckill/stock/client"
	"github.com/seckill/stock/internal/repo"
	"github.com/seckill/stock/internal/testserver"
)

// mysqlRig is a migrated database of its own with one SKU, and the driver's
// MySQL check on it with its baseline taken.
type mysqlRig struct {
	t     *testing.T
	db    *sql.DB
	check *mysqlCheck
	sku   string
	runID string
}

func newMySQLRig(t *testing.T, stock, soldBefore int64) *mysqlRig {
	t.Helper()
	ctx := context.Background()
	dsn := testserver.Database(t)
	st, err := repo.Open(ctx, dsn, repo.Options{})
	if err != nil {
		t.Fatalf("repo.Open: %v", err)
	}
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	_ = st.Close()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("open %s: %v", dsn, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	r := &mysqlRig{t: t, db: db, sku: "SKU-V", runID: "run1"}
	r.exec("INSERT INTO stock (sku, available, sold, stocked, updated_at) VALUES (?, ?, ?, ?, NOW(6))",
		r.sku, stock, soldBefore, stock+soldBefore)
	if r.check, err = openMySQL(ctx, dsn); err != nil {
		t.Fatalf("openMySQL: %v", err)
	}
	t.Cleanup(r.check.close)
	if err := r.check.baseline(ctx, r.sku); err != nil {
		t.Fatalf("baseline: %v", err)
	}
	return r
}

func (r *mysqlRig) exec(query string, args ...any) sql.Result {
	r.t.Helper()
	res, err := r.db.ExecContext(context.Background(), query, args...)
	if err != nil {
		r.t.Fatalf("%s %v: %v", query, args, err)
	}
	return res
}

// sell places an order of q units under key the way the service does: the
// stock row, the order and its ledger entry. It returns the order id.
func (r *mysqlRig) sell(buyerSub, key string, q int) int64 {
	r.t.Helper()
	r.exec("UPDATE stock SET available = available - ?, sold = sold + ? WHERE sku = ?", q, q, r.sku)
	return r.order(buyerSub, key, q)
}

// order adds an order of q units and its ledger entry, leaving the stock row.
func (r *mysqlRig) order(buyerSub, key string, q int) int64 {
	r.t.Helper()
	res := r.exec("INSERT INTO orders (buyer, idempotency_key, request_hash, sku, quantity, created_at) VALUES (?, ?, '', ?, ?, NOW(6))",
		buyerSub, key, r.sku, q)
	id, err := res.LastInsertId()
	if err != nil {
		r.t.Fatalf("LastInsertId: %v", err)
	}
	r.exec("INSERT INTO stock_ledger (sku, kind, delta, order_id, created_at) VALUES (?, 'sale', ?, ?, NOW(6))", r.sku, -q, id)
	return id
}

func (r *mysqlRig) ack(buyer int, id int64, q int) ack {
	return ack{buyer: buyer, status: 201, order: client.Order{ID: id, Key: keyOf(r.runID, buyer), SKU: r.sku, Quantity: q}}
}

func (r *mysqlRig) verify(cfg Config, acks []ack, buyers []buyer) (*Result, *MySQLState) {
	r.t.Helper()
	res := &Result{SKU: r.sku, RunID: r.runID}
	st, err := r.check.verify(context.Background(), res, cfg, r.runID, acks, buyers)
	if err != nil {
		r.t.Fatalf("verify: %v", err)
	}
	return res, st
}

func failedChecks(res *Result) []string {
	var names []string
	for _, c := range res.Checks {
		if !c.OK {
			names = append(names, c.Name)
		}
	}
	return names
}

func TestMySQLVerifyCleanRun(t *testing.T) {
	const q = 2
	// 4 units sold before this run (the baseline), in orders of another run.
	r := newMySQLRig(t, 10, 4)
	r.order("u-old", "other-1", q)
	r.order("u-old", "other-2", q)
	var acks []ack
	buyers := make([]buyer, 4)
	for i := range 3 {
		id := r.sell(fmt.Sprint("u-", i), keyOf(r.runID, i), q)
		acks = append(acks, r.ack(i, id, q))
		buyers[i].answered = true
	}
	// Buyer 3's order landed but its last try got no answer: unacknowledged,
	// and explained.
	r.sell("u-3", keyOf(r.runID, 3), q)
	cfg := Config{Stock: 10, Buyers: 4, Quantity: q}

	res, st := r.verify(cfg, acks, buyers)
	if f := failedChecks(res); len(f) != 0 {
		t.Errorf("verify of a clean run failed %q; checks %+v", f, res.Checks)
	}
	if len(res.Checks) != 8 {
		t.Errorf("verify made %d checks; want 8: %+v", len(res.Checks), res.Checks)
	}
	want := MySQLState{Available: 2, Sold: 8, Stocked: 14, Orders: 4, Units: 8, LedgerSold: 12, SKUUnits: 12, Unacknowledged: 1}
	got := *st
	got.Version = ""
	if got != want {
		t.Errorf("verify state = %+v; want %+v", got, want)
	}
	if st.Version == "" {
		t.Errorf("verify state has no server version")
	}
}

func TestMySQLVerifyFindsEachFault(t *testing.T) {
	const q = 1
	r := newMySQLRig(t, 10, 0) // the run's stock (cfg.Stock) is 3: 10 lets it oversell
	buyers := make([]buyer, 6)
	for i := range buyers {
		buyers[i].answered = true
	}
	id0 := r.sell("u-0", keyOf(r.runID, 0), q)
	id1 := r.sell("u-1", keyOf(r.runID, 1), q)
	// Two orders under buyer 2's key (keys are unique per buyer only), one
	// of another quantity; and an order buyer 3 was never told of although
	// it got its answer.
	r.sell("u-2", keyOf(r.runID, 2), q)
	r.sell("u-2b", keyOf(r.runID, 2), 2)
	r.sell("u-3", keyOf(r.runID, 3), q)
	acks := []ack{
		r.ack(0, id0, q),
		r.ack(1, id1+1000, q), // told another id than MySQL has
		r.ack(4, 4242, q),     // told of an order MySQL does not have
	}
	cfg := Config{Stock: 3, Buyers: len(buyers), Quantity: q}

	res, st := r.verify(cfg, acks, buyers)
	got := failedChecks(res)
	want := []string{
		"mysql: available == stock - sold",
		"mysql: units in this run's orders <= stock",
		"mysql: every acknowledged order is exactly one row with its id and key",
		"mysql: no key has two orders",
		"mysql: every order was acknowledged or its buyer got no final answer",
		"mysql: every order of this run has its sku and quantity",
	}
	if !slices.Equal(got, want) {
		t.Errorf("verify failed checks\n%q\nwant\n%q\n(checks %+v)", got, want, res.Checks)
	}
	if st.Oversold != 3 || st.LostUpdates != 0 || st.Unacknowledged != 2 || st.Orders != 5 || st.Units != 6 {
		t.Errorf("verify state = %+v; want oversold 3, lost updates 0, unacknowledged 2, orders 5, units 6", *st)
	}
}
