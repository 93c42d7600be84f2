package repo

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/seckill/stock/internal/service"
)

// writeMulti is the multi-statement writer: the stock read (and the
// unchecked keys if readKeys), then START TRANSACTION, the INSERTs of
// orders and ledger, the versioned UPDATE and the events' INSERT as one
// multi-statement (ledger and event rows naming their orders from the
// orders' first id, kept in @first_order), then COMMIT: three round trips under the lock
// (a fourth only to rewrite deadlines a lock wait left behind).
// It runs on s.multi, whose queries are all built here from constant SQL
// and driver-escaped arguments. A SKU with a per-buyer limit or a payment
// window (whose orders are counted per buyer, item by item) goes to the
// transaction writer with the row read here. Why: docs/decisions/0004.
func (s *Store) writeMulti(ctx context.Context, b *service.Batch, readKeys bool) ([]service.Order, []error, error) {
	conn, err := s.multi.Conn(ctx)
	if err != nil {
		return nil, nil, translate(ctx, "deduct batch", err)
	}
	defer func() { _ = conn.Close() }()
	cur, err := readStockRow(ctx, conn, b.SKU)
	if err != nil {
		return nil, nil, err
	}
	if s.afterStockRead != nil {
		s.afterStockRead()
	}
	if err := cur.saleRefusal(); err != nil {
		return nil, nil, err
	}
	b.TakeJoined()
	if cur.PerBuyerLimit > 0 || cur.PaymentWindowSeconds > 0 { // upserts per item: takeForBuyer
		_ = conn.Close() // not held beside the transaction's connection
		return s.writeTx(ctx, b, readKeys, &cur)
	}
	var ids map[service.BuyerKey]int64
	if readKeys {
		if ids, err = orderIDsOfKeys(ctx, conn, uncheckedKeys(b.Items)); err != nil {
			return nil, nil, err
		}
	}
	plan, _ := service.PlanBatch(cur.batchRow(), b.Items, hasKey(ids), nil) // no allow: no error
	orders := make([]service.Order, len(b.Items))
	if plan.Total == 0 {
		return orders, plan.Errs, nil
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	rows := orderRows(*b, plan, cur, now)
	first, err := s.commitMulti(ctx, conn, *b, rows, cur, plan.Total, now)
	if err != nil {
		return nil, nil, err
	}
	for j, i := range plan.Placed {
		rows[j].ID = first + int64(j)
		orders[i] = rows[j].order()
	}
	return orders, plan.Errs, nil
}

// readStockRow reads the SKU's stock row on conn, or returns
// service.ErrUnknownSKU.
func readStockRow(ctx context.Context, conn *sql.Conn, sku string) (stockModel, error) {
	cur := stockModel{sent: time.Now()}
	err := conn.QueryRowContext(ctx, "SELECT available, version, per_buyer_limit, payment_window_seconds, restock_seq, "+
		"sale_starts_at, sale_ends_at, max_unpaid_per_buyer, UTC_TIMESTAMP(6) FROM stock WHERE sku = ?", sku).
		Scan(&cur.Available, &cur.Version, &cur.PerBuyerLimit, &cur.PaymentWindowSeconds, &cur.RestockSeq,
			&cur.SaleStartsAt, &cur.SaleEndsAt, &cur.MaxUnpaidPerBuyer, &cur.DBNow)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return cur, service.ErrUnknownSKU
	case err != nil:
		return cur, translate(ctx, "read stock", err)
	}
	return cur, nil
}

// commitMulti sends rows' multi-statement on conn, runs b.BeforeCommit and
// commits. It returns the first order's id (the rest follow it), or
// errKeyRace, service.ErrConflict, BeforeCommit's error or one wrapping
// service.ErrUnavailable, with the transaction rolled back.
func (s *Store) commitMulti(ctx context.Context, conn *sql.Conn, b service.Batch, rows []orderModel, cur stockModel, total int64, now time.Time) (int64, error) {
	q, args, err := batchStatements(b.SKU, rows, cur, total, now)
	if err != nil {
		return 0, err
	}
	// From START TRANSACTION to COMMIT, any way out (an error, a panic in
	// BeforeCommit) rolls back: the connection never goes back to the pool
	// inside the batch's transaction.
	open := true
	defer func() {
		if open {
			rollback(ctx, conn)
		}
	}()
	res, err := execMulti(ctx, conn, q, args)
	if isDupEntry(err) {
		return 0, errKeyRace
	}
	if err != nil {
		return 0, translate(ctx, "write batch", err)
	}
	ids, affected := res.AllLastInsertIds(), res.AllRowsAffected()
	switch {
	case len(ids) != len(batchParts) || len(affected) != len(batchParts) || affected[batchOrders] != int64(len(rows)):
		return 0, translate(ctx, "write batch", fmt.Errorf("repo: the batch's statements answered ids %v, rows %v", ids, affected))
	case affected[batchUpdate] == 0: // the events' rows, numbered from missedSeq, go with the rollback
		return 0, service.ErrConflict
	}
	for j := range rows {
		rows[j].ID = ids[batchOrders] + int64(j)
	}
	exec := func(q string, args ...any) error { _, err := conn.ExecContext(ctx, q, args...); return err }
	if err := settleRows(exec, cur, rows); err != nil {
		return 0, translate(ctx, "settle deadlines", err)
	}
	if b.BeforeCommit != nil {
		if err := b.BeforeCommit(); err != nil {
			return 0, err
		}
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return 0, translate(ctx, "commit", err)
	}
	open = false
	return ids[batchOrders], nil
}

// execMulti sends a multi-statement to the driver itself, whose result
// gives each statement's ids and rows.
func execMulti(ctx context.Context, conn *sql.Conn, q string, args []driver.NamedValue) (mysql.Result, error) {
	var res mysql.Result
	err := conn.Raw(func(dc any) error {
		r, err := dc.(driver.ExecerContext).ExecContext(ctx, q, args)
		if err != nil {
			return err
		}
		var ok bool
		if res, ok = r.(mysql.Result); !ok {
			return fmt.Errorf("repo: the driver's result %T gives no per-statement results", r)
		}
		return nil
	})
	return res, err
}

// The statements of batchStatements, in order, and the indexes of those
// whose results commitMulti reads.
var batchParts = []string{"START TRANSACTION", "orders", "SET @first_order", "ledger", "DO LAST_INSERT_ID", "UPDATE stock", "events"}

const (
	batchOrders = 1
	batchUpdate = 5
)

// missedSeq is what LAST_INSERT_ID() holds for the events' INSERT when the
// versioned UPDATE matched no row (it numbers them only when it matches):
// far above any SKU's event_seq, so the events of a batch that rolls back
// are numbered without an overflow or a clash.
const missedSeq = "4611686018427387904"

// batchStatements is the batch's multi-statement (batchParts): START
// TRANSACTION, the orders' INSERT, @first_order = its first id, the
// ledger's INSERT, LAST_INSERT_ID() = missedSeq, the versioned UPDATE by total (reserved or sold, as
// cur's payment window says) numbering the events, and the events' INSERT.
func batchStatements(sku string, rows []orderModel, cur stockModel, total int64, now time.Time) (string, []driver.NamedValue, error) {
	insert, values := ordersInsert(rows)
	var q strings.Builder
	q.Grow(len(insert) + len(rows)*100 + 500)
	q.WriteString("START TRANSACTION; ")
	q.WriteString(insert)
	q.WriteString("; SET @first_order = LAST_INSERT_ID(); INSERT INTO stock_ledger (sku, kind, delta, order_id, created_at) VALUES ")
	for i, r := range rows {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(?, '" + kindSale + "', ?, @first_order + ")
		q.WriteString(strconv.Itoa(i))
		q.WriteString(", ?)")
		values = append(values, sku, -int64(r.Quantity), now)
	}
	q.WriteString("; DO LAST_INSERT_ID(" + missedSeq + "); UPDATE stock SET available = available - ?, sold = sold + ?, reserved = reserved + ?, version = version + 1, " +
		"event_seq = LAST_INSERT_ID(event_seq + ?), updated_at = ? WHERE sku = ? AND version = ? AND available >= ?; ")
	sold, reserved := total, int64(0)
	if cur.PaymentWindowSeconds > 0 {
		sold, reserved = 0, total
	}
	values = append(values, total, sold, reserved, len(rows), now, sku, cur.Version, total)
	events, evArgs := eventsInsert(sku, placedEvents(rows), now, "@first_order")
	q.WriteString(events)
	values = append(values, evArgs...)
	// Sent to the driver itself (conn.Raw), past database/sql's conversion
	// of arguments: the same conversion here (an int, a *int64).
	args := make([]driver.NamedValue, len(values))
	for i, v := range values {
		dv, err := driver.DefaultParameterConverter.ConvertValue(v)
		if err != nil {
			return "", nil, fmt.Errorf("repo: argument %d of the batch: %w", i+1, err)
		}
		args[i] = driver.NamedValue{Ordinal: i + 1, Value: dv}
	}
	return q.String(), args, nil
}

// rollback ends the connection's transaction; a connection that cannot is
// dropped from the pool rather than handed on mid-transaction.
func rollback(ctx context.Context, conn *sql.Conn) {
	if _, err := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
}
