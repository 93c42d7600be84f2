package repo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/seckill/stock/internal/service"
)

// OrderByKey returns the order the buyer placed with an idempotency key, or
// service.ErrOrderNotFound; other errors wrap service.ErrUnavailable. The
// buyer matches byte for byte (the column is binary, and the row is
// checked again here: a schema with a PAD SPACE collation would match
// "alice " to "alice").
func (s *Store) OrderByKey(ctx context.Context, buyer, key string) (service.Order, error) {
	o, err := s.findOrder(s.db.WithContext(ctx).Where("buyer = ? AND idempotency_key = ?", buyer, key))
	if err == nil && (o.Buyer != buyer || o.Key != key) {
		return service.Order{}, service.ErrOrderNotFound
	}
	return o, err
}

// Order returns an order by id, or service.ErrOrderNotFound.
func (s *Store) Order(ctx context.Context, id int64) (service.Order, error) {
	return s.findOrder(s.db.WithContext(ctx).Where("id = ?", id))
}

// Orders returns the buyer's orders as f selects them, newest first. The
// buyer matches byte for byte, as in OrderByKey.
func (s *Store) Orders(ctx context.Context, buyer string, f service.OrderFilter) ([]service.Order, error) {
	q := ofSKUAndStatus(s.db.WithContext(ctx).Where("buyer = ?", buyer), f.SKU, f.Status)
	if f.Before > 0 {
		q = q.Where("id < ?", f.Before)
	}
	var rows []orderModel
	if err := q.Order("id DESC").Limit(f.Limit).Find(&rows).Error; err != nil {
		return nil, translate(ctx, "list orders", err)
	}
	out := make([]service.Order, 0, len(rows))
	for _, r := range rows {
		if r.Buyer == buyer {
			out = append(out, r.order())
		}
	}
	return out, nil
}

// AllOrders returns every buyer's orders as f selects them, oldest first,
// as a keyset page (id > after ORDER BY id); a connection's error wraps
// service.ErrUnavailable. A SKU's page walks ix_orders_sku, which InnoDB
// keys by (sku, id); the optimizer walks the primary key for any other, or
// ix_orders_due for the reserved orders (few: they expire).
func (s *Store) AllOrders(ctx context.Context, f service.AllOrdersFilter) ([]service.Order, error) {
	q := ofSKUAndStatus(s.db.WithContext(ctx).Where("id > ?", f.After), f.SKU, f.Status)
	var rows []orderModel
	if err := q.Order("id").Limit(f.Limit).Find(&rows).Error; err != nil {
		return nil, translate(ctx, "list all orders", err)
	}
	out := make([]service.Order, len(rows))
	for i, r := range rows {
		out[i] = r.order()
	}
	return out, nil
}

// ofSKUAndStatus narrows q to the orders of sku and status ("" for any).
func ofSKUAndStatus(q *gorm.DB, sku string, status service.Status) *gorm.DB {
	if sku != "" {
		q = q.Where("sku = ?", sku)
	}
	if status != "" {
		q = q.Where("status = ?", status)
	}
	return q
}

// findOrder returns the order q selects, or service.ErrOrderNotFound.
func (s *Store) findOrder(q *gorm.DB) (service.Order, error) {
	var row orderModel
	res := q.Limit(1).Find(&row)
	if res.Error != nil {
		return service.Order{}, translate(q.Statement.Context, "find order", res.Error)
	}
	if res.RowsAffected == 0 {
		return service.Order{}, service.ErrOrderNotFound
	}
	return row.order(), nil
}

// Deduct places an order in one transaction, guarded as d.Write says. The
// guarding UPDATE comes after the order and ledger rows (only a deadline a
// lock wait left behind is rewritten after it: settleDeadline), so a miss
// rolls them back with it. An order admitted before the SKU's
// latest restock (d.Admitted below its RestockSeq) is refused with a
// *service.RestockedError. It returns service.ErrSoldOut, a
// *service.LimitError, a *service.UnpaidError, service.ErrUnknownSKU,
// service.ErrConflict (the versioned UPDATE matched no row, or the
// conditional one met settings other than those it read),
// service.ErrDuplicateKey, an error wrapping service.ErrUnavailable or
// service.ErrBusy, or the error of d.BeforeCommit.
func (s *Store) Deduct(ctx context.Context, d service.Deduction) (service.Order, error) {
	var o service.Order
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		o, err = deduct(tx, d, s.maxQuantity)
		if err != nil {
			return err
		}
		if d.BeforeCommit != nil {
			return d.BeforeCommit()
		}
		return nil
	})
	if err != nil {
		if service.IsError(err) {
			return service.Order{}, err
		}
		return service.Order{}, translate(ctx, "deduct", err)
	}
	return o, nil
}

// readStock reads sku's stock row in tx (with FOR UPDATE when lock), or
// returns service.ErrUnknownSKU.
func readStock(tx *gorm.DB, sku string, lock bool) (stockModel, error) {
	q := tx
	if lock {
		q = q.Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate})
	}
	var row stockModel
	sent := time.Now()
	res := q.Select("*, UTC_TIMESTAMP(6) AS db_now").Where("sku = ?", sku).Limit(1).Find(&row)
	row.sent = sent
	if res.Error != nil {
		return row, translate(tx.Statement.Context, "read stock", res.Error)
	}
	if res.RowsAffected == 0 {
		return row, service.ErrUnknownSKU
	}
	return row, nil
}

// heldBy is what buyer holds of sku by buyer_purchases (0: no row), read
// with FOR UPDATE when lock: the row's latest value, not an older snapshot.
func heldBy(tx *gorm.DB, buyer, sku string, lock bool) (int64, error) {
	return purchased(tx, "quantity", buyer, sku, lock)
}

// purchased is column (quantity or unpaid) of buyer's purchase row of sku
// (0: no row), read as heldBy says.
func purchased(tx *gorm.DB, column, buyer, sku string, lock bool) (int64, error) {
	q := tx.Model(&purchaseModel{})
	if lock {
		q = q.Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate})
	}
	var held []int64
	if err := q.Where("buyer = ? AND sku = ?", buyer, sku).Limit(1).Pluck(column, &held).Error; err != nil {
		return 0, translate(tx.Statement.Context, "read "+column, err)
	}
	if len(held) == 0 {
		return 0, nil
	}
	return held[0], nil
}

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
	row := purchaseModel{Buyer: buyer, SKU: sku, Quantity: q}
	if plain {
		h, err := heldBy(tx, buyer, sku, false)
		if err != nil {
			return err
		}
		if h+q > limit {
			return &service.LimitError{Limit: limit, Held: h, Requested: q}
		}
		row.Quantity = h + q
		err = tx.Clauses(clause.OnConflict{DoUpdates: clause.Assignments(map[string]any{"quantity": h + q})}).Create(&row).Error
		return translate(ctx, "write allowance", err)
	}
	if q > limit { // refused whatever the buyer holds; say what that is
		h, err := heldBy(tx, buyer, sku, false)
		if err != nil {
			return err
		}
		return &service.LimitError{Limit: limit, Held: h, Requested: q}
	}
	// INSERT ... ON DUPLICATE KEY UPDATE; affected rows: 1 inserted, 2
	// updated, 0 left as it was (refused).
	res := tx.Clauses(clause.OnConflict{DoUpdates: clause.Assignments(map[string]any{
		"quantity": gorm.Expr("IF(quantity + ? <= ?, quantity + ?, quantity)", q, limit, q),
	})}).Create(&row)
	if res.Error != nil {
		return translate(ctx, "take allowance", res.Error)
	}
	if res.RowsAffected > 0 {
		return nil
	}
	h, err := heldBy(tx, buyer, sku, true)
	if err != nil {
		return err
	}
	return &service.LimitError{Limit: limit, Held: h, Requested: q}
}

// takeUnpaid counts q more reserved, unpaid units for buyer of sku, unless
// that would take the buyer past limit (0: no cap), in one upsert whose row
// lock serializes the buyer's concurrent orders, as takeAllowance does. It
// does so in every write mode (the count must match the orders: the audit
// checks it), and returns a *service.UnpaidError when refused.
func takeUnpaid(tx *gorm.DB, buyer, sku string, q, limit int64) error {
	refused := func(lock bool) error {
		u, err := purchased(tx, "unpaid", buyer, sku, lock)
		if err != nil {
			return err
		}
		return &service.UnpaidError{Cap: limit, Unpaid: u, Requested: q}
	}
	if limit > 0 && q > limit { // refused whatever the buyer has unpaid
		return refused(false)
	}
	grow := gorm.Expr("unpaid + ?", q)
	if limit > 0 {
		grow = gorm.Expr("IF(unpaid + ? <= ?, unpaid + ?, unpaid)", q, limit, q)
	}
	// Affected rows as in takeAllowance: 0 is a refusal.
	res := tx.Clauses(clause.OnConflict{DoUpdates: clause.Assignments(map[string]any{"unpaid": grow})}).
		Create(&purchaseModel{Buyer: buyer, SKU: sku, Unpaid: q})
	if res.Error != nil {
		return translate(tx.Statement.Context, "take unpaid", res.Error)
	}
	if res.RowsAffected > 0 {
		return nil
	}
	return refused(true)
}

// takeForBuyer takes an order of q units from its buyer's allowance under
// cur's per-buyer limit (takeAllowance, plain as it says) and, when cur's
// orders are reserved, counts them unpaid under the cap in force
// (takeUnpaid): the limit first, so its refusal wins. A refusal leaves the
// buyer's row as it was, so a batch can go on with its next item.
func takeForBuyer(tx *gorm.DB, buyer, sku string, q int64, cur stockModel, maxQuantity int64, plain bool) error {
	if err := takeAllowance(tx, buyer, sku, q, cur.PerBuyerLimit, plain); err != nil {
		return err
	}
	if cur.PaymentWindowSeconds <= 0 {
		return nil
	}
	err := takeUnpaid(tx, buyer, sku, q, cur.unpaidCap(maxQuantity))
	if errors.Is(err, service.ErrUnpaidLimit) && cur.PerBuyerLimit > 0 { // the allowance just taken, given back
		if gerr := tx.Exec("UPDATE buyer_purchases SET quantity = quantity - ? WHERE buyer = ? AND sku = ?", q, buyer, sku).Error; gerr != nil {
			return translate(tx.Statement.Context, "give allowance back", gerr)
		}
	}
	return err
}

// sale returns the UPDATE of a sale of q units in orders orders: available
// down, reserved (reserve) or sold up, version bumped, one event numbered
// per order (bumpSeq).
func sale(q int64, orders int, reserve bool, now time.Time) map[string]any {
	held := "sold"
	if reserve {
		held = "reserved"
	}
	return map[string]any{
		"available":  gorm.Expr("available - ?", q),
		held:         gorm.Expr(held+" + ?", q),
		"version":    gorm.Expr("version + 1"),
		"event_seq":  bumpSeq(orders),
		"updated_at": now,
	}
}

// deduct places d in tx: the read its write checks, the allowance, the
// order and its ledger row, then the guarded UPDATE (maxQuantity: as in
// Options, for the unpaid cap's default). It returns the errors of
// Store.Deduct.
func deduct(tx *gorm.DB, d service.Deduction, maxQuantity int64) (service.Order, error) {
	cur, err := readForDeduct(tx, d)
	if err != nil {
		return service.Order{}, err
	}
	q := int64(d.Quantity)
	if err := takeForBuyer(tx, d.Buyer, d.SKU, q, cur, maxQuantity, d.Write == service.WritePlain); err != nil {
		return service.Order{}, err
	}
	ctx := tx.Statement.Context
	now := time.Now().UTC().Truncate(time.Microsecond)
	status, expires := cur.newOrderStatus(cur.clock().now())
	row := orderModel{Buyer: d.Buyer, IdempotencyKey: d.Key, RequestHash: d.RequestHash, SKU: d.SKU, Quantity: d.Quantity,
		Status: status, ExpiresAt: expires, Fence: d.Fence, CreatedAt: now}
	if err := tx.Create(&row).Error; err != nil { // row.ID from the INSERT's LastInsertId
		return service.Order{}, translate(ctx, "insert order", err)
	}
	if err := tx.Create(&ledgerModel{SKU: d.SKU, Kind: kindSale, Delta: -q, OrderID: &row.ID, CreatedAt: now}).Error; err != nil {
		return service.Order{}, translate(ctx, "insert ledger", err)
	}
	if err := updateForDeduct(tx, d, cur, now); err != nil {
		return service.Order{}, err
	}
	if row.ExpiresAt, err = settleDeadline(gormExec(tx), cur, row.ExpiresAt, []int64{row.ID}); err != nil {
		return service.Order{}, translate(ctx, "settle deadline", err)
	}
	if err := insertEvents(gormExec(tx), d.SKU, placedEvents([]orderModel{row}), now); err != nil {
		return service.Order{}, translate(ctx, "insert events", err)
	}
	return row.order(), nil
}

// gormExec runs a statement in tx.
func gormExec(tx *gorm.DB) func(q string, args ...any) error {
	return func(q string, args ...any) error { return tx.Exec(q, args...).Error }
}

// readForDeduct reads what d's write checks before it writes: the whole
// row (with FOR UPDATE for WriteForUpdate), refused when restocked since d
// was admitted or sold out; for WriteConditional, whose UPDATE checks the
// stock itself, only the limit, the payment window, the restock sequence,
// the schedule and the unpaid cap, with a plain read (the UPDATE
// matches only while the row still has them).
func readForDeduct(tx *gorm.DB, d service.Deduction) (stockModel, error) {
	if d.Write != service.WriteConditional {
		cur, err := readStock(tx, d.SKU, d.Write == service.WriteForUpdate)
		if err != nil {
			return cur, err
		}
		if err := cur.saleRefusal(); err != nil {
			return cur, err
		}
		if err := service.Restocked(d.Admitted, cur.RestockSeq); err != nil {
			return cur, err
		}
		if cur.Available < int64(d.Quantity) {
			return cur, service.ErrSoldOut
		}
		return cur, nil
	}
	var got []stockModel
	sent := time.Now()
	if err := tx.Model(&stockModel{}).Select("per_buyer_limit, payment_window_seconds, restock_seq, sale_starts_at, sale_ends_at, max_unpaid_per_buyer, "+
		"UTC_TIMESTAMP(6) AS db_now").
		Where("sku = ?", d.SKU).Limit(1).Find(&got).Error; err != nil {
		return stockModel{}, translate(tx.Statement.Context, "read stock", err)
	}
	if len(got) == 0 {
		return stockModel{}, service.ErrUnknownSKU
	}
	got[0].sent = sent
	if err := got[0].saleRefusal(); err != nil {
		return got[0], err
	}
	return got[0], service.Restocked(d.Admitted, got[0].RestockSeq)
}

// updateForDeduct is d's UPDATE of the stock row, guarded as d.Write says
// (cur is what readForDeduct read). A guard that matched no row is
// service.ErrConflict (versioned), or, for the conditional write, whatever
// the row says now (updateMissed).
func updateForDeduct(tx *gorm.DB, d service.Deduction, cur stockModel, now time.Time) error {
	q, reserve := int64(d.Quantity), cur.PaymentWindowSeconds > 0
	upd := tx.Model(&stockModel{}).Where("sku = ?", d.SKU)
	switch d.Write {
	case service.WritePlain:
		// Absolute values from the read: a lost update when writers overlap.
		set := map[string]any{"available": cur.Available - q, "sold": cur.Sold + q, "version": gorm.Expr("version + 1"),
			"event_seq": bumpSeq(1), "updated_at": now}
		if reserve {
			delete(set, "sold")
			set["reserved"] = cur.Reserved + q
		}
		upd = upd.Updates(set)
	case service.WriteVersioned:
		upd = versionedGuard(upd, cur, q).Updates(sale(q, 1, reserve, now))
	case service.WriteConditional:
		upd = upd.Where("available >= ? AND per_buyer_limit = ? AND payment_window_seconds = ? AND restock_seq = ? "+
			"AND sale_starts_at <=> ? AND sale_ends_at <=> ? AND max_unpaid_per_buyer <=> ?", q, cur.PerBuyerLimit, cur.PaymentWindowSeconds,
			cur.RestockSeq, cur.SaleStartsAt, cur.SaleEndsAt, cur.MaxUnpaidPerBuyer).Updates(sale(q, 1, reserve, now))
	case service.WriteForUpdate:
		upd = upd.Updates(sale(q, 1, reserve, now))
	default:
		return fmt.Errorf("repo: unknown write mode %d", d.Write)
	}
	switch {
	case upd.Error != nil:
		return translate(tx.Statement.Context, "update stock", upd.Error)
	case upd.RowsAffected > 0:
		return nil
	case d.Write == service.WriteVersioned:
		return service.ErrConflict
	case d.Write == service.WriteConditional:
		return updateMissed(tx, d, cur)
	}
	return service.ErrUnknownSKU
}

// updateMissed tells why the conditional UPDATE matched no row, outside the
// hot path, from the row as it is now (a locking read): restocked since d
// was admitted, a new limit, window, schedule, unpaid cap or restock
// (service.ErrConflict: try again), or sold out.
func updateMissed(tx *gorm.DB, d service.Deduction, cur stockModel) error {
	row, err := readStock(tx, d.SKU, true)
	switch {
	case err != nil:
		return err
	case service.Restocked(d.Admitted, row.RestockSeq) != nil:
		return service.Restocked(d.Admitted, row.RestockSeq)
	case row.PerBuyerLimit != cur.PerBuyerLimit, row.PaymentWindowSeconds != cur.PaymentWindowSeconds, row.RestockSeq != cur.RestockSeq,
		row.stock().Schedule() != cur.stock().Schedule(), row.unpaidSetting() != cur.unpaidSetting():
		return service.ErrConflict
	}
	return service.ErrSoldOut
}
