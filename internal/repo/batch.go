package repo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/seckill/stock/internal/service"
)

// DeductBatch places the batch's orders in one transaction as
// service.PlanBatch plans them. Keys the caller did not check are left to
// the unique index unless the SKU has a per-buyer limit or a payment window
// (an item is counted per buyer before its insert); a key that fails the
// index is a key race, and the batch is planned again with every key read
// (docs/decisions/0003). It returns what service.Store.DeductBatch
// does: per item the order or its refusal, and an error (ErrConflict,
// ErrUnknownSKU, ErrBusy, ErrUnavailable or BeforeCommit's) when nothing
// was written.
func (s *Store) DeductBatch(ctx context.Context, b service.Batch) ([]service.Order, []error, error) {
	readKeys := false
	// Each race leaves one more key seen as taken: len(b.Items) bounds them.
	// A batch's joined items stay in b for its next try (write takes b).
	for range len(b.Items) + 1 {
		orders, errs, err := s.write(ctx, &b, readKeys)
		if !errors.Is(err, errKeyRace) {
			return orders, errs, err
		}
		b, readKeys = everyKeyUnread(b), true
	}
	return nil, nil, fmt.Errorf("%w: the batch's keys kept being inserted concurrently", service.ErrBusy)
}

// write places b with the multi-statement writer where the server allows
// it (s.multi), else with the transaction writer; the items b joins after
// the stock read are added to b.
func (s *Store) write(ctx context.Context, b *service.Batch, readKeys bool) ([]service.Order, []error, error) {
	if s.multi != nil {
		return s.writeMulti(ctx, b, readKeys)
	}
	return s.writeTx(ctx, b, readKeys, nil)
}

// errKeyRace is a writer's answer when a key of the batch failed the unique
// index: nothing was written.
var errKeyRace = errors.New("repo: a key of the batch was inserted concurrently")

// everyKeyUnread is b with none of its keys marked read by the caller.
func everyKeyUnread(b service.Batch) service.Batch {
	b.Items = slices.Clone(b.Items)
	for i := range b.Items {
		b.Items[i].KeyChecked = false
	}
	return b
}

// uncheckedKeys is the keys of the items the caller did not check.
func uncheckedKeys(items []service.BatchItem) []service.BuyerKey {
	var keys []service.BuyerKey
	for _, it := range items {
		if !it.KeyChecked {
			keys = append(keys, service.BuyerKey{Buyer: it.Buyer, Key: it.Key})
		}
	}
	return keys
}

// writeTx is the transaction writer: the stock row (read in the
// transaction, unless stock is the row read already: the versioned UPDATE
// checks it), the unchecked keys if readKeys or the SKU has a per-buyer
// limit or a payment window, the plan (takeForBuyer's upserts per order
// under a limit or a window: the allowance, the unpaid units), then one
// INSERT of the orders, one of the ledger and the versioned UPDATE, and a
// rewrite of the deadlines if a lock wait left them behind (settleRows).
func (s *Store) writeTx(ctx context.Context, b *service.Batch, readKeys bool, stock *stockModel) ([]service.Order, []error, error) {
	var orders []service.Order
	var errs []error
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		cur, err := stockOrRead(tx, b.SKU, stock)
		if err != nil {
			return err
		}
		if err := cur.saleRefusal(); err != nil {
			return err
		}
		b.TakeJoined()
		perBuyer := cur.PerBuyerLimit > 0 || cur.PaymentWindowSeconds > 0 // an upsert per item
		var ids map[service.BuyerKey]int64
		if readKeys || perBuyer {
			if ids, err = orderIDsOfKeys(ctx, tx.Statement.ConnPool, uncheckedKeys(b.Items)); err != nil {
				return err
			}
		}
		var allow func(service.BatchItem) error
		if perBuyer {
			allow = func(it service.BatchItem) error {
				return takeForBuyer(tx, it.Buyer, b.SKU, int64(it.Quantity), cur, s.maxQuantity, false)
			}
		}
		plan, err := service.PlanBatch(cur.batchRow(), b.Items, hasKey(ids), allow)
		if err != nil {
			return err
		}
		orders, errs = make([]service.Order, len(b.Items)), plan.Errs
		if plan.Total == 0 {
			return nil
		}
		now := time.Now().UTC().Truncate(time.Microsecond)
		rows := orderRows(*b, plan, cur, now)
		if err := s.insertOrders(tx, rows); err != nil {
			return err
		}
		if err := s.finishBatch(tx, *b, cur, plan.Total, now, saleLedger(b.SKU, rows, now)); err != nil {
			return err
		}
		if err := settleRows(gormExec(tx), cur, rows); err != nil {
			return translate(ctx, "settle deadlines", err)
		}
		if err := insertEvents(gormExec(tx), b.SKU, placedEvents(rows), now); err != nil {
			return translate(ctx, "insert events", err)
		}
		for j, i := range plan.Placed {
			orders[i] = rows[j].order()
		}
		if b.BeforeCommit != nil {
			return b.BeforeCommit()
		}
		return nil
	})
	if err != nil {
		if service.IsError(err) || errors.Is(err, errKeyRace) {
			return nil, nil, err
		}
		return nil, nil, translate(ctx, "deduct batch", err)
	}
	return orders, errs, nil
}

// stockOrRead is *stock, or the SKU's row read in tx when stock is nil.
func stockOrRead(tx *gorm.DB, sku string, stock *stockModel) (stockModel, error) {
	if stock != nil {
		return *stock, nil
	}
	return readStock(tx, sku, false)
}

// hasKey reports whether a key is in ids (nil: none is).
func hasKey(ids map[service.BuyerKey]int64) func(service.BuyerKey) bool {
	if len(ids) == 0 {
		return nil
	}
	return func(k service.BuyerKey) bool { _, ok := ids[k]; return ok }
}

// orderRows is the order rows of the plan's placed items, with the status
// and deadline of an order placed on cur.
func orderRows(b service.Batch, plan service.BatchPlan, cur stockModel, now time.Time) []orderModel {
	rows := make([]orderModel, len(plan.Placed))
	status, expires := cur.newOrderStatus(cur.clock().now())
	var fence *int64 // none for a batch placed without a lock
	if b.Fence > 0 {
		fence = &b.Fence
	}
	for j, i := range plan.Placed {
		it := b.Items[i]
		rows[j] = orderModel{Buyer: it.Buyer, IdempotencyKey: it.Key, RequestHash: it.RequestHash, SKU: b.SKU,
			Quantity: it.Quantity, Status: status, ExpiresAt: expires, Fence: fence, CreatedAt: now}
	}
	return rows
}

// saleLedger is the ledger rows of rows' sales (their ids set).
func saleLedger(sku string, rows []orderModel, now time.Time) []ledgerModel {
	ledger := make([]ledgerModel, len(rows))
	for j := range rows {
		ledger[j] = ledgerModel{SKU: sku, Kind: kindSale, Delta: -int64(rows[j].Quantity), OrderID: &rows[j].ID, CreatedAt: now}
	}
	return ledger
}

// finishBatch writes the batch's ledger rows and ends with the versioned
// UPDATE by total (from cur, as read; under a per-buyer limit, also on the
// restock sequence read: see versionedGuard). It returns
// service.ErrConflict when the row moved.
func (s *Store) finishBatch(tx *gorm.DB, b service.Batch, cur stockModel, total int64, now time.Time, ledger []ledgerModel) error {
	ctx := tx.Statement.Context
	if err := insertLedger(tx, ledger); err != nil {
		return translate(ctx, "insert ledger", err)
	}
	upd := versionedGuard(tx.Model(&stockModel{}).Where("sku = ?", b.SKU), cur, total).
		Updates(sale(total, len(ledger), cur.PaymentWindowSeconds > 0, now))
	if upd.Error != nil {
		return translate(ctx, "update stock", upd.Error)
	}
	if upd.RowsAffected == 0 {
		return service.ErrConflict
	}
	return nil
}

// settleRows settles the deadline of the reserved orders rows, written
// from cur's clock (settleDeadline), and sets it in rows.
func settleRows(exec func(q string, args ...any) error, cur stockModel, rows []orderModel) error {
	if len(rows) == 0 || rows[0].ExpiresAt == nil {
		return nil
	}
	ids := make([]int64, len(rows))
	for j := range rows {
		ids[j] = rows[j].ID
	}
	exp, err := settleDeadline(exec, cur, rows[0].ExpiresAt, ids)
	if err != nil {
		return err
	}
	for j := range rows {
		rows[j].ExpiresAt = exp
	}
	return nil
}

// KeysTaken reports, per key, whether it has an order: one read of the
// unique (buyer, idempotency_key) index.
func (s *Store) KeysTaken(ctx context.Context, keys []service.BuyerKey) ([]bool, error) {
	ids, err := orderIDsOfKeys(ctx, s.sql, keys)
	if err != nil {
		return nil, err
	}
	var taken []bool
	for _, k := range keys {
		_, ok := ids[k]
		taken = append(taken, ok)
	}
	return taken, nil
}

// queryer is what a read runs on: a pool, a connection, or a transaction's
// (gorm's ConnPool).
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// orderIDsOfKeys returns the order id of each of keys that has an order:
// one read of the unique (buyer, idempotency_key) index, as a
// row-constructor IN, which both MariaDB and MySQL read as one index range
// per key. Keys compare byte for byte (the columns are binary).
func orderIDsOfKeys(ctx context.Context, q queryer, keys []service.BuyerKey) (map[service.BuyerKey]int64, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	in, args := keyPairs(keys)
	rows, err := q.QueryContext(ctx, "SELECT id, buyer, idempotency_key FROM orders WHERE (buyer, idempotency_key) IN ("+in+")", args...) //nolint:gosec // G202: only placeholders are concatenated
	if err != nil {
		return nil, translate(ctx, "read keys", err)
	}
	defer func() { _ = rows.Close() }()
	ids := make(map[service.BuyerKey]int64)
	for rows.Next() {
		var id int64
		var k service.BuyerKey
		if err := rows.Scan(&id, &k.Buyer, &k.Key); err != nil {
			return nil, translate(ctx, "read keys", err)
		}
		ids[k] = id
	}
	if err := rows.Err(); err != nil {
		return nil, translate(ctx, "read keys", err)
	}
	return ids, nil
}

// keyPairs is "(?, ?), ..." for keys, with their arguments.
func keyPairs(keys []service.BuyerKey) (string, []any) {
	args := make([]any, 0, 2*len(keys))
	for _, k := range keys {
		args = append(args, k.Buyer, k.Key)
	}
	return strings.TrimSuffix(strings.Repeat("(?, ?), ", len(keys)), ", "), args
}

// insertOrders inserts rows in one multi-row INSERT and sets their ids:
// numbered from its LastInsertId where the server numbers a statement's
// rows consecutively (see Store.consecutiveIDs), read back by key
// otherwise. A key that has an order already is errKeyRace.
func (s *Store) insertOrders(tx *gorm.DB, rows []orderModel) error {
	ctx := tx.Statement.Context
	q, args := ordersInsert(rows)
	res, err := tx.Statement.ConnPool.ExecContext(ctx, q, args...)
	if isDupEntry(err) {
		return errKeyRace
	}
	if err != nil {
		return translate(ctx, "insert orders", err)
	}
	if !s.consecutiveIDs && len(rows) > 1 {
		return readBackIDs(ctx, tx.Statement.ConnPool, rows)
	}
	first, err := res.LastInsertId()
	if err != nil {
		return translate(ctx, "insert orders", err)
	}
	for i := range rows {
		rows[i].ID = first + int64(i)
	}
	return nil
}

// readBackIDs sets the ids of rows, just inserted, from the table (by
// buyer and key).
func readBackIDs(ctx context.Context, q queryer, rows []orderModel) error {
	keys := make([]service.BuyerKey, len(rows))
	for i, r := range rows {
		keys[i] = service.BuyerKey{Buyer: r.Buyer, Key: r.IdempotencyKey}
	}
	ids, err := orderIDsOfKeys(ctx, q, keys)
	if err != nil {
		return err
	}
	for i := range rows {
		if rows[i].ID = ids[keys[i]]; rows[i].ID == 0 {
			return translate(ctx, "read order ids", fmt.Errorf("repo: order %q of %q not found after its insert", rows[i].IdempotencyKey, rows[i].Buyer))
		}
	}
	return nil
}

// ordersInsert is the multi-row INSERT of rows, with its arguments.
func ordersInsert(rows []orderModel) (string, []any) {
	return multiInsert("INSERT INTO orders (buyer, idempotency_key, request_hash, sku, quantity, status, expires_at, fence, created_at)", len(rows), 9,
		func(i int, args []any) []any {
			r := rows[i]
			return append(args, r.Buyer, r.IdempotencyKey, r.RequestHash, r.SKU, r.Quantity, r.Status, r.ExpiresAt, r.Fence, r.CreatedAt)
		})
}

// insertLedger inserts the ledger rows in one multi-row INSERT.
func insertLedger(tx *gorm.DB, rows []ledgerModel) error {
	q, args := multiInsert("INSERT INTO stock_ledger (sku, kind, delta, order_id, created_at)", len(rows), 5,
		func(i int, args []any) []any {
			r := rows[i]
			return append(args, r.SKU, r.Kind, r.Delta, r.OrderID, r.CreatedAt)
		})
	return tx.Exec(q, args...).Error
}

// multiInsert is head VALUES (?, ...), ... for n rows of width values
// each, appended by row.
func multiInsert(head string, n, width int, row func(i int, args []any) []any) (string, []any) {
	tuple := "(?" + strings.Repeat(", ?", width-1) + ")"
	var q strings.Builder
	q.Grow(len(head) + 8 + n*(len(tuple)+2))
	q.WriteString(head)
	q.WriteString(" VALUES ")
	args := make([]any, 0, n*width)
	for i := range n {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString(tuple)
		args = row(i, args)
	}
	return q.String(), args
}

// versionedGuard is the WHERE of a versioned UPDATE of q units on the row
// cur was read from: the version read and the units. Under a per-buyer
// limit it also needs the restock sequence read: a return, which leaves the
// version alone, may have given an allowance back between the read and the
// purchase rows' read, and the write is then refused (ErrConflict, retried
// from a new read that refuses the orders admitted before the return).
func versionedGuard(q *gorm.DB, cur stockModel, units int64) *gorm.DB {
	q = q.Where("version = ? AND available >= ?", cur.Version, units)
	if cur.PerBuyerLimit > 0 {
		q = q.Where("restock_seq = ?", cur.RestockSeq)
	}
	return q
}
