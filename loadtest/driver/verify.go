package driver

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	_ "github.com/go-sql-driver/mysql" // database/sql driver
)

func (res *Result) check(name string, ok, oversell bool, format string, args ...any) {
	res.checkKind(name, ok, oversell, false, format, args...)
}

func (res *Result) checkKind(name string, ok, oversell, liveness bool, format string, args ...any) {
	c := Check{Name: name, OK: ok, Oversell: oversell, Liveness: liveness}
	if !ok || format != "" {
		c.Detail = fmt.Sprintf(format, args...)
	}
	res.Checks = append(res.Checks, c)
}

// verify checks the invariants that the audit and the buyers' answers prove.
func verify(res *Result, cfg Config, before, after Audit, acks []ack) {
	res.Sold = after.Sold - before.Sold
	res.Orders = after.Orders - before.Orders
	res.Units = after.OrderedQuantity - before.OrderedQuantity
	res.Oversold = max(after.Oversold, res.Units-cfg.Stock, 0)
	res.BuyersOverLimit = after.BuyersOverLimit
	res.LostUpdates = max(res.Units-res.Sold, 0)
	q := int64(cfg.Quantity)
	// A buyer the rate limit refused to the end asked too often: policy, not
	// demand the service failed to serve.
	demand, refused := cfg.demand(), ""
	if res.RateLimitedBuyers > 0 {
		demand -= int64(res.RateLimitedBuyers)
		res.ExpectedOrders = min(cfg.Sellable(), demand)
		res.ExpectedSold = res.ExpectedOrders * q
		refused = fmt.Sprintf(" (%d buyers - %d refused by the rate limit at their last try)", cfg.Buyers, res.RateLimitedBuyers)
	}

	res.check("audit consistent", after.Consistent, true, "%s", strings.Join(after.Problems, "; "))
	res.check("oversold == 0", res.Oversold == 0, true, "oversold %d units (audit %d; %d units ordered this run for a stock of %d)",
		res.Oversold, after.Oversold, res.Units, cfg.Stock)
	// Too few orders placed is liveness (buyers gave up after their retries);
	// anything else that breaks it (more sold, or lost updates) is an oversell.
	short := res.Units < res.ExpectedSold
	res.checkKind("sold == min(stock, demand)", res.Sold == res.ExpectedSold, !short, short,
		"sold %d this run, want %d = min(floor(%d/%d), %d%s) x %d", res.Sold, res.ExpectedSold, cfg.Stock, q, demand, refused, q)
	if cfg.PerBuyerLimit > 0 {
		res.check("no buyer over the per-buyer limit", after.BuyersOverLimit == 0, true,
			"%d buyers hold more than the limit of %d (the most: %d)", after.BuyersOverLimit, cfg.PerBuyerLimit, after.MaxBuyerHolds)
	}
	res.check("available == stock - sold", after.Available == cfg.Stock-res.Sold, true,
		"available %d, want %d - %d = %d", after.Available, cfg.Stock, res.Sold, cfg.Stock-res.Sold)
	res.check("units in orders == sold", res.Units == res.Sold, true,
		"orders hold %d units this run, the stock row sold %d (%d lost updates)", res.Units, res.Sold, res.LostUpdates)
	res.check("201s <= sellable orders", int64(res.Created) <= cfg.Sellable(), true,
		"%d buyers saw 201, the stock fills %d orders", res.Created, cfg.Sellable())
	res.check("orders == units / quantity", res.Orders*q == res.Units, false,
		"%d orders x %d != %d units", res.Orders, q, res.Units)
	res.check("orders <= buyers (one per key)", res.Orders <= int64(cfg.Buyers), false,
		"%d orders this run for %d buyers", res.Orders, cfg.Buyers)

	ids := map[int64]int{}
	bad, dupIDs := 0, 0
	for _, a := range acks {
		o := a.order
		if o.ID <= 0 || o.Key != keyOf(res.RunID, a.buyer) || o.SKU != res.SKU || o.Quantity != cfg.Quantity {
			bad++
		}
		if _, seen := ids[o.ID]; seen {
			dupIDs++
		}
		ids[o.ID] = a.buyer
	}
	res.BadEchoes = bad
	res.check("every 201/200 echoes its key, sku and quantity", bad == 0, false, "%d acknowledgements did not", bad)
	res.check("no two buyers told the same order id", dupIDs == 0, false, "%d duplicate order ids", dupIDs)
	res.check("acknowledged orders <= orders in the audit", int64(len(acks)) <= res.Orders, false,
		"%d buyers were told of an order, the audit has %d orders this run", len(acks), res.Orders)
	res.checkKind("run finished within the duration cap", !res.Aborted, false, true,
		"the %.0fs cap ended the run: %d of %d buyers ran", res.CapSeconds, res.BuyersRun, cfg.Buyers)
}

// decide sets OversellDetected and Passed from the checks.
func decide(res *Result) {
	res.OversellDetected = res.Oversold > 0 || res.LostUpdates > 0 || res.BuyersOverLimit > 0 ||
		res.MySQL != nil && (res.MySQL.Oversold > 0 || res.MySQL.LostUpdates > 0)
	if res.ExpectOversell {
		res.check("oversell detected (expected)", res.OversellDetected, false,
			"oversold %d, lost updates %d: the unsafe run looked safe", res.Oversold, res.LostUpdates)
	}
	res.Safe, res.Passed = true, true
	for _, c := range res.Checks {
		switch {
		case c.OK, res.ExpectOversell && c.Oversell:
		case c.Liveness:
			res.Passed = false
		default:
			res.Safe, res.Passed = false, false
		}
	}
}

// AddCheck records a check made outside the driver (say, by whoever started
// and stopped the instances) and updates Passed.
func (res *Result) AddCheck(name string, ok bool, detail string) {
	c := Check{Name: name, OK: ok}
	if !ok {
		c.Detail = detail
		res.Safe, res.Passed = false, false
	}
	res.Checks = append(res.Checks, c)
}

// Failed returns the checks that decide the run failed.
func (res *Result) Failed() []Check {
	var out []Check
	for _, c := range res.Checks {
		if !c.OK && !(res.ExpectOversell && c.Oversell) {
			out = append(out, c)
		}
	}
	return out
}

func keyOf(runID string, buyer int) string { return runID + "-" + strconv.Itoa(buyer) }

// MySQLState is what the driver read from MySQL itself after the run.
type MySQLState struct {
	Version        string `json:"version"`
	Available      int64  `json:"available"`
	Sold           int64  `json:"sold"` // this run, from the stock row
	Stocked        int64  `json:"stocked"`
	Orders         int64  `json:"orders"` // rows with this run's keys
	Units          int64  `json:"units"`
	LedgerSold     int64  `json:"ledger_sold"` // sale entries of the SKU, all runs
	SKUUnits       int64  `json:"sku_units"`   // units of every order of the SKU, all runs
	Unacknowledged int64  `json:"unacknowledged"`
	Oversold       int64  `json:"oversold"`
	LostUpdates    int64  `json:"lost_updates"`
}

type mysqlCheck struct {
	db    *sql.DB
	sold0 int64
}

func openMySQL(ctx context.Context, dsn string) (*mysqlCheck, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, fmt.Errorf("driver: mysql dsn: %w", err)
	}
	db.SetMaxOpenConns(2)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("driver: mysql: %w", err)
	}
	return &mysqlCheck{db: db}, nil
}

func (m *mysqlCheck) close() { _ = m.db.Close() }

func (m *mysqlCheck) baseline(ctx context.Context, sku string) error {
	err := m.db.QueryRowContext(ctx, "SELECT sold FROM stock WHERE sku = ?", sku).Scan(&m.sold0)
	if err != nil {
		return fmt.Errorf("driver: mysql: the stock row of %s after setup: %w (is -mysql-dsn the service's database?)", sku, err)
	}
	return nil
}

type orderRow struct {
	id       int64
	sku      string
	quantity int
}

// mysqlSnapshot is what one read-only transaction saw of the SKU and this
// run's orders.
type mysqlSnapshot struct {
	st      *MySQLState
	byKey   map[string][]orderRow // this run's orders by idempotency key
	dupKeys int64                 // keys of the SKU (any run) with more than one order
}

// verify reads the stock row, this run's orders and the ledger straight from
// MySQL and checks them against what the buyers were told.
func (m *mysqlCheck) verify(ctx context.Context, res *Result, cfg Config, runID string, acks []ack, buyers []buyer) (*MySQLState, error) {
	snap, err := m.read(ctx, res.SKU, runID)
	if err != nil {
		return nil, err
	}
	st := snap.st
	st.Oversold = max(st.Units-cfg.Stock, 0)
	st.LostUpdates = max(st.Units-st.Sold, 0)

	res.check("mysql: available == stock - sold", st.Available == cfg.Stock-st.Sold, true,
		"stock row: available %d, sold %d this run; want available %d", st.Available, st.Sold, cfg.Stock-st.Sold)
	res.check("mysql: units in this run's orders == sold", st.Units == st.Sold, true,
		"%d units in %d orders, the stock row sold %d", st.Units, st.Orders, st.Sold)
	res.check("mysql: units in this run's orders <= stock", st.Units <= cfg.Stock, true,
		"%d units ordered for a stock of %d", st.Units, cfg.Stock)
	acked := checkAcknowledged(res, cfg, runID, acks, snap.byKey)
	checkKeysUnique(res, snap)
	checkUnacknowledged(res, st, runID, buyers, snap.byKey, acked)
	checkOrderRows(res, cfg, snap.byKey)
	res.check("mysql: ledger sales == units in the sku's orders", st.LedgerSold == st.SKUUnits, false,
		"ledger sold %d, orders hold %d", st.LedgerSold, st.SKUUnits)
	return st, nil
}

// read takes the snapshot. One transaction serves every read: an aborted run
// can still have orders committing, and separate reads would disagree with
// each other.
func (m *mysqlCheck) read(ctx context.Context, sku, runID string) (*mysqlSnapshot, error) {
	tx, err := m.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("driver: mysql: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }() // read-only: nothing to commit
	st := &MySQLState{}
	_ = tx.QueryRowContext(ctx, "SELECT VERSION()").Scan(&st.Version) // for the report only
	if err := tx.QueryRowContext(ctx, "SELECT available, sold, stocked FROM stock WHERE sku = ?", sku).
		Scan(&st.Available, &st.Sold, &st.Stocked); err != nil {
		return nil, fmt.Errorf("driver: mysql: stock row: %w", err)
	}
	st.Sold -= m.sold0
	snap := &mysqlSnapshot{st: st}
	if snap.byKey, err = readOrders(ctx, tx, runID, st); err != nil {
		return nil, err
	}
	if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM (SELECT idempotency_key FROM orders WHERE sku = ? "+
		"GROUP BY idempotency_key HAVING COUNT(*) > 1) d", sku).Scan(&snap.dupKeys); err != nil {
		return nil, fmt.Errorf("driver: mysql: duplicate keys: %w", err)
	}
	if err := tx.QueryRowContext(ctx, "SELECT COALESCE(SUM(quantity), 0) FROM orders WHERE sku = ?", sku).Scan(&st.SKUUnits); err != nil {
		return nil, fmt.Errorf("driver: mysql: orders of the sku: %w", err)
	}
	if err := tx.QueryRowContext(ctx, "SELECT COALESCE(-SUM(delta), 0) FROM stock_ledger WHERE sku = ? AND kind = 'sale'", sku).
		Scan(&st.LedgerSold); err != nil {
		return nil, fmt.Errorf("driver: mysql: ledger: %w", err)
	}
	return snap, nil
}

// readOrders reads this run's orders by key, and counts them and their units
// in st. This run's keys are "<run id>-<buyer>"; the run id has no LIKE
// wildcards.
func readOrders(ctx context.Context, tx *sql.Tx, runID string, st *MySQLState) (map[string][]orderRow, error) {
	rows, err := tx.QueryContext(ctx, "SELECT id, idempotency_key, sku, quantity FROM orders WHERE idempotency_key LIKE ?", runID+"-%")
	if err != nil {
		return nil, fmt.Errorf("driver: mysql: orders: %w", err)
	}
	defer func() { _ = rows.Close() }() // rows.Err below reports what went wrong
	byKey := map[string][]orderRow{}
	for rows.Next() {
		var o orderRow
		var key string
		if err := rows.Scan(&o.id, &key, &o.sku, &o.quantity); err != nil {
			return nil, fmt.Errorf("driver: mysql: orders: %w", err)
		}
		byKey[key] = append(byKey[key], o)
		st.Orders++
		st.Units += int64(o.quantity)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("driver: mysql: orders: %w", err)
	}
	return byKey, nil
}

// checkAcknowledged checks that every order a buyer was told about is one
// row with the id, SKU and quantity it was told. It returns the keys told.
func checkAcknowledged(res *Result, cfg Config, runID string, acks []ack, byKey map[string][]orderRow) map[string]bool {
	missing, wrong := 0, 0
	acked := map[string]bool{}
	var example string
	for _, a := range acks {
		key := keyOf(runID, a.buyer)
		acked[key] = true
		rs := byKey[key]
		switch {
		case len(rs) == 0:
			missing++
			if example == "" {
				example = fmt.Sprintf("buyer %d was told order %d (key %s, status %d); MySQL has none", a.buyer, a.order.ID, key, a.status)
			}
		case len(rs) > 1 || rs[0].id != a.order.ID || rs[0].sku != res.SKU || rs[0].quantity != cfg.Quantity:
			wrong++
			if example == "" {
				example = fmt.Sprintf("buyer %d was told order %d (key %s); MySQL has %+v", a.buyer, a.order.ID, key, rs)
			}
		}
	}
	res.check("mysql: every acknowledged order is exactly one row with its id and key", missing == 0 && wrong == 0, false,
		"%d acknowledged orders missing, %d differ: %s", missing, wrong, example)
	return acked
}

// checkKeysUnique checks that no key has two orders, among the SKU's and
// among this run's.
func checkKeysUnique(res *Result, snap *mysqlSnapshot) {
	twice := 0
	for _, rs := range snap.byKey {
		if len(rs) > 1 {
			twice++
		}
	}
	res.check("mysql: no key has two orders", snap.dupKeys == 0 && twice == 0, false,
		"%d keys of the sku and %d of this run have more than one order", snap.dupKeys, twice)
}

// checkUnacknowledged counts the orders nobody was told about in st. Such an
// order is fine only if its buyer never got an answer to its last try (the
// reply was lost, or the cap cut it off).
func checkUnacknowledged(res *Result, st *MySQLState, runID string, buyers []buyer, byKey map[string][]orderRow, acked map[string]bool) {
	unexplained := 0
	example := ""
	for key, rs := range byKey {
		if acked[key] {
			continue
		}
		st.Unacknowledged++
		i, err := strconv.Atoi(strings.TrimPrefix(key, runID+"-"))
		if err != nil || i < 0 || i >= len(buyers) || buyers[i].answered {
			unexplained++
			if example == "" {
				last := "?"
				if err == nil && i >= 0 && i < len(buyers) {
					last = buyers[i].last
				}
				example = fmt.Sprintf("order %d (key %s) exists, its buyer's last answer was %s", rs[0].id, key, last)
			}
		}
	}
	res.check("mysql: every order was acknowledged or its buyer got no final answer", unexplained == 0, false,
		"%d unacknowledged orders (%d unexplained): %s", st.Unacknowledged, unexplained, example)
}

// checkOrderRows checks the SKU and quantity of every order of this run.
func checkOrderRows(res *Result, cfg Config, byKey map[string][]orderRow) {
	wrongQ := 0
	for _, rs := range byKey {
		for _, o := range rs {
			if o.quantity != cfg.Quantity || o.sku != res.SKU {
				wrongQ++
			}
		}
	}
	res.check("mysql: every order of this run has its sku and quantity", wrongQ == 0, false,
		"%d orders with another sku or quantity", wrongQ)
}

// LockingTransactions returns the ids of the InnoDB transactions holding
// row locks and not waiting for one, on connections to db's own database
// (the fault runs land a pause or a kill inside one; a transaction queued
// behind a row lock, or another database's, is not the one they look for).
func LockingTransactions(ctx context.Context, db *sql.DB) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT t.trx_id FROM information_schema.INNODB_TRX t
		JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id
		WHERE t.trx_rows_locked > 0 AND t.trx_state = 'RUNNING' AND p.DB = DATABASE()`)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
