package repo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/seckill/stock/internal/service"
)

// DeductBatch places several orders of one SKU in one transaction: it reads
// the stock row and which of the batch's keys have an order already (one
// query each), fills the orders in order while stock lasts, inserts them in
// one statement, reads their ids back in one, writes their ledger rows in
// one, and ends with one versioned UPDATE by the total: a handful of round
// trips whatever the batch size. It returns per item the order, or
// service.ErrSoldOut, a *service.LimitError or service.ErrDuplicateKey; its
// error (service.ErrConflict, service.ErrUnknownSKU, an error wrapping
// service.ErrUnavailable, or that of b.BeforeCommit) means nothing was
// written.
//
// The ids are read back by (buyer, key) rather than computed from the first
// id of the multi-row INSERT: InnoDB makes them consecutive only in some
// innodb_autoinc_lock_mode settings, and MySQL 8.4 has no INSERT RETURNING.
// When another instance inserts one of the keys between the read and the
// INSERT (a replay racing its first attempt), the statement fails as a
// whole; the batch is then placed again order by order, in a new
// transaction, where only that order is skipped.
func (s *Store) DeductBatch(ctx context.Context, b service.Batch) ([]service.Order, []error, error) {
	if len(b.Items) == 1 { // one INSERT either way: skip the key read and the id read
		return s.deductBatchRows(ctx, b)
	}
	orders, errs, err := s.deductBatchFast(ctx, b)
	if errors.Is(err, errKeyRace) {
		return s.deductBatchRows(ctx, b)
	}
	return orders, errs, err
}

var errKeyRace = errors.New("repo: a key of the batch was inserted concurrently")

// finishBatch writes the batch's ledger rows (values, ledgerArgs), ends
// with the versioned UPDATE by total and runs b.BeforeCommit. It returns
// service.ErrConflict when the version moved.
func finishBatch(tx *gorm.DB, b service.Batch, version, total int64, now time.Time, values string, ledgerArgs []any) error {
	ctx := tx.Statement.Context
	if err := tx.Exec("INSERT INTO stock_ledger (sku, kind, delta, order_id, created_at) VALUES "+values, ledgerArgs...).Error; err != nil {
		return translate(ctx, "insert ledger", err)
	}
	upd := tx.Exec("UPDATE stock SET available = available - ?, sold = sold + ?, version = version + 1, updated_at = ? "+
		"WHERE sku = ? AND version = ? AND available >= ?", total, total, now, b.SKU, version, total)
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
	var orders []service.Order
	var errs []error
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		orders, errs = make([]service.Order, len(b.Items)), make([]error, len(b.Items))
		var rows []stockRow
		if err := tx.Raw("SELECT "+stockCols+" FROM stock WHERE sku = ?", b.SKU).Scan(&rows).Error; err != nil {
			return translate(ctx, "read stock", err)
		}
		if len(rows) == 0 {
			return service.ErrUnknownSKU
		}
		cur := rows[0]
		type bk struct{ buyer, key string }
		buyers, keys := make([]string, 0, len(b.Items)), make([]string, 0, len(b.Items))
		for _, it := range b.Items {
			buyers, keys = append(buyers, it.Buyer), append(keys, it.Key)
		}
		var found []struct{ Buyer, IdempotencyKey string }
		if err := tx.Raw("SELECT buyer, idempotency_key FROM orders WHERE buyer IN ? AND idempotency_key IN ?", buyers, keys).
			Scan(&found).Error; err != nil {
			return translate(ctx, "read keys", err)
		}
		taken := make(map[bk]bool, len(found)+len(b.Items))
		for _, f := range found {
			taken[bk{f.Buyer, f.IdempotencyKey}] = true
		}
		left, total := cur.Available, int64(0)
		now := time.Now().UTC().Truncate(time.Microsecond)
		var ins strings.Builder
		var insArgs []any
		var placed []int
		for i, it := range b.Items {
			q := int64(it.Quantity)
			k := bk{it.Buyer, it.Key}
			switch {
			case q > left:
				errs[i] = service.ErrSoldOut
				continue
			case taken[k]: // placed before, or earlier in this batch
				errs[i] = service.ErrDuplicateKey
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
			taken[k] = true
			left -= q
			total += q
			placed = append(placed, i)
			if ins.Len() > 0 {
				ins.WriteString(", ")
			}
			ins.WriteString("(?, ?, ?, ?, ?, ?, ?)")
			insArgs = append(insArgs, it.Buyer, it.Key, it.RequestHash, b.SKU, it.Quantity, b.Fence, now)
		}
		if total == 0 {
			return nil
		}
		err := tx.Exec("INSERT INTO orders (buyer, idempotency_key, request_hash, sku, quantity, fence, created_at) VALUES "+ins.String(), insArgs...).Error
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == errDupEntry {
			return errKeyRace
		}
		if err != nil {
			return translate(ctx, "insert orders", err)
		}
		buyers, keys = buyers[:0], keys[:0]
		for _, i := range placed {
			buyers, keys = append(buyers, b.Items[i].Buyer), append(keys, b.Items[i].Key)
		}
		var ids []struct {
			ID                    int64
			Buyer, IdempotencyKey string
		}
		if err := tx.Raw("SELECT id, buyer, idempotency_key FROM orders WHERE buyer IN ? AND idempotency_key IN ?", buyers, keys).
			Scan(&ids).Error; err != nil {
			return translate(ctx, "read order ids", err)
		}
		idOf := make(map[bk]int64, len(ids))
		for _, r := range ids {
			idOf[bk{r.Buyer, r.IdempotencyKey}] = r.ID
		}
		var ledger strings.Builder
		ledgerArgs := make([]any, 0, 4*len(placed))
		for _, i := range placed {
			it := b.Items[i]
			id := idOf[bk{it.Buyer, it.Key}]
			if id == 0 {
				return translate(ctx, "read order ids", fmt.Errorf("repo: order %q of %q not found after its insert", it.Key, it.Buyer))
			}
			fence := b.Fence
			orders[i] = service.Order{ID: id, Buyer: it.Buyer, Key: it.Key, SKU: b.SKU, Quantity: it.Quantity, Fence: &fence, CreatedAt: now, RequestHash: it.RequestHash}
			if ledger.Len() > 0 {
				ledger.WriteString(", ")
			}
			ledger.WriteString("(?, 'sale', ?, ?, ?)")
			ledgerArgs = append(ledgerArgs, b.SKU, -int64(it.Quantity), id, now)
		}
		return finishBatch(tx, b, cur.Version, total, now, ledger.String(), ledgerArgs)
	})
	if err != nil {
		if isServiceErr(err) || errors.Is(err, errKeyRace) {
			return nil, nil, err
		}
		return nil, nil, translate(ctx, "deduct batch", err)
	}
	return orders, errs, nil
}

// deductBatchRows is DeductBatch one INSERT per order: an order whose key
// exists already is skipped (MySQL rolls back only that INSERT).
func (s *Store) deductBatchRows(ctx context.Context, b service.Batch) ([]service.Order, []error, error) {
	var orders []service.Order
	var errs []error
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		orders, errs = make([]service.Order, len(b.Items)), make([]error, len(b.Items))
		var rows []stockRow
		if err := tx.Raw("SELECT "+stockCols+" FROM stock WHERE sku = ?", b.SKU).Scan(&rows).Error; err != nil {
			return translate(ctx, "read stock", err)
		}
		if len(rows) == 0 {
			return service.ErrUnknownSKU
		}
		cur := rows[0]
		left, total := cur.Available, int64(0)
		now := time.Now().UTC().Truncate(time.Microsecond)
		var ledger strings.Builder
		var ledgerArgs []any
		for i, it := range b.Items {
			q := int64(it.Quantity)
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
			res, err := tx.Statement.ConnPool.ExecContext(ctx,
				"INSERT INTO orders (buyer, idempotency_key, request_hash, sku, quantity, fence, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
				it.Buyer, it.Key, it.RequestHash, b.SKU, it.Quantity, b.Fence, now)
			var me *mysql.MySQLError
			if errors.As(err, &me) && me.Number == errDupEntry {
				errs[i] = service.ErrDuplicateKey
				if cur.PerBuyerLimit > 0 { // give back what takeAllowance took for it
					if err := tx.Exec("UPDATE buyer_purchases SET quantity = quantity - ? WHERE buyer = ? AND sku = ?", q, it.Buyer, b.SKU).Error; err != nil {
						return translate(ctx, "give back allowance", err)
					}
				}
				continue
			}
			if err != nil {
				return translate(ctx, "insert order", err)
			}
			id, err := res.LastInsertId()
			if err != nil {
				return translate(ctx, "order id", err)
			}
			fence := b.Fence
			orders[i] = service.Order{ID: id, Buyer: it.Buyer, Key: it.Key, SKU: b.SKU, Quantity: it.Quantity, Fence: &fence, CreatedAt: now, RequestHash: it.RequestHash}
			left -= q
			total += q
			if ledger.Len() > 0 {
				ledger.WriteString(", ")
			}
			ledger.WriteString("(?, 'sale', ?, ?, ?)")
			ledgerArgs = append(ledgerArgs, b.SKU, -q, id, now)
		}
		if total == 0 {
			return nil
		}
		return finishBatch(tx, b, cur.Version, total, now, ledger.String(), ledgerArgs)
	})
	if err != nil {
		if isServiceErr(err) {
			return nil, nil, err
		}
		return nil, nil, translate(ctx, "deduct batch", err)
	}
	return orders, errs, nil
}
