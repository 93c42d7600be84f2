package repo

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/seckill/stock/events"
	"github.com/seckill/stock/internal/service"
)

// Stock returns the stock row of sku, or service.ErrUnknownSKU.
func (s *Store) Stock(ctx context.Context, sku string) (service.Stock, error) {
	row, err := readStock(s.db.WithContext(ctx), sku, false)
	if err != nil {
		return service.Stock{}, err
	}
	st := row.stockWithCap(s.maxQuantity)
	st.Now = service.At(row.DBNow)
	return st, nil
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
		"o.id, o.buyer, o.idempotency_key, o.sku, o.request_hash, o.quantity, o.status, o.expires_at, o.payment_ref, o.fence, o.created_at " +
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
		var buyer, key, osku, hash, status sql.NullString
		var quantity sql.NullInt64
		var created sql.NullTime
		if err := rows.Scan(&st.Available, &st.Sold, &st.Version, &st.PerBuyerLimit, &st.RestockSeq,
			&id, &buyer, &key, &osku, &hash, &quantity, &status, &o.ExpiresAt, &o.PaymentRef, &o.Fence, &created); err != nil {
			return service.Stock{}, nil, translate(ctx, "precheck", err)
		}
		found = true
		if !id.Valid { // no order of any key
			continue
		}
		o.ID, o.Buyer, o.IdempotencyKey, o.SKU, o.RequestHash = id.Int64, buyer.String, key.String, osku.String, hash.String
		o.Quantity, o.Status, o.CreatedAt = int(quantity.Int64), service.Status(status.String), created.Time
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

// SetStock creates sku as set says, or sets its available count, per-buyer
// limit, payment window, schedule and unpaid cap, and records a change of the count as
// a restock entry in the ledger, in one transaction. Setting the current
// values writes nothing. A new limit, window, schedule or unpaid cap bumps
// the version, so that an order which read the old one cannot commit (its
// versioned UPDATE misses, and the conditional one checks them all). It
// returns the new row, or an error wrapping service.ErrInvalid (an end not
// after the start) or service.ErrUnavailable.
func (s *Store) SetStock(ctx context.Context, sku string, set service.StockSetting) (service.Stock, error) {
	var out service.Stock
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		now := time.Now().UTC().Truncate(time.Microsecond)
		cur, err := readStock(tx, sku, true)
		if errors.Is(err, service.ErrUnknownSKU) {
			out, err = createStock(tx, sku, set, now, s.maxQuantity)
			return err
		}
		if err != nil {
			return err
		}
		sched, err := set.ScheduleAfter(cur.stock().Schedule())
		if err != nil {
			return err
		}
		out = cur.stockWithCap(s.maxQuantity)
		if cur.Available == set.Available && cur.PerBuyerLimit == set.PerBuyerLimit && cur.PaymentWindowSeconds == set.PaymentWindowSeconds &&
			sched == out.Schedule() && cur.unpaidSetting() == set.MaxUnpaid {
			return nil
		}
		out.Available, out.PerBuyerLimit, out.PaymentWindowSeconds = set.Available, set.PerBuyerLimit, set.PaymentWindowSeconds
		out.SaleStartsAt, out.SaleEndsAt, out.UnpaidSetting = sched.StartsAt, sched.EndsAt, set.MaxUnpaid
		out.MaxUnpaidPerBuyer = service.UnpaidCapFor(set.MaxUnpaid, set.PerBuyerLimit, set.PaymentWindowSeconds, s.maxQuantity)
		out.Version, out.RestockSeq = cur.Version+1, service.RestockSeqAfter(cur.stock(), out, false, s.maxQuantity)
		delta := set.Available - cur.Available
		if err := tx.Model(&stockModel{}).Where("sku = ?", sku).Updates(map[string]any{
			"available": set.Available, "stocked": gorm.Expr("stocked + ?", delta), "version": gorm.Expr("version + 1"),
			"per_buyer_limit": set.PerBuyerLimit, "payment_window_seconds": set.PaymentWindowSeconds, "restock_seq": out.RestockSeq,
			"sale_starts_at": sched.StartsAt.Ptr(), "sale_ends_at": sched.EndsAt.Ptr(), "max_unpaid_per_buyer": unpaidColumn(set.MaxUnpaid),
			"updated_at": now,
		}).Error; err != nil {
			return err
		}
		if delta != 0 { // no zero-delta ledger rows
			if err := tx.Create(&ledgerModel{SKU: sku, Kind: kindRestock, Delta: delta, CreatedAt: now}).Error; err != nil {
				return err
			}
		}
		if err := stockChanged(tx, sku, out, now); err != nil {
			return err
		}
		return recountPurchases(tx, sku, cur.PerBuyerLimit, set.PerBuyerLimit)
	})
	if err != nil {
		if service.IsError(err) {
			return service.Stock{}, err
		}
		return service.Stock{}, translate(ctx, "set stock", err)
	}
	return out, nil
}

// createStock inserts sku's row as set says, its restock entry and its
// stock.changed event, and returns the row (its unpaid cap in force for
// orders of at most maxQuantity units).
func createStock(tx *gorm.DB, sku string, set service.StockSetting, now time.Time, maxQuantity int64) (service.Stock, error) {
	sched, err := set.ScheduleAfter(service.Schedule{})
	if err != nil {
		return service.Stock{}, err
	}
	row := stockModel{SKU: sku, Available: set.Available, Stocked: set.Available, Version: 1, PerBuyerLimit: set.PerBuyerLimit,
		PaymentWindowSeconds: set.PaymentWindowSeconds, SaleStartsAt: sched.StartsAt.Ptr(), SaleEndsAt: sched.EndsAt.Ptr(),
		MaxUnpaidPerBuyer: unpaidColumn(set.MaxUnpaid), UpdatedAt: now}
	out := row.stockWithCap(maxQuantity)
	if err := tx.Omit("db_now").Create(&row).Error; err != nil {
		return out, err
	}
	if err := tx.Create(&ledgerModel{SKU: sku, Kind: kindRestock, Delta: set.Available, CreatedAt: now}).Error; err != nil {
		return out, err
	}
	return out, stockChanged(tx, sku, out, now)
}

// recountPurchases rebuilds the SKU's purchase rows from its reserved and
// confirmed orders when a limit is switched on: orders are counted in
// quantity only while a limit is set (so a SKU without one pays nothing
// for it). The unpaid counts, kept for every reserved order, are rebuilt
// with them from the same orders, so they stay what they were.
func recountPurchases(tx *gorm.DB, sku string, from, to int64) error {
	if to == 0 || from != 0 {
		return nil
	}
	if err := tx.Where("sku = ?", sku).Delete(&purchaseModel{}).Error; err != nil {
		return err
	}
	// INSERT ... SELECT: clearer in SQL than through the builder.
	return tx.Exec("INSERT INTO buyer_purchases (buyer, sku, quantity, unpaid) "+
		"SELECT buyer, sku, SUM(quantity), SUM(IF(status = 'reserved', quantity, 0)) FROM orders "+
		"WHERE sku = ? AND status IN ('reserved', 'confirmed') GROUP BY buyer, sku", sku).Error
}

// Audit reconciles sku from one consistent snapshot of the stock row, its
// orders and its ledger. It returns service.ErrUnknownSKU for an unknown SKU.
func (s *Store) Audit(ctx context.Context, sku string) (service.Audit, error) {
	a := service.Audit{SKU: sku}
	found := false
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var rows []stockModel
		if err := tx.Raw("SELECT * FROM stock WHERE sku = ?", sku).Scan(&rows).Error; err != nil {
			return err
		}
		if found = len(rows) > 0; !found {
			return nil
		}
		r := rows[0]
		a.Available, a.Reserved, a.Sold, a.Stocked = r.Available, r.Reserved, r.Sold, r.Stocked
		a.PerBuyerLimit, a.PaymentWindowSeconds = r.PerBuyerLimit, r.PaymentWindowSeconds
		for _, step := range []func(*gorm.DB, *service.Audit) error{auditOrders, auditBuyers, auditUnpaid, auditLedger} {
			if err := step(tx, &a); err != nil {
				return err
			}
		}
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

// auditOrders counts a.SKU's orders and units by status, and its keys.
func auditOrders(tx *gorm.DB, a *service.Audit) error {
	var byStatus []struct {
		Status service.Status
		N, Q   int64
	}
	if err := tx.Raw("SELECT status, COUNT(*) AS n, SUM(quantity) AS q FROM orders WHERE sku = ? GROUP BY status", a.SKU).
		Scan(&byStatus).Error; err != nil {
		return err
	}
	orders, units := map[service.Status]int64{}, map[service.Status]int64{}
	for _, r := range byStatus {
		orders[r.Status], units[r.Status] = r.N, r.Q
	}
	a.CountByStatus(orders, units)
	return tx.Raw("SELECT COUNT(DISTINCT buyer, idempotency_key) FROM orders WHERE sku = ?", a.SKU).Scan(&a.DistinctKeys).Error
}

// heldUnits is, per buyer of a SKU, the units of their reserved and
// confirmed orders: what the per-buyer limit counts.
const heldUnits = "SELECT buyer, SUM(quantity) AS held FROM orders WHERE sku = ? AND status IN ('reserved', 'confirmed') GROUP BY buyer"

// auditBuyers finds buyers over the limit and, while a limit is set,
// purchase rows that disagree with the orders they count.
func auditBuyers(tx *gorm.DB, a *service.Audit) error {
	var b struct{ MaxHeld, OverLimit int64 }
	if err := tx.Raw("SELECT COALESCE(MAX(held), 0) AS max_held, COALESCE(SUM(? > 0 AND held > ?), 0) AS over_limit "+
		"FROM ("+heldUnits+") h", a.PerBuyerLimit, a.PerBuyerLimit, a.SKU).Scan(&b).Error; err != nil {
		return err
	}
	a.MaxBuyerHolds, a.BuyersOverLimit = b.MaxHeld, b.OverLimit
	if a.PerBuyerLimit == 0 {
		return nil
	}
	var m struct{ Rows, Orders int64 }
	if err := tx.Raw("SELECT "+
		"(SELECT COUNT(*) FROM buyer_purchases p LEFT JOIN ("+heldUnits+") h "+
		"ON h.buyer = p.buyer WHERE p.sku = ? AND p.quantity <> COALESCE(h.held, 0)) AS `rows`, "+
		"(SELECT COUNT(*) FROM ("+heldUnits+") h LEFT JOIN buyer_purchases p "+
		"ON p.buyer = h.buyer AND p.sku = ? WHERE p.buyer IS NULL) AS orders", a.SKU, a.SKU, a.SKU, a.SKU).Scan(&m).Error; err != nil {
		return err
	}
	a.LedgerMismatch = m.Rows + m.Orders
	return nil
}

// unpaidUnits is, per buyer of a SKU, the units of their reserved orders:
// what buyer_purchases.unpaid counts.
const unpaidUnits = "SELECT buyer, SUM(quantity) AS units FROM orders WHERE sku = ? AND status = 'reserved' GROUP BY buyer"

// auditUnpaid counts the buyers whose unpaid count disagrees with their
// reserved orders: a row that says otherwise, or reserved orders without a
// row.
func auditUnpaid(tx *gorm.DB, a *service.Audit) error {
	return tx.Raw("SELECT "+
		"(SELECT COUNT(*) FROM buyer_purchases p LEFT JOIN ("+unpaidUnits+") u "+
		"ON u.buyer = p.buyer WHERE p.sku = ? AND p.unpaid <> COALESCE(u.units, 0)) + "+
		"(SELECT COUNT(*) FROM ("+unpaidUnits+") u LEFT JOIN buyer_purchases p "+
		"ON p.buyer = u.buyer AND p.sku = ? WHERE p.buyer IS NULL)", a.SKU, a.SKU, a.SKU, a.SKU).Scan(&a.UnpaidMismatch).Error
}

// auditLedger sums the ledger by kind and checks one return row, of its
// units, per cancelled or expired order and none for any other.
func auditLedger(tx *gorm.DB, a *service.Audit) error {
	var l struct{ Restocked, Sold, Returned int64 }
	if err := tx.Raw("SELECT COALESCE(SUM(CASE WHEN kind = 'restock' THEN delta END), 0) AS restocked, "+
		"COALESCE(-SUM(CASE WHEN kind = 'sale' THEN delta END), 0) AS sold, "+
		"COALESCE(SUM(CASE WHEN kind = 'return' THEN delta END), 0) AS returned FROM stock_ledger WHERE sku = ?", a.SKU).
		Scan(&l).Error; err != nil {
		return err
	}
	a.LedgerRestocked, a.LedgerSold, a.LedgerReturned = l.Restocked, l.Sold, l.Returned
	var bad struct{ Orders, Stray int64 }
	if err := tx.Raw("SELECT "+
		"(SELECT COUNT(*) FROM orders o LEFT JOIN (SELECT order_id, COUNT(*) AS n, SUM(delta) AS d FROM stock_ledger "+
		"WHERE sku = ? AND kind = 'return' GROUP BY order_id) r ON r.order_id = o.id WHERE o.sku = ? AND "+
		"IF(o.status IN ('cancelled', 'expired'), r.n IS NULL OR r.n <> 1 OR r.d <> o.quantity, r.n IS NOT NULL)) AS orders, "+
		"(SELECT COUNT(*) FROM stock_ledger l LEFT JOIN orders o ON o.id = l.order_id "+
		"WHERE l.sku = ? AND l.kind = 'return' AND (o.id IS NULL OR o.sku <> l.sku)) AS stray", a.SKU, a.SKU, a.SKU).
		Scan(&bad).Error; err != nil {
		return err
	}
	a.ReturnMismatch = bad.Orders + bad.Stray
	return nil
}

// stockChanged numbers and writes sku's stock.changed event of the row
// after the change (st).
func stockChanged(tx *gorm.DB, sku string, st service.Stock, now time.Time) error {
	if err := tx.Exec("UPDATE stock SET event_seq = LAST_INSERT_ID(event_seq + 1) WHERE sku = ?", sku).Error; err != nil {
		return err
	}
	return insertEvents(gormExec(tx), sku, []eventRow{{typ: events.StockChanged, stock: stockEvent(st)}}, now)
}

// SalesStarting returns the stock rows whose sale starts after now and
// within within, by the server's clock.
func (s *Store) SalesStarting(ctx context.Context, within time.Duration) ([]service.Stock, error) {
	var rows []stockModel
	err := s.db.WithContext(ctx).Where("sale_starts_at > UTC_TIMESTAMP(6) AND sale_starts_at <= UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND",
		within.Microseconds()).Find(&rows).Error
	if err != nil {
		return nil, translate(ctx, "sales starting", err)
	}
	out := make([]service.Stock, len(rows))
	for i, r := range rows {
		out[i] = r.stockWithCap(s.maxQuantity)
	}
	return out, nil
}
