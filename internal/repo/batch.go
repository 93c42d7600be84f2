package repo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/seckill/stock/internal/service"
)

// DeductBatch places several orders of one SKU in one transaction: it reads
// the stock row; checks which of the items' keys the caller did not check
// (BatchItem.KeyChecked) have an order already (on the multi-statement path
// the unique index checks them first, and a read only follows a key that
// fails it, unless the SKU has a per-buyer limit, whose keys are read
// before any limit is counted; otherwise a read beside the stock read, on
// another connection); fills the orders in order while stock lasts,
// inserts them in one statement, writes their ledger rows in one, and ends
// with one versioned UPDATE by the total: a handful of round trips
// whatever the batch size.
// It returns per item the order, or service.ErrSoldOut, a
// *service.LimitError or service.ErrDuplicateKey; its error
// (service.ErrConflict, service.ErrUnknownSKU, an error wrapping
// service.ErrUnavailable, or that of b.BeforeCommit) means nothing was
// written.
//
// The ids come from the multi-row INSERT when the server promises one
// statement's rows consecutive ids (see Store.consecutiveIDs), and are read
// back by (buyer, key) otherwise. When another instance inserts one of the
// keys between the read and the INSERT (a replay racing its first attempt),
// the statement fails as a whole; the batch is then placed again in a new
// transaction: with every key read (on the six-statement path, if the
// caller had read some), and order by order, where only that order is
// skipped, if that races too.
func (s *Store) DeductBatch(ctx context.Context, b service.Batch) ([]service.Order, []error, error) {
	if len(b.Items) == 1 { // one INSERT either way: skip the key read and the id read
		return s.deductBatchRows(ctx, b)
	}
	place := s.deductBatchFast
	if s.multi != nil && s.consecutiveIDs {
		// First with the unique index as the check of the keys the caller
		// did not read: a key that has an order fails the INSERT as a
		// whole, and the batch is placed again with every key read. A
		// replay is rare in a flood of new keys, so the read stays out of
		// the lock's hold until one comes.
		orders, errs, err := s.deductBatchMulti(ctx, b, true)
		if !errors.Is(err, errKeyRace) {
			return orders, errs, err
		}
		b = everyKeyUnread(b)
		place = func(ctx context.Context, b service.Batch) ([]service.Order, []error, error) {
			return s.deductBatchMulti(ctx, b, false)
		}
	}
	orders, errs, err := place(ctx, b)
	if errors.Is(err, errKeyRace) && slices.ContainsFunc(b.Items, func(it service.BatchItem) bool { return it.KeyChecked }) {
		// The caller's read came before the lock: a retry whose first
		// attempt committed while this batch waited. Read every key now,
		// under the lock, where such a race is all but impossible.
		b = everyKeyUnread(b)
		orders, errs, err = place(ctx, b)
	}
	if errors.Is(err, errKeyRace) {
		return s.deductBatchRows(ctx, b)
	}
	return orders, errs, err
}

// everyKeyUnread is b with none of its keys marked read by the caller.
func everyKeyUnread(b service.Batch) service.Batch {
	b.Items = slices.Clone(b.Items)
	for i := range b.Items {
		b.Items[i].KeyChecked = false
	}
	return b
}

// takenKeys starts the read of which of the unchecked items' keys have an
// order, beside the transaction's start and stock read; its wait gives the answer,
// and its done (deferred by the caller) waits for a read not waited for, so
// its connection is back in the pool when the batch returns. The read's
// connection is taken here, before the caller's transaction takes its own,
// so a transaction never waits for a read that waits for the pool (with
// every connection held by such transactions, that would hang until the
// deadline).
func (s *Store) takenKeys(ctx context.Context, items []service.BatchItem) (*keyRead, error) {
	var keys []service.BuyerKey
	for _, it := range items {
		if !it.KeyChecked {
			keys = append(keys, service.BuyerKey{Buyer: it.Buyer, Key: it.Key})
		}
	}
	r := &keyRead{ctx: ctx, taken: map[service.BuyerKey]bool{}}
	if len(keys) == 0 {
		return r, nil
	}
	conn, err := s.sql.Conn(ctx)
	if err != nil {
		return nil, translate(ctx, "read keys", err)
	}
	ch := make(chan error, 1)
	r.ch = ch
	go func() {
		db := s.db.WithContext(ctx)
		db.Statement.ConnPool = conn // as gorm's DB.Connection does
		taken, err := keysWithOrders(db, keys)
		_ = conn.Close() // back in the pool before the answer
		r.taken = taken
		ch <- err
		close(ch)
	}()
	return r, nil
}

// keyRead is a read started by takenKeys.
type keyRead struct {
	ctx   context.Context
	ch    chan error // nil: nothing to read
	taken map[service.BuyerKey]bool
}

// wait returns the keys that have an order (taken gets the batch's own as
// it is filled).
func (r *keyRead) wait() (map[service.BuyerKey]bool, error) {
	if r.ch == nil {
		return r.taken, nil
	}
	err := <-r.ch
	r.ch = nil
	return r.taken, translate(r.ctx, "read keys", err)
}

// done waits for a read not waited for; its answer is no longer wanted.
func (r *keyRead) done() {
	if r.ch != nil {
		for range r.ch { //nolint:revive // drained, not used
		}
	}
}

var errKeyRace = errors.New("repo: a key of the batch was inserted concurrently")

// finishBatch writes the batch's ledger rows, ends with the versioned
// UPDATE by total and runs b.BeforeCommit. It returns service.ErrConflict
// when the version moved.
func (s *Store) finishBatch(tx *gorm.DB, b service.Batch, version, total int64, now time.Time, ledger []ledgerModel) error {
	ctx := tx.Statement.Context
	if err := s.insertLedger(tx, ledger); err != nil {
		return translate(ctx, "insert ledger", err)
	}
	upd := tx.Model(&stockModel{}).Where("sku = ? AND version = ? AND available >= ?", b.SKU, version, total).Updates(sale(total, now))
	if upd.Error != nil {
		return translate(ctx, "update stock", upd.Error)
	}
	if upd.RowsAffected == 0 {
		return service.ErrConflict
	}
	if b.BeforeCommit != nil {
		return b.BeforeCommit()
	}
	return nil
}

func (s *Store) deductBatchFast(ctx context.Context, b service.Batch) ([]service.Order, []error, error) {
	read, err := s.takenKeys(ctx, b.Items)
	if err != nil {
		return nil, nil, err
	}
	defer read.done()
	return s.deductBatchRead(ctx, b, read, nil)
}

// deductBatchRead is deductBatchFast with the key read begun and, if stock
// is not nil, the stock row read already (outside the transaction, as the
// multi-statement batch reads it: the versioned UPDATE checks it).
func (s *Store) deductBatchRead(ctx context.Context, b service.Batch, read *keyRead, stock *stockModel) ([]service.Order, []error, error) {
	var orders []service.Order
	var errs []error
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		orders, errs = make([]service.Order, len(b.Items)), make([]error, len(b.Items))
		var cur stockModel
		if stock != nil {
			cur = *stock
		} else {
			var err error
			if cur, err = readStock(tx, b.SKU, false); err != nil {
				return err
			}
		}
		taken, err := read.wait()
		if err != nil {
			return err
		}
		now := time.Now().UTC().Truncate(time.Microsecond)
		rows, placed, total, err := fillBatch(b, cur, taken, now, errs, func(it service.BatchItem) error {
			return takeAllowance(tx, it.Buyer, b.SKU, int64(it.Quantity), cur.PerBuyerLimit, false)
		})
		if err != nil || total == 0 {
			return err
		}
		// One multi-row INSERT, numbered from its LastInsertId.
		if err := s.insertOrders(tx, rows); err != nil {
			if isDupEntry(err) {
				return errKeyRace
			}
			return translate(ctx, "insert orders", err)
		}
		if !s.consecutiveIDs {
			if err := readBackIDs(tx, rows); err != nil {
				return err
			}
		}
		ledger := make([]ledgerModel, len(rows))
		for j, i := range placed {
			orders[i] = rows[j].order()
			ledger[j] = ledgerModel{SKU: b.SKU, Kind: kindSale, Delta: -int64(rows[j].Quantity), OrderID: &rows[j].ID, CreatedAt: now}
		}
		return s.finishBatch(tx, b, cur.Version, total, now, ledger)
	})
	if err != nil {
		if service.IsError(err) || errors.Is(err, errKeyRace) {
			return nil, nil, err
		}
		return nil, nil, translate(ctx, "deduct batch", err)
	}
	return orders, errs, nil
}

// fillBatch fills the batch in order while stock lasts: per item it sets
// errs[i] (admitted before the latest restock, sold out, a key placed
// before or earlier in the batch, or allow's *service.LimitError) or makes
// its order row. It returns the rows,
// the items they place, their total, and allow's other errors. taken gets
// the placed keys.
func fillBatch(b service.Batch, cur stockModel, taken map[service.BuyerKey]bool, now time.Time, errs []error,
	allow func(service.BatchItem) error) (rows []orderModel, placed []int, total int64, err error) {
	left := cur.Available
	fence := b.Fence
	for i, it := range b.Items {
		q := int64(it.Quantity)
		k := service.BuyerKey{Buyer: it.Buyer, Key: it.Key}
		if err := service.Restocked(it.Admitted, cur.RestockSeq); err != nil {
			errs[i] = err
			continue
		}
		switch {
		case q > left:
			errs[i] = service.ErrSoldOut
			continue
		case taken[k]: // placed before, or earlier in this batch
			errs[i] = service.ErrDuplicateKey
			continue
		}
		if err := allow(it); err != nil {
			var le *service.LimitError
			if errors.As(err, &le) {
				errs[i] = err
				continue
			}
			return nil, nil, 0, err
		}
		taken[k] = true
		left -= q
		total += q
		placed = append(placed, i)
		rows = append(rows, orderModel{Buyer: it.Buyer, IdempotencyKey: it.Key, RequestHash: it.RequestHash, SKU: b.SKU,
			Quantity: it.Quantity, Fence: &fence, CreatedAt: now})
	}
	return rows, placed, total, nil
}

// KeysTaken reports, per key, whether it has an order: one read of the
// unique (buyer, idempotency_key) index.
func (s *Store) KeysTaken(ctx context.Context, keys []service.BuyerKey) ([]bool, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	has, err := keysWithOrders(s.db.WithContext(ctx), keys)
	if err != nil {
		return nil, translate(ctx, "read keys", err)
	}
	taken := make([]bool, len(keys))
	for i, k := range keys {
		taken[i] = has[k]
	}
	return taken, nil
}

// keysWithOrders reads which of keys have an order, as a set.
func keysWithOrders(db *gorm.DB, keys []service.BuyerKey) (map[service.BuyerKey]bool, error) {
	found, err := ordersOfKeys(db, keys, "buyer", "idempotency_key")
	has := make(map[service.BuyerKey]bool, len(found))
	for _, f := range found {
		has[service.BuyerKey{Buyer: f.Buyer, Key: f.IdempotencyKey}] = true
	}
	return has, err
}

// ordersOfKeys reads the columns of the orders of keys by the unique
// (buyer, idempotency_key) index: one row-constructor IN, which both
// MariaDB and MySQL read as one index range per key (buyer IN .. AND
// idempotency_key IN .. would make them consider every pair).
func ordersOfKeys(tx *gorm.DB, keys []service.BuyerKey, columns ...string) ([]orderModel, error) {
	pairs := make([][]any, len(keys))
	for i, k := range keys {
		pairs[i] = []any{k.Buyer, k.Key}
	}
	var found []orderModel
	err := tx.Select(columns).Where("(buyer, idempotency_key) IN ?", pairs).Find(&found).Error
	return found, err
}

// readBackIDs sets the ids of rows, just inserted, from the table (by buyer
// and key): when the server does not promise one statement's rows
// consecutive ids (see Store.consecutiveIDs), LastInsertId numbers only the
// first.
func readBackIDs(tx *gorm.DB, rows []orderModel) error {
	ctx := tx.Statement.Context
	keys := make([]service.BuyerKey, len(rows))
	for i, r := range rows {
		keys[i] = service.BuyerKey{Buyer: r.Buyer, Key: r.IdempotencyKey}
	}
	ids, err := ordersOfKeys(tx, keys, "id", "buyer", "idempotency_key")
	if err != nil {
		return translate(ctx, "read order ids", err)
	}
	idOf := make(map[service.BuyerKey]int64, len(ids))
	for _, r := range ids {
		idOf[service.BuyerKey{Buyer: r.Buyer, Key: r.IdempotencyKey}] = r.ID
	}
	for i := range rows {
		if rows[i].ID = idOf[keys[i]]; rows[i].ID == 0 {
			return translate(ctx, "read order ids", fmt.Errorf("repo: order %q of %q not found after its insert", rows[i].IdempotencyKey, rows[i].Buyer))
		}
	}
	return nil
}

// deductBatchRows is DeductBatch one INSERT per order: an order whose key
// exists already is skipped (MySQL rolls back only that INSERT).
func (s *Store) deductBatchRows(ctx context.Context, b service.Batch) ([]service.Order, []error, error) {
	var orders []service.Order
	var errs []error
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		orders, errs = make([]service.Order, len(b.Items)), make([]error, len(b.Items))
		cur, err := readStock(tx, b.SKU, false)
		if err != nil {
			return err
		}
		left, total := cur.Available, int64(0)
		now := time.Now().UTC().Truncate(time.Microsecond)
		fence := b.Fence
		var ledger []ledgerModel
		for i, it := range b.Items {
			q := int64(it.Quantity)
			if err := service.Restocked(it.Admitted, cur.RestockSeq); err != nil {
				errs[i] = err
				continue
			}
			if q > left {
				errs[i] = service.ErrSoldOut
				continue
			}
			if err := takeAllowance(tx, it.Buyer, b.SKU, q, cur.PerBuyerLimit, false); err != nil {
				var le *service.LimitError
				if errors.As(err, &le) {
					errs[i] = err
					continue
				}
				return err
			}
			row := orderModel{Buyer: it.Buyer, IdempotencyKey: it.Key, RequestHash: it.RequestHash, SKU: b.SKU, Quantity: it.Quantity, Fence: &fence, CreatedAt: now}
			if err := tx.Create(&row).Error; err != nil {
				if !isDupEntry(err) {
					return translate(ctx, "insert order", err)
				}
				errs[i] = service.ErrDuplicateKey
				if cur.PerBuyerLimit > 0 { // give back what takeAllowance took for it
					if err := giveBack(tx, it.Buyer, b.SKU, q); err != nil {
						return err
					}
				}
				continue
			}
			orders[i] = row.order()
			left -= q
			total += q
			ledger = append(ledger, ledgerModel{SKU: b.SKU, Kind: kindSale, Delta: -q, OrderID: &orders[i].ID, CreatedAt: now})
		}
		if total == 0 {
			return nil
		}
		return s.finishBatch(tx, b, cur.Version, total, now, ledger)
	})
	if err != nil {
		if service.IsError(err) {
			return nil, nil, err
		}
		return nil, nil, translate(ctx, "deduct batch", err)
	}
	return orders, errs, nil
}

// insertOrders inserts rows in one multi-row INSERT and numbers them from
// its LastInsertId: through gorm's Create, or, with s.leanInserts, a
// statement built here and sent on the transaction's connection (the
// benchmark in bench_internal_test.go compares the two).
func (s *Store) insertOrders(tx *gorm.DB, rows []orderModel) error {
	if !s.leanInserts {
		return tx.Create(&rows).Error
	}
	q, args := ordersInsert(rows)
	res, err := tx.Statement.ConnPool.ExecContext(tx.Statement.Context, q, args...)
	if err != nil {
		return err
	}
	first, err := res.LastInsertId()
	if err != nil {
		return err
	}
	for i := range rows {
		rows[i].ID = first + int64(i)
	}
	return nil
}

// ordersInsert is the multi-row INSERT of rows, with its arguments.
func ordersInsert(rows []orderModel) (string, []any) {
	return multiInsert("INSERT INTO orders (buyer, idempotency_key, request_hash, sku, quantity, fence, created_at)", len(rows), 7,
		func(i int, args []any) []any {
			r := rows[i]
			return append(args, r.Buyer, r.IdempotencyKey, r.RequestHash, r.SKU, r.Quantity, r.Fence, r.CreatedAt)
		})
}

// insertLedger inserts the ledger rows in one multi-row INSERT, as
// insertOrders does.
func (s *Store) insertLedger(tx *gorm.DB, rows []ledgerModel) error {
	if !s.leanInserts {
		return tx.Create(&rows).Error
	}
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
