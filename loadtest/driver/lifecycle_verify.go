package driver

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"strings"
)

// lifeRows is the SKU as MySQL's rows show it after a lifecycle run.
type lifeRows struct {
	available, reserved, sold, stocked int64
	status                             map[int64]string // by order id
	units                              map[string]int64 // by status
	badReturns, returnRows, returned   int64
	overLimit                          int64
}

// read reads the SKU's stock row, orders and return rows in one snapshot.
func (l *lifeRun) read(ctx context.Context, db *mysqlCheck) (*lifeRows, error) {
	tx, err := db.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	rows := &lifeRows{status: map[int64]string{}, units: map[string]int64{}}
	if err := tx.QueryRowContext(ctx, "SELECT available, reserved, sold, stocked FROM stock WHERE sku = ?", l.sku).
		Scan(&rows.available, &rows.reserved, &rows.sold, &rows.stocked); err != nil {
		return nil, err
	}
	if err := l.readOrders(ctx, tx, rows); err != nil {
		return nil, err
	}
	err = tx.QueryRowContext(ctx, `SELECT
		(SELECT COUNT(*) FROM orders o LEFT JOIN (SELECT order_id, COUNT(*) AS n, SUM(delta) AS d FROM stock_ledger
			WHERE sku = ? AND kind = 'return' GROUP BY order_id) r ON r.order_id = o.id WHERE o.sku = ? AND
			IF(o.status IN ('cancelled', 'expired'), r.n IS NULL OR r.n <> 1 OR r.d <> o.quantity, r.n IS NOT NULL)),
		(SELECT COUNT(*) FROM stock_ledger WHERE sku = ? AND kind = 'return'),
		(SELECT COALESCE(SUM(delta), 0) FROM stock_ledger WHERE sku = ? AND kind = 'return'),
		(SELECT COUNT(*) FROM (SELECT buyer FROM orders WHERE sku = ? AND status IN ('reserved', 'confirmed')
			GROUP BY buyer HAVING ? > 0 AND SUM(quantity) > ?) h)`,
		l.sku, l.sku, l.sku, l.sku, l.sku, l.cfg.PerBuyerLimit, l.cfg.PerBuyerLimit).
		Scan(&rows.badReturns, &rows.returnRows, &rows.returned, &rows.overLimit)
	return rows, err
}

// readOrders fills rows' statuses and units per status from the orders.
func (l *lifeRun) readOrders(ctx context.Context, tx *sql.Tx, rows *lifeRows) error {
	q, err := tx.QueryContext(ctx, "SELECT id, status, quantity FROM orders WHERE sku = ?", l.sku)
	if err != nil {
		return err
	}
	defer func() { _ = q.Close() }()
	for q.Next() {
		var id, n int64
		var st string
		if err := q.Scan(&id, &st, &n); err != nil {
			return err
		}
		rows.status[id] = st
		rows.units[st] += n
	}
	return q.Err()
}

func (l *lifeRun) check(name string, ok, oversell bool, format string, args ...any) {
	c := Check{Name: name, OK: ok, Oversell: oversell, Liveness: !oversell}
	if !ok {
		c.Detail = fmt.Sprintf(format, args...)
	}
	l.res.Checks = append(l.res.Checks, c)
}

// verify proves the run from MySQL's rows: every unit in exactly one of
// available, reserved and confirmed, one return row per cancelled or
// expired order, no buyer over the limit, no reservation left, and every
// answer a client got agreeing with the final rows.
func (l *lifeRun) verify(ctx context.Context, db *mysqlCheck) error {
	rows, err := l.read(ctx, db)
	if err != nil {
		return fmt.Errorf("driver: lifecycle: read MySQL: %w", err)
	}
	res := l.res
	res.ByStatus, res.UnitsReturned, res.AvailableEnd = map[string]int64{}, rows.returned, rows.available
	for _, st := range rows.status {
		res.ByStatus[st]++
	}
	confirmed, reserved := rows.units["confirmed"], rows.units["reserved"]
	l.check("confirmed units <= stocked", confirmed <= rows.stocked, true, "%d confirmed units of %d stocked", confirmed, rows.stocked)
	l.check("available + reserved + sold == stocked", rows.available+rows.reserved+rows.sold == rows.stocked, true,
		"%d + %d + %d != %d", rows.available, rows.reserved, rows.sold, rows.stocked)
	l.check("the row's sold and reserved == the orders' units", rows.sold == confirmed && rows.reserved == reserved, true,
		"row sold %d, reserved %d; orders confirmed %d, reserved %d", rows.sold, rows.reserved, confirmed, reserved)
	l.check("one return row per cancelled or expired order, of its units", rows.badReturns == 0 &&
		rows.returnRows == res.ByStatus["cancelled"]+res.ByStatus["expired"], true,
		"%d orders without exactly their return row; %d return rows", rows.badReturns, rows.returnRows)
	l.check("no buyer over the per-buyer limit", rows.overLimit == 0, true, "%d buyers over %d", rows.overLimit, l.cfg.PerBuyerLimit)
	l.check("no reservation left past its deadline", res.ByStatus["reserved"] == 0, false,
		"%d orders still reserved", res.ByStatus["reserved"])
	l.checkAnswers(rows)
	a, err := l.r.audit(ctx)
	if err != nil {
		return err
	}
	l.check("audit consistent", a.Consistent, true, "%s", strings.Join(a.Problems, "; "))
	res.OrdersPerSec = float64(res.Orders) / res.Seconds
	res.ConfirmsPerSec = float64(res.Confirms) / res.Seconds
	res.OrderP50, res.OrderP99 = latencyMs(l.lat, 0.5), latencyMs(l.lat, 0.99)
	res.Passed = true
	caught := false
	for _, c := range res.Checks {
		caught = caught || !c.OK && c.Oversell
		res.Passed = res.Passed && c.OK
	}
	if l.cfg.ExpectOversell {
		res.Passed = caught
	}
	l.logf("%s: %d buyers, %d orders, %d confirms, %d cancels, %d late confirms, %d units returned, by status %v, passed=%v",
		res.Label, res.Buyers, res.Orders, res.Confirms, res.Cancels, res.LateConfirms, res.UnitsReturned, res.ByStatus, res.Passed)
	return nil
}

// checkAnswers checks every answer against the final rows: an order
// acknowledged exists, a 200 confirm or cancel is that status now, a 409
// order-<status> names the status it ended in.
func (l *lifeRun) checkAnswers(rows *lifeRows) {
	bad, n := 0, 0
	first := ""
	for id, as := range l.answers {
		final, ok := rows.status[id]
		for _, a := range as {
			n++
			agrees := ok && (a.code == http.StatusOK && (a.op == "order" || a.kind == final) ||
				a.code == http.StatusCreated || a.code == http.StatusConflict && a.kind == "order-"+final)
			if !agrees {
				bad++
				if first == "" {
					first = fmt.Sprintf("order %d ended %q, %s answered %d %s", id, final, a.op, a.code, a.kind)
				}
			}
		}
	}
	l.check("every answer agrees with the final rows", bad == 0, true, "%d of %d answers did not (first: %s)", bad, n, first)
}
