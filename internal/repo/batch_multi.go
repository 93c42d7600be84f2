package repo

import (
	"cmp"
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

// The batch in two round trips. deductBatchFast sends six statements on
// its transaction (BEGIN, the stock read, two INSERTs, the UPDATE, COMMIT),
// each a round trip paid while the SKU lock is held. deductBatchMulti sends
// the same work as:
//
//  1. the stock read, on its own (the versioned UPDATE checks later that the
//     row has not moved since); with byIndex false, with the read of the
//     unchecked keys as a second statement of the same query (with byIndex
//     true the unique index checks them: see DeductBatch);
//  2. after b.BeforeCommit (the lock's check), one multi-statement that
//     writes and commits: START TRANSACTION, the versioned UPDATE, a
//     tripwire that stops the rest when the UPDATE matched no row, the
//     orders' INSERT, the ledger's INSERT (its order ids are
//     LAST_INSERT_ID() + i: the server numbers one statement's rows
//     consecutively, see Store.consecutiveIDs) and COMMIT. A statement that
//     fails stops the ones after it, and the transaction is rolled back.
//
// It runs on a pool of its own whose connections allow several statements
// per query (the driver's multiStatements): every query sent on it is built
// here from constant SQL and driver-escaped arguments. A batch with a
// per-buyer limit (an upsert per order), or on a server that does not number
// a statement's rows consecutively, takes deductBatchFast (for the limit,
// with the stock row read here, and its keys read before any limit is
// counted, so that a replay is answered as one).
func (s *Store) deductBatchMulti(ctx context.Context, b service.Batch, byIndex bool) ([]service.Order, []error, error) {
	conn, err := s.multi.Conn(ctx)
	if err != nil {
		return nil, nil, translate(ctx, "deduct batch", err)
	}
	defer func() { _ = conn.Close() }()

	cur, taken, err := readStockAndKeys(ctx, conn, b, !byIndex)
	switch {
	case err != nil:
		return nil, nil, err
	case cur.PerBuyerLimit > 0: // an upsert per order: the gorm transaction, with the stock read here
		_ = conn.Close() // not held beside the transaction's connection
		read := &keyRead{ctx: ctx, taken: taken}
		if byIndex {
			// A replay must be answered as one before its limit is
			// counted: the keys are read first here.
			if read, err = s.takenKeys(ctx, b.Items); err != nil {
				return nil, nil, err
			}
			defer read.done()
		}
		return s.deductBatchRead(ctx, b, read, &cur)
	}
	if s.afterStockRead != nil {
		s.afterStockRead()
	}
	errs := make([]error, len(b.Items))
	now := time.Now().UTC().Truncate(time.Microsecond)
	rows, placed, total, _ := fillBatch(b, cur, taken, now, errs, func(service.BatchItem) error { return nil })
	orders := make([]service.Order, len(b.Items))
	if total == 0 {
		return orders, errs, nil
	}

	q, args, err := batchStatements(b.SKU, rows, cur.Version, total, now)
	if err != nil {
		return nil, nil, err
	}
	// The statement that writes also commits, so the lock's check comes
	// before it: the hold is still ours as the batch is sent.
	if b.BeforeCommit != nil {
		if err := b.BeforeCommit(); err != nil {
			return nil, nil, err
		}
	}
	// From START TRANSACTION to COMMIT, any way out (an error, a statement
	// that stops the rest) rolls back: the connection never goes back to
	// the pool inside the batch's transaction.
	open := true
	defer func() {
		if open {
			rollback(ctx, conn)
		}
	}()
	var res mysql.Result
	err = conn.Raw(func(dc any) error {
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
	switch {
	case isServerError(err, errSubqueryRows): // the tripwire: the UPDATE matched no row
		return nil, nil, service.ErrConflict
	case isDupEntry(err):
		return nil, nil, errKeyRace
	case err != nil:
		return nil, nil, translate(ctx, "write batch", err)
	}
	open = false // committed
	ids, affected := res.AllLastInsertIds(), res.AllRowsAffected()
	if len(ids) != batchStatementCount || len(affected) != batchStatementCount || affected[1] != 1 || affected[3] != int64(len(rows)) {
		// Committed, yet not as built: the caller cannot tell which orders
		// were placed, so the batch answers as unavailable (the audit sees
		// what was written).
		return nil, nil, translate(ctx, "write batch", fmt.Errorf("repo: the batch's statements answered ids %v, rows %v", ids, affected))
	}
	for j, i := range placed {
		rows[j].ID = ids[3] + int64(j)
		orders[i] = rows[j].order()
	}
	return orders, errs, nil
}

// readStockAndKeys reads the stock row and, with keys, which of the batch's
// unchecked keys (BatchItem.KeyChecked) have an order, in one query of two
// statements: one round trip, on the batch's own connection.
func readStockAndKeys(ctx context.Context, conn *sql.Conn, b service.Batch, keys bool) (stockModel, map[service.BuyerKey]bool, error) {
	var q strings.Builder
	args := []any{b.SKU}
	q.WriteString("SELECT available, version, per_buyer_limit FROM stock WHERE sku = ?")
	for _, it := range b.Items {
		if !keys || it.KeyChecked {
			continue
		}
		if len(args) == 1 { // the same row-constructor IN as ordersOfKeys
			q.WriteString("; SELECT buyer, idempotency_key FROM orders WHERE (buyer, idempotency_key) IN (")
		} else {
			q.WriteString(", ")
		}
		q.WriteString("(?, ?)")
		args = append(args, it.Buyer, it.Key)
	}
	keyRead := len(args) > 1
	if keyRead {
		q.WriteString(")")
	}
	var cur stockModel
	taken := map[service.BuyerKey]bool{}
	rows, err := conn.QueryContext(ctx, q.String(), args...)
	if err != nil {
		return cur, nil, translate(ctx, "read stock", err)
	}
	defer func() { _ = rows.Close() }()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return cur, nil, translate(ctx, "read stock", err)
		}
		return cur, nil, service.ErrUnknownSKU
	}
	if err := rows.Scan(&cur.Available, &cur.Version, &cur.PerBuyerLimit); err != nil {
		return cur, nil, translate(ctx, "read stock", err)
	}
	if keyRead {
		if !rows.NextResultSet() {
			return cur, nil, translate(ctx, "read keys", cmp.Or(rows.Err(), errors.New("repo: no result for the key read")))
		}
		for rows.Next() {
			var k service.BuyerKey
			if err := rows.Scan(&k.Buyer, &k.Key); err != nil {
				return cur, nil, translate(ctx, "read keys", err)
			}
			taken[k] = true
		}
	}
	if err := rows.Err(); err != nil {
		return cur, nil, translate(ctx, "read keys", err)
	}
	return cur, taken, nil
}

// batchStatements is the batch's multi-statement, which writes and
// commits: START TRANSACTION; the versioned UPDATE by total; the tripwire,
// a SELECT whose subquery returns two rows, and so fails with error 1242
// and stops the statements after it, when the UPDATE changed no row (the
// row moved since the read: the lock failed); the orders' INSERT; the
// ledger's INSERT numbered from LAST_INSERT_ID() (the orders' first id);
// COMMIT. The UPDATE first also takes the stock row's lock for the rest of
// the transaction.
func batchStatements(sku string, rows []orderModel, version, total int64, now time.Time) (string, []driver.NamedValue, error) {
	insert, orderValues := ordersInsert(rows)
	var q strings.Builder
	q.Grow(len(insert) + len(rows)*40 + 400)
	q.WriteString("START TRANSACTION; UPDATE stock SET available = available - ?, sold = sold + ?, version = version + 1, updated_at = ? WHERE sku = ? AND version = ? AND available >= ?; ")
	values := append(make([]any, 0, 6+len(orderValues)+3*len(rows)), total, total, now, sku, version, total)
	q.WriteString(tripwire)
	q.WriteString("; ")
	q.WriteString(insert)
	values = append(values, orderValues...)
	q.WriteString("; INSERT INTO stock_ledger (sku, kind, delta, order_id, created_at) VALUES ")
	for i, r := range rows {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(?, '" + kindSale + "', ?, LAST_INSERT_ID() + ")
		q.WriteString(strconv.Itoa(i))
		q.WriteString(", ?)")
		values = append(values, sku, -int64(r.Quantity), now)
	}
	q.WriteString("; COMMIT")
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

// tripwire fails (error 1242, "Subquery returns more than 1 row") when the
// statement before it changed no row, and so stops a multi-statement there.
// A SELECT, not a DO: MariaDB's DO drops the subquery's error.
const tripwire = "SELECT (SELECT 1 UNION ALL SELECT 1 FROM DUAL WHERE ROW_COUNT() <> 1)"

// errSubqueryRows is the server's error number when the tripwire fails.
const errSubqueryRows = 1242

// batchStatementCount is the number of statements batchStatements sends.
const batchStatementCount = 6

// rollback ends the connection's transaction; a connection that cannot is
// dropped from the pool rather than handed on mid-transaction.
func rollback(ctx context.Context, conn *sql.Conn) {
	if _, err := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
}
