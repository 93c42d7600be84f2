package repo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/seckill/stock/internal/service"
)

type orderRow struct {
	ID             int64
	Buyer          string
	IdempotencyKey string
	RequestHash    string
	SKU            string `gorm:"column:sku"`
	Quantity       int
	Fence          sql.NullInt64
	CreatedAt      time.Time
}

func (r orderRow) order() service.Order {
	o := service.Order{ID: r.ID, Buyer: r.Buyer, Key: r.IdempotencyKey, SKU: r.SKU, Quantity: r.Quantity, CreatedAt: r.CreatedAt, RequestHash: r.RequestHash}
	if r.Fence.Valid {
		f := r.Fence.Int64
		o.Fence = &f
	}
	return o
}

const orderCols = "id, buyer, idempotency_key, request_hash, sku, quantity, fence, created_at"

// OrderByKey returns the order the buyer placed with an idempotency key, or
// service.ErrOrderNotFound; other errors wrap service.ErrUnavailable.
func (s *Store) OrderByKey(ctx context.Context, buyer, key string) (service.Order, error) {
	return s.findOrder(ctx, "buyer = ? AND idempotency_key = ?", buyer, key)
}

// Order returns an order by id, or service.ErrOrderNotFound.
func (s *Store) Order(ctx context.Context, id int64) (service.Order, error) {
	return s.findOrder(ctx, "id = ?", id)
}

// Orders returns the buyer's orders (of sku, unless ""), newest first, with
// ids below before (0: from the newest), at most limit.
func (s *Store) Orders(ctx context.Context, buyer, sku string, before int64, limit int) ([]service.Order, error) {
	q := "SELECT " + orderCols + " FROM orders WHERE buyer = ?"
	args := []any{buyer}
	if sku != "" {
		q += " AND sku = ?"
		args = append(args, sku)
	}
	if before > 0 {
		q += " AND id < ?"
		args = append(args, before)
	}
	q += " ORDER BY id DESC LIMIT ?"
	args = append(args, limit)
	var rows []orderRow
	if err := s.db.WithContext(ctx).Raw(q, args...).Scan(&rows).Error; err != nil {
		return nil, translate(ctx, "list orders", err)
	}
	out := make([]service.Order, len(rows))
	for i, r := range rows {
		out[i] = r.order()
	}
	return out, nil
}

func (s *Store) findOrder(ctx context.Context, where string, args ...any) (service.Order, error) {
	var rows []orderRow
	err := s.db.WithContext(ctx).Raw("SELECT "+orderCols+" FROM orders WHERE "+where, args...).Scan(&rows).Error
	if err != nil {
		return service.Order{}, translate(ctx, "find order", err)
	}
	if len(rows) == 0 {
		return service.Order{}, service.ErrOrderNotFound
	}
	return rows[0].order(), nil
}

// Deduct places an order in one transaction, guarded as d.Write says. The
// guarding UPDATE is the last statement before COMMIT, so a miss rolls back
// the order and ledger rows with it. It returns service.ErrSoldOut,
// service.ErrUnknownSKU, service.ErrConflict (versioned UPDATE matched no
// row), service.ErrDuplicateKey, an error wrapping service.ErrUnavailable or
// service.ErrBusy, or the error of d.BeforeCommit.
func (s *Store) Deduct(ctx context.Context, d service.Deduction) (service.Order, error) {
	var o service.Order
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		o, err = deduct(tx, d)
		if err != nil {
			return err
		}
		if d.BeforeCommit != nil {
			return d.BeforeCommit()
		}
		return nil
	})
	if err != nil {
		if isServiceErr(err) {
			return service.Order{}, err
		}
		return service.Order{}, translate(ctx, "deduct", err)
	}
	return o, nil
}

// isServiceErr reports an error the transaction body returned on purpose.
func isServiceErr(err error) bool {
	for _, e := range []error{service.ErrSoldOut, service.ErrUnknownSKU, service.ErrConflict, service.ErrDuplicateKey,
		service.ErrLockLost, service.ErrUnavailable, service.ErrBusy, service.ErrLimitExceeded} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

type stockRow struct {
	Available     int64
	Sold          int64
	Version       int64
	PerBuyerLimit int64
}

const stockCols = "available, sold, version, per_buyer_limit"

// takeAllowance records q more units for buyer of sku, unless that would
// take the buyer past limit (0: no limit), in one statement whose row lock
// serializes the buyer's concurrent orders: the database itself enforces the
// limit. With plain (the unsafe strategies) it reads, checks and writes an
// absolute value instead, which concurrent orders of one buyer can overrun.
// It returns a *service.LimitError when refused.
func takeAllowance(tx *gorm.DB, buyer, sku string, q, limit int64, plain bool) error {
	ctx := tx.Statement.Context
	if limit <= 0 {
		return nil
	}
	if plain {
		var held []int64
		if err := tx.Raw("SELECT quantity FROM buyer_purchases WHERE buyer = ? AND sku = ?", buyer, sku).Scan(&held).Error; err != nil {
			return translate(ctx, "read allowance", err)
		}
		h := int64(0)
		if len(held) > 0 {
			h = held[0]
		}
		if h+q > limit {
			return &service.LimitError{Limit: limit, Held: h, Requested: q}
		}
		err := tx.Exec("INSERT INTO buyer_purchases (buyer, sku, quantity) VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE quantity = ?",
			buyer, sku, h+q, h+q).Error
		return translate(ctx, "write allowance", err)
	}
	if q > limit {
		return &service.LimitError{Limit: limit, Requested: q}
	}
	// Affected rows: 1 inserted, 2 updated, 0 left as it was (refused).
	res := tx.Exec("INSERT INTO buyer_purchases (buyer, sku, quantity) VALUES (?, ?, ?) "+
		"ON DUPLICATE KEY UPDATE quantity = IF(quantity + ? <= ?, quantity + ?, quantity)", buyer, sku, q, q, limit, q)
	if res.Error != nil {
		return translate(ctx, "take allowance", res.Error)
	}
	if res.RowsAffected > 0 {
		return nil
	}
	// A locking read: the row's latest value (the upsert holds its lock), not
	// this transaction's older snapshot.
	var held []int64
	if err := tx.Raw("SELECT quantity FROM buyer_purchases WHERE buyer = ? AND sku = ? FOR UPDATE", buyer, sku).Scan(&held).Error; err != nil {
		return translate(ctx, "read allowance", err)
	}
	le := &service.LimitError{Limit: limit, Requested: q}
	if len(held) > 0 {
		le.Held = held[0]
	}
	return le
}

func deduct(tx *gorm.DB, d service.Deduction) (service.Order, error) {
	ctx := tx.Statement.Context
	q := int64(d.Quantity)
	var cur stockRow
	if d.Write != service.WriteConditional {
		read := "SELECT " + stockCols + " FROM stock WHERE sku = ?"
		if d.Write == service.WriteForUpdate {
			read += " FOR UPDATE"
		}
		var rows []stockRow
		if err := tx.Raw(read, d.SKU).Scan(&rows).Error; err != nil {
			return service.Order{}, translate(ctx, "read stock", err)
		}
		if len(rows) == 0 {
			return service.Order{}, service.ErrUnknownSKU
		}
		cur = rows[0]
		if cur.Available < q {
			return service.Order{}, service.ErrSoldOut
		}
	} else {
		// The conditional UPDATE reads nothing first; the limit is read here
		// (a plain read: a limit changed by the admin meanwhile applies to
		// the orders that read it after the change).
		var lim []int64
		if err := tx.Raw("SELECT per_buyer_limit FROM stock WHERE sku = ?", d.SKU).Scan(&lim).Error; err != nil {
			return service.Order{}, translate(ctx, "read stock", err)
		}
		if len(lim) == 0 {
			return service.Order{}, service.ErrUnknownSKU
		}
		cur.PerBuyerLimit = lim[0]
	}
	if err := takeAllowance(tx, d.Buyer, d.SKU, q, cur.PerBuyerLimit, d.Write == service.WritePlain); err != nil {
		return service.Order{}, err
	}

	now := time.Now().UTC().Truncate(time.Microsecond)
	row := orderRow{Buyer: d.Buyer, IdempotencyKey: d.Key, RequestHash: d.RequestHash, SKU: d.SKU, Quantity: d.Quantity, CreatedAt: now}
	if d.Fence != nil {
		row.Fence = sql.NullInt64{Int64: *d.Fence, Valid: true}
	}
	// Through the transaction's connection directly, for LastInsertId: one
	// round trip fewer than SELECT LAST_INSERT_ID().
	res, err := tx.Statement.ConnPool.ExecContext(ctx,
		"INSERT INTO orders (buyer, idempotency_key, request_hash, sku, quantity, fence, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
		row.Buyer, row.IdempotencyKey, row.RequestHash, row.SKU, row.Quantity, row.Fence, row.CreatedAt)
	if err != nil {
		return service.Order{}, translate(ctx, "insert order", err)
	}
	if row.ID, err = res.LastInsertId(); err != nil {
		return service.Order{}, translate(ctx, "order id", err)
	}
	if err := tx.Exec("INSERT INTO stock_ledger (sku, kind, delta, order_id, created_at) VALUES (?, 'sale', ?, ?, ?)",
		d.SKU, -q, row.ID, now).Error; err != nil {
		return service.Order{}, translate(ctx, "insert ledger", err)
	}

	var upd *gorm.DB
	switch d.Write {
	case service.WritePlain:
		// Absolute values from the read: a lost update when writers overlap.
		upd = tx.Exec("UPDATE stock SET available = ?, sold = ?, version = version + 1, updated_at = ? WHERE sku = ?",
			cur.Available-q, cur.Sold+q, now, d.SKU)
	case service.WriteVersioned:
		upd = tx.Exec("UPDATE stock SET available = available - ?, sold = sold + ?, version = version + 1, updated_at = ? "+
			"WHERE sku = ? AND version = ? AND available >= ?", q, q, now, d.SKU, cur.Version, q)
	case service.WriteConditional:
		upd = tx.Exec("UPDATE stock SET available = available - ?, sold = sold + ?, version = version + 1, updated_at = ? "+
			"WHERE sku = ? AND available >= ?", q, q, now, d.SKU, q)
	case service.WriteForUpdate:
		upd = tx.Exec("UPDATE stock SET available = available - ?, sold = sold + ?, version = version + 1, updated_at = ? "+
			"WHERE sku = ?", q, q, now, d.SKU)
	default:
		return service.Order{}, fmt.Errorf("repo: unknown write mode %d", d.Write)
	}
	if upd.Error != nil {
		return service.Order{}, translate(ctx, "update stock", upd.Error)
	}
	if upd.RowsAffected == 0 {
		switch d.Write {
		case service.WriteVersioned:
			return service.Order{}, service.ErrConflict
		case service.WriteConditional:
			// Sold out or unknown: tell them apart outside the hot path.
			var n int64
			if err := tx.Raw("SELECT COUNT(*) FROM stock WHERE sku = ?", d.SKU).Scan(&n).Error; err != nil {
				return service.Order{}, translate(ctx, "read stock", err)
			}
			if n == 0 {
				return service.Order{}, service.ErrUnknownSKU
			}
			return service.Order{}, service.ErrSoldOut
		}
		return service.Order{}, service.ErrUnknownSKU
	}
	return row.order(), nil
}
