package repo

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/seckill/stock/internal/service"
)

// Stock returns the stock row of sku, or service.ErrUnknownSKU.
func (s *Store) Stock(ctx context.Context, sku string) (service.Stock, error) {
	row, err := readStock(s.db.WithContext(ctx), sku, false)
	if err != nil {
		return service.Stock{}, err
	}
	return row.stock(), nil
}

// Precheck reads the stock row of sku and the buyer's order of key, if any,
// in one statement (one round trip, one snapshot). It returns
// service.ErrUnknownSKU for an unknown SKU.
func (s *Store) Precheck(ctx context.Context, sku, buyer, key string) (service.Stock, *service.Order, error) {
	st, orders, err := s.PrecheckKeys(ctx, sku, []service.BuyerKey{{Buyer: buyer, Key: key}})
	if err != nil {
		return st, nil, err
	}
	return st, orders[0], nil
}

// PrecheckKeys reads the stock row of sku and the orders of keys (of
// whatever SKU; nil for a key without one), in one statement: one round
// trip and one snapshot for any number of keys. It returns
// service.ErrUnknownSKU for an unknown SKU. The sold-out fast path sends it
// for every few orders of a flood, so it is built and scanned here, without
// gorm.
func (s *Store) PrecheckKeys(ctx context.Context, sku string, keys []service.BuyerKey) (service.Stock, []*service.Order, error) {
	var q strings.Builder
	// A LEFT JOIN on a constant condition: one row per order of the keys,
	// or one with no order, each with the stock row.
	q.WriteString("SELECT s.available, s.sold, s.version, s.per_buyer_limit, s.restock_seq, " +
		"o.id, o.buyer, o.idempotency_key, o.sku, o.request_hash, o.quantity, o.fence, o.created_at " +
		"FROM stock s LEFT JOIN orders o ON (o.buyer, o.idempotency_key) IN (")
	args := make([]any, 0, 1+2*len(keys))
	for i, k := range keys {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(?, ?)")
		args = append(args, k.Buyer, k.Key)
	}
	q.WriteString(") WHERE s.sku = ?")
	args = append(args, sku)
	rows, err := s.sql.QueryContext(ctx, q.String(), args...)
	if err != nil {
		return service.Stock{}, nil, translate(ctx, "precheck", err)
	}
	defer func() { _ = rows.Close() }()
	found := false
	st := service.Stock{SKU: sku}
	byKey := make(map[service.BuyerKey]*service.Order)
	for rows.Next() {
		var id sql.NullInt64
		var o orderModel
		var buyer, key, osku, hash sql.NullString
		var quantity sql.NullInt64
		var created sql.NullTime
		if err := rows.Scan(&st.Available, &st.Sold, &st.Version, &st.PerBuyerLimit, &st.RestockSeq,
			&id, &buyer, &key, &osku, &hash, &quantity, &o.Fence, &created); err != nil {
			return service.Stock{}, nil, translate(ctx, "precheck", err)
		}
		found = true
		if !id.Valid { // no order of any key
			continue
		}
		o.ID, o.Buyer, o.IdempotencyKey, o.SKU, o.RequestHash = id.Int64, buyer.String, key.String, osku.String, hash.String
		o.Quantity, o.CreatedAt = int(quantity.Int64), created.Time
		out := o.order()
		byKey[service.BuyerKey{Buyer: o.Buyer, Key: o.IdempotencyKey}] = &out
	}
	if err := rows.Err(); err != nil {
		return service.Stock{}, nil, translate(ctx, "precheck", err)
	}
	if !found {
		return service.Stock{}, nil, service.ErrUnknownSKU
	}
	orders := make([]*service.Order, len(keys))
	for i, k := range keys {
		orders[i] = byKey[k] // byte for byte, as in OrderByKey
	}
	return st, orders, nil
}

// SetStock creates sku with available units, or sets its available count,
// and records the change as a restock entry in the ledger, in one
// transaction. Setting the current value writes nothing. It returns the new row, or an error wrapping
// service.ErrUnavailable.
func (s *Store) SetStock(ctx context.Context, sku string, available, perBuyerLimit int64) (service.Stock, error) {
	var out service.Stock
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		now := time.Now().UTC().Truncate(time.Microsecond)
		cur, err := readStock(tx, sku, true)
		exists := err == nil
		if err != nil && !errors.Is(err, service.ErrUnknownSKU) {
			return err
		}
		var delta int64
		if !exists {
			delta = available
			row := stockModel{SKU: sku, Available: available, Stocked: available, Version: 1, PerBuyerLimit: perBuyerLimit, UpdatedAt: now}
			if err := tx.Create(&row).Error; err != nil {
				return err
			}
			out = row.stock()
		} else {
			if cur.Available == available {
				// The count does not change: no zero-delta ledger row. A
				// new limit bumps the version, so that an order which read
				// the old limit cannot commit (its versioned UPDATE misses,
				// and the conditional one checks the limit it read).
				out = cur.stock()
				if cur.PerBuyerLimit == perBuyerLimit {
					return nil
				}
				out.PerBuyerLimit, out.Version = perBuyerLimit, cur.Version+1
				seq := restockSeq(cur, available, perBuyerLimit, s.maxQuantity)
				out.RestockSeq = seq
				if err := tx.Model(&stockModel{}).Where("sku = ?", sku).Updates(map[string]any{
					"per_buyer_limit": perBuyerLimit, "version": gorm.Expr("version + 1"), "restock_seq": seq, "updated_at": now,
				}).Error; err != nil {
					return err
				}
				return recountPurchases(tx, sku, cur.PerBuyerLimit, perBuyerLimit)
			}
			delta = available - cur.Available
			seq := restockSeq(cur, available, perBuyerLimit, s.maxQuantity)
			out = service.Stock{SKU: sku, Available: available, Sold: cur.Sold, Version: cur.Version + 1, PerBuyerLimit: perBuyerLimit,
				RestockSeq: seq}
			if err := tx.Model(&stockModel{}).Where("sku = ?", sku).Updates(map[string]any{
				"available": available, "stocked": gorm.Expr("stocked + ?", delta), "version": gorm.Expr("version + 1"),
				"per_buyer_limit": perBuyerLimit, "restock_seq": seq, "updated_at": now,
			}).Error; err != nil {
				return err
			}
		}
		if err := tx.Create(&ledgerModel{SKU: sku, Kind: kindRestock, Delta: delta, CreatedAt: now}).Error; err != nil {
			return err
		}
		if exists {
			return recountPurchases(tx, sku, cur.PerBuyerLimit, perBuyerLimit)
		}
		return nil
	})
	if err != nil {
		return service.Stock{}, translate(ctx, "set stock", err)
	}
	return out, nil
}

// restockSeq is cur's restock sequence after setting available and limit:
// one more when the change can make room for an order refused before it
// (more units where fewer than maxQuantity were left: a refusal for stock
// needs fewer left than an order may ask for, and sales since only lowered
// the count; or a limit raised, or removed), the same otherwise.
func restockSeq(cur stockModel, available, limit, maxQuantity int64) int64 {
	raised := cur.PerBuyerLimit > 0 && (limit == 0 || limit > cur.PerBuyerLimit)
	if available > cur.Available && cur.Available < maxQuantity || raised {
		return cur.RestockSeq + 1
	}
	return cur.RestockSeq
}

// recountPurchases rebuilds the SKU's purchase rows from its orders when a
// limit is switched on: orders are counted there only while a limit is set
// (so a SKU without one pays nothing for it).
func recountPurchases(tx *gorm.DB, sku string, from, to int64) error {
	if to == 0 || from != 0 {
		return nil
	}
	if err := tx.Where("sku = ?", sku).Delete(&purchaseModel{}).Error; err != nil {
		return err
	}
	// INSERT ... SELECT: clearer in SQL than through the builder.
	return tx.Exec("INSERT INTO buyer_purchases (buyer, sku, quantity) "+
		"SELECT buyer, sku, SUM(quantity) FROM orders WHERE sku = ? GROUP BY buyer, sku", sku).Error
}

// Audit reconciles sku from one consistent snapshot of the stock row, its
// orders and its ledger. It returns service.ErrUnknownSKU for an unknown SKU.
func (s *Store) Audit(ctx context.Context, sku string) (service.Audit, error) {
	a := service.Audit{SKU: sku}
	found := false
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var rows []struct{ Available, Sold, Stocked, PerBuyerLimit int64 }
		if err := tx.Raw("SELECT available, sold, stocked, per_buyer_limit FROM stock WHERE sku = ?", sku).Scan(&rows).Error; err != nil {
			return err
		}
		if len(rows) == 0 {
			return nil
		}
		found = true
		a.Available, a.Sold, a.Stocked, a.PerBuyerLimit = rows[0].Available, rows[0].Sold, rows[0].Stocked, rows[0].PerBuyerLimit
		var o struct{ N, Q, K int64 }
		if err := tx.Raw("SELECT COUNT(*) AS n, COALESCE(SUM(quantity), 0) AS q, COUNT(DISTINCT buyer, idempotency_key) AS k FROM orders WHERE sku = ?", sku).
			Scan(&o).Error; err != nil {
			return err
		}
		a.Orders, a.OrderedQuantity, a.DistinctKeys = o.N, o.Q, o.K
		// What each buyer holds, from the orders themselves.
		var b struct{ MaxHeld, OverLimit int64 }
		if err := tx.Raw("SELECT COALESCE(MAX(held), 0) AS max_held, COALESCE(SUM(? > 0 AND held > ?), 0) AS over_limit "+
			"FROM (SELECT SUM(quantity) AS held FROM orders WHERE sku = ? GROUP BY buyer) h", a.PerBuyerLimit, a.PerBuyerLimit, sku).
			Scan(&b).Error; err != nil {
			return err
		}
		a.MaxBuyerHolds, a.BuyersOverLimit = b.MaxHeld, b.OverLimit
		// The purchase rows (kept while a limit is set) must agree with the
		// orders of each buyer they count.
		if a.PerBuyerLimit > 0 {
			var m struct{ Rows, Orders int64 }
			if err := tx.Raw("SELECT "+
				"(SELECT COUNT(*) FROM buyer_purchases p LEFT JOIN (SELECT buyer, SUM(quantity) AS held FROM orders WHERE sku = ? GROUP BY buyer) h "+
				"ON h.buyer = p.buyer WHERE p.sku = ? AND p.quantity <> COALESCE(h.held, 0)) AS `rows`, "+
				"(SELECT COUNT(*) FROM (SELECT buyer FROM orders WHERE sku = ? GROUP BY buyer) h LEFT JOIN buyer_purchases p "+
				"ON p.buyer = h.buyer AND p.sku = ? WHERE p.buyer IS NULL) AS orders", sku, sku, sku, sku).Scan(&m).Error; err != nil {
				return err
			}
			a.LedgerMismatch = m.Rows + m.Orders
		}
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
