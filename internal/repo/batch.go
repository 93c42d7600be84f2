package repo

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/seckill/stock/internal/service"
)

// DeductBatch places several orders of one SKU in one transaction: it reads
// the stock row, fills the orders in order while stock lasts (an order whose
// key exists already is skipped: MySQL rolls back only that INSERT), writes
// their ledger rows in one statement, and ends with one versioned UPDATE by
// the total. It returns per item the order, or service.ErrSoldOut or
// service.ErrDuplicateKey; its error (service.ErrConflict,
// service.ErrUnknownSKU, an error wrapping service.ErrUnavailable, or that of
// b.BeforeCommit) means nothing was written.
func (s *Store) DeductBatch(ctx context.Context, b service.Batch) ([]service.Order, []error, error) {
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
			if errors.As(err, &me) && me.Number == 1062 {
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
		if err := tx.Exec("INSERT INTO stock_ledger (sku, kind, delta, order_id, created_at) VALUES "+ledger.String(), ledgerArgs...).Error; err != nil {
			return translate(ctx, "insert ledger", err)
		}
		upd := tx.Exec("UPDATE stock SET available = available - ?, sold = sold + ?, version = version + 1, updated_at = ? "+
			"WHERE sku = ? AND version = ? AND available >= ?", total, total, now, b.SKU, cur.Version, total)
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
	})
	if err != nil {
		if isServiceErr(err) {
			return nil, nil, err
		}
		return nil, nil, translate(ctx, "deduct batch", err)
	}
	return orders, errs, nil
}
