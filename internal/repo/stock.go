package repo

import (
	"context"
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

// SetStock creates sku with available units, or sets its available count,
// and records the change as a restock entry in the ledger, in one
// transaction. It returns the new row, or an error wrapping
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
