package repo

import (
	"context"
	"database/sql"
	"time"

	"gorm.io/gorm"

	"github.com/seckill/stock/internal/service"
)

// Stock returns the stock row of sku, or service.ErrUnknownSKU.
func (s *Store) Stock(ctx context.Context, sku string) (service.Stock, error) {
	var rows []stockRow
	if err := s.db.WithContext(ctx).Raw("SELECT available, sold, version FROM stock WHERE sku = ?", sku).Scan(&rows).Error; err != nil {
		return service.Stock{}, translate(ctx, "read stock", err)
	}
	if len(rows) == 0 {
		return service.Stock{}, service.ErrUnknownSKU
	}
	return service.Stock{SKU: sku, Available: rows[0].Available, Sold: rows[0].Sold, Version: rows[0].Version}, nil
}

// Precheck reads the stock row of sku and the order of key, if any, in one
// statement (one round trip, one snapshot). It returns service.ErrUnknownSKU
// for an unknown SKU.
func (s *Store) Precheck(ctx context.Context, sku, key string) (service.Stock, *service.Order, error) {
	var rows []struct {
		Available, Sold, Version int64
		OID                      sql.NullInt64  `gorm:"column:oid"`
		OSKU                     sql.NullString `gorm:"column:osku"`
		RequestHash              sql.NullString `gorm:"column:request_hash"`
		Quantity                 sql.NullInt64  `gorm:"column:quantity"`
		Fence                    sql.NullInt64  `gorm:"column:fence"`
		CreatedAt                sql.NullTime   `gorm:"column:created_at"`
	}
	err := s.db.WithContext(ctx).Raw("SELECT s.available, s.sold, s.version, o.id AS oid, o.sku AS osku, o.request_hash, o.quantity, o.fence, o.created_at "+
		"FROM stock s LEFT JOIN orders o ON o.idempotency_key = ? WHERE s.sku = ?", key, sku).Scan(&rows).Error
	if err != nil {
		return service.Stock{}, nil, translate(ctx, "precheck", err)
	}
	if len(rows) == 0 {
		return service.Stock{}, nil, service.ErrUnknownSKU
	}
	r := rows[0]
	st := service.Stock{SKU: sku, Available: r.Available, Sold: r.Sold, Version: r.Version}
	if !r.OID.Valid {
		return st, nil, nil
	}
	o := orderRow{ID: r.OID.Int64, IdempotencyKey: key, SKU: r.OSKU.String, RequestHash: r.RequestHash.String,
		Quantity: int(r.Quantity.Int64), Fence: r.Fence, CreatedAt: r.CreatedAt.Time}
	out := o.order()
	return st, &out, nil
}

// SetStock creates sku with available units, or sets its available count,
// and records the change as a restock entry in the ledger, in one
// transaction. Setting the current value writes nothing. It returns the new row, or an error wrapping
// service.ErrUnavailable.
func (s *Store) SetStock(ctx context.Context, sku string, available int64) (service.Stock, error) {
	var out service.Stock
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		now := time.Now().UTC().Truncate(time.Microsecond)
		var rows []stockRow
		if err := tx.Raw("SELECT available, sold, version FROM stock WHERE sku = ? FOR UPDATE", sku).Scan(&rows).Error; err != nil {
			return err
		}
		var delta int64
		if len(rows) == 0 {
			delta = available
			out = service.Stock{SKU: sku, Available: available, Version: 1}
			if err := tx.Exec("INSERT INTO stock (sku, available, sold, stocked, version, updated_at) VALUES (?, ?, 0, ?, 1, ?)",
				sku, available, available, now).Error; err != nil {
				return err
			}
		} else {
			cur := rows[0]
			if cur.Available == available {
				// Nothing changes: no version bump, no zero-delta ledger row.
				out = service.Stock{SKU: sku, Available: cur.Available, Sold: cur.Sold, Version: cur.Version}
				return nil
			}
			delta = available - cur.Available
			out = service.Stock{SKU: sku, Available: available, Sold: cur.Sold, Version: cur.Version + 1}
			if err := tx.Exec("UPDATE stock SET available = ?, stocked = stocked + ?, version = version + 1, updated_at = ? WHERE sku = ?",
				available, delta, now, sku).Error; err != nil {
				return err
			}
		}
		return tx.Exec("INSERT INTO stock_ledger (sku, kind, delta, created_at) VALUES (?, 'restock', ?, ?)", sku, delta, now).Error
	})
	if err != nil {
		return service.Stock{}, translate(ctx, "set stock", err)
	}
	return out, nil
}

// Audit reconciles sku from one consistent snapshot of the stock row, its
// orders and its ledger. It returns service.ErrUnknownSKU for an unknown SKU.
func (s *Store) Audit(ctx context.Context, sku string) (service.Audit, error) {
	a := service.Audit{SKU: sku}
	found := false
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var rows []struct{ Available, Sold, Stocked int64 }
		if err := tx.Raw("SELECT available, sold, stocked FROM stock WHERE sku = ?", sku).Scan(&rows).Error; err != nil {
			return err
		}
		if len(rows) == 0 {
			return nil
		}
		found = true
		a.Available, a.Sold, a.Stocked = rows[0].Available, rows[0].Sold, rows[0].Stocked
		var o struct{ N, Q, K int64 }
		if err := tx.Raw("SELECT COUNT(*) AS n, COALESCE(SUM(quantity), 0) AS q, COUNT(DISTINCT idempotency_key) AS k FROM orders WHERE sku = ?", sku).
			Scan(&o).Error; err != nil {
			return err
		}
		a.Orders, a.OrderedQuantity, a.DistinctKeys = o.N, o.Q, o.K
		var l struct{ Restocked, Sold int64 }
		if err := tx.Raw("SELECT COALESCE(SUM(CASE WHEN kind = 'restock' THEN delta END), 0) AS restocked, "+
			"COALESCE(-SUM(CASE WHEN kind = 'sale' THEN delta END), 0) AS sold FROM stock_ledger WHERE sku = ?", sku).
			Scan(&l).Error; err != nil {
			return err
		}
		a.LedgerRestocked, a.LedgerSold = l.Restocked, l.Sold
		return nil
	}, &sqlTxReadOnly)
	if err != nil {
		return service.Audit{}, translate(ctx, "audit", err)
	}
	if !found {
		return service.Audit{}, service.ErrUnknownSKU
	}
	a.Check()
	return a, nil
}
