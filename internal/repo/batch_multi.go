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

// The batch in three round trips. deductBatchFast sends six statements on
// its transaction (BEGIN, the stock read, two INSERTs, the UPDATE, COMMIT),
// each a round trip paid while the SKU lock is held. deductBatchMulti sends
// the same work as:
//
//  1. the stock read, on its own (the versioned UPDATE checks later that the
//     row has not moved since); with byIndex false, beside the read of the
//     unchecked keys (with byIndex true the unique index checks them: see
//     DeductBatch);
//  2. one multi-statement: START TRANSACTION, the orders' INSERT, the ledger's
//     INSERT (its order ids are LAST_INSERT_ID() + i: the server numbers one
//     statement's rows consecutively, see Store.consecutiveIDs) and the
//     versioned UPDATE;
//  3. COMMIT, or ROLLBACK when the UPDATE matched no row or BeforeCommit
//     failed.
//
// It runs on a pool of its own whose connections allow several statements
// per query (the driver's multiStatements): every query sent on it is built
// here from constant SQL and driver-escaped arguments. A batch with a
// per-buyer limit (an upsert per order), or on a server that does not number
// a statement's rows consecutively, takes deductBatchFast (for the limit,
// with the stock row read here, and its keys read before any limit is
// counted, so that a replay is answered as one).
func (s *Store) deductBatchMulti(ctx context.Context, b service.Batch, byIndex bool) ([]service.Order, []error, error) {
	// The key read (takenKeys) takes its connection before this batch's.
	// With byIndex nothing is read for a SKU without a per-buyer limit.
	read := &keyRead{ctx: ctx, taken: map[service.BuyerKey]bool{}}
	readKeys := func() (err error) {
		read, err = s.takenKeys(ctx, b.Items)
		return err
	}
	if !byIndex {
		if err := readKeys(); err != nil {
			return nil, nil, err
		}
	}
	defer func() { read.done() }()
	conn, err := s.multi.Conn(ctx)
	if err != nil {
		return nil, nil, translate(ctx, "deduct batch", err)
	}
	defer func() { _ = conn.Close() }()

	var cur stockModel
	err = conn.QueryRowContext(ctx, "SELECT available, version, per_buyer_limit, restock_seq FROM stock WHERE sku = ?", b.SKU).
		Scan(&cur.Available, &cur.Version, &cur.PerBuyerLimit, &cur.RestockSeq)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil, service.ErrUnknownSKU
	case err != nil:
		return nil, nil, translate(ctx, "read stock", err)
	case cur.PerBuyerLimit > 0: // an upsert per order: the gorm transaction, with the stock read here
		_ = conn.Close() // not held beside the transaction's connection
		if byIndex {
			// A replay must be answered as one before its limit is
			// counted: the keys are read first here.
			if err := readKeys(); err != nil {
				return nil, nil, err
			}
		}
		return s.deductBatchRead(ctx, b, read, &cur)
	}
	if s.afterStockRead != nil {
		s.afterStockRead()
	}
	taken, err := read.wait()
	if err != nil {
		return nil, nil, err
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
	// From START TRANSACTION to COMMIT, any way out (an error, a panic in
	// BeforeCommit) rolls back: the connection never goes back to the pool
	// inside the batch's transaction.
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
	if err != nil {
		if isDupEntry(err) {
			return nil, nil, errKeyRace
		}
		return nil, nil, translate(ctx, "write batch", err)
	}
	ids, affected := res.AllLastInsertIds(), res.AllRowsAffected()
	switch {
	case len(ids) != 4 || len(affected) != 4 || affected[1] != int64(len(rows)):
		return nil, nil, translate(ctx, "write batch", fmt.Errorf("repo: the batch's statements answered ids %v, rows %v", ids, affected))
	case affected[3] == 0:
		return nil, nil, service.ErrConflict
	}
	if b.BeforeCommit != nil {
		if err := b.BeforeCommit(); err != nil {
			return nil, nil, err
		}
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return nil, nil, translate(ctx, "commit", err)
	}
	open = false
	for j, i := range placed {
		rows[j].ID = ids[1] + int64(j)
		orders[i] = rows[j].order()
	}
	return orders, errs, nil
}

// batchStatements is the batch's multi-statement: START TRANSACTION, the
// orders' INSERT, the ledger's INSERT numbered from LAST_INSERT_ID() (the
// orders' first id) and the versioned UPDATE by total.
func batchStatements(sku string, rows []orderModel, version, total int64, now time.Time) (string, []driver.NamedValue, error) {
	insert, values := ordersInsert(rows)
	var q strings.Builder
	q.Grow(len(insert) + len(rows)*40 + 300)
	q.WriteString("START TRANSACTION; ")
	q.WriteString(insert)
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
	q.WriteString("; UPDATE stock SET available = available - ?, sold = sold + ?, version = version + 1, updated_at = ? WHERE sku = ? AND version = ? AND available >= ?")
	values = append(values, total, total, now, sku, version, total)
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
