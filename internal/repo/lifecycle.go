package repo

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/seckill/stock/internal/service"
)

// The order lifecycle's writes. Each runs READ COMMITTED: its locking reads
// lock the order rows they return and no gaps, so a sweep never blocks the
// INSERT of a new order. Locks are taken orders first, then purchase rows
// (in key order), then stock rows, as the order path takes the last two; a
// batch takes its buyers' purchase rows in item order, so a deadlock with
// it can happen: InnoDB rolls one back, and the caller retries (ErrBusy).
var lifecycleTx = sql.TxOptions{Isolation: sql.LevelReadCommitted}

// Transition applies t as service.Store.Transition says.
func (s *Store) Transition(ctx context.Context, t service.Transition) (service.Outcome, error) {
	var out service.Outcome
	var decided error
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		rows, err := lockOrders(tx.Where("id = ?", t.ID))
		if err != nil {
			return err
		}
		if len(rows) == 0 || t.Buyer != "" && rows[0].Buyer != t.Buyer {
			return service.ErrOrderNotFound
		}
		row := rows[0]
		out.Order = row.order()
		var to service.Status
		// Decided on the server's clock after the row lock is held.
		to, decided = service.Decide(t, out.Order, dbClock{at: row.DBNow, sent: row.sent}.now())
		if to == row.Status {
			return nil
		}
		cause := t.Op
		if to == service.StatusExpired {
			cause = service.OpExpire
		}
		rets, err := s.move(tx, rows, to, t.PaymentRef, cause, cancelledBy(t))
		if err != nil {
			return err
		}
		out.Order.Status, out.Moved = to, true
		if to == service.StatusConfirmed && t.PaymentRef != "" {
			out.Order.PaymentRef = t.PaymentRef
		}
		if len(rets) > 0 {
			out.Return = &rets[0]
		}
		return nil
	}, &lifecycleTx)
	if err != nil {
		if service.IsError(err) {
			return service.Outcome{}, err
		}
		return service.Outcome{}, translate(ctx, "order transition", err)
	}
	return out, decided
}

// ExpireDue expires up to limit reserved orders past their deadline, as
// service.Store.ExpireDue says: rows another transaction holds (another
// sweeper's, a confirm's) are skipped, not waited for.
func (s *Store) ExpireDue(ctx context.Context, limit int) ([]service.Return, error) {
	var rets []service.Return
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		rows, err := lockOrders(tx.Where("status = ? AND expires_at <= UTC_TIMESTAMP(6)", service.StatusReserved).
			Order("expires_at").Limit(limit).Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate, Options: clause.LockingOptionsSkipLocked}))
		if err != nil || len(rows) == 0 {
			return err
		}
		if s.sweepHook != nil {
			s.sweepHook()
		}
		rets, err = s.move(tx, rows, service.StatusExpired, "", service.OpExpire, "")
		return err
	}, &lifecycleTx)
	if err != nil {
		return nil, translate(ctx, "expire orders", err)
	}
	return rets, nil
}

// OverdueFor is how long the oldest reserved order past its deadline has
// been overdue, on the server's clock (0: none is).
func (s *Store) OverdueFor(ctx context.Context) (time.Duration, error) {
	var us sql.NullInt64
	err := s.sql.QueryRowContext(ctx, "SELECT TIMESTAMPDIFF(MICROSECOND, MIN(expires_at), UTC_TIMESTAMP(6)) FROM orders "+
		"WHERE status = ? AND expires_at <= UTC_TIMESTAMP(6)", service.StatusReserved).Scan(&us)
	if err != nil {
		return 0, translate(ctx, "overdue orders", err)
	}
	return time.Duration(us.Int64) * time.Microsecond, nil
}

// lockOrders reads the orders q selects with FOR UPDATE (unless q names
// its own locking clause), with the server's clock.
func lockOrders(q *gorm.DB) ([]orderModel, error) {
	if _, ok := q.Statement.Clauses["FOR"]; !ok {
		q = q.Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate})
	}
	var rows []orderModel
	sent := time.Now()
	if err := q.Select("*, UTC_TIMESTAMP(6) AS db_now").Find(&rows).Error; err != nil {
		return nil, translate(q.Statement.Context, "lock orders", err)
	}
	for i := range rows {
		rows[i].sent = sent
	}
	return rows, nil
}

// cancelledBy is who cancels in t: the buyer when t names one, else an
// admin.
func cancelledBy(t service.Transition) string {
	if t.Buyer != "" {
		return "buyer"
	}
	return "admin"
}

// move writes rows, locked and reserved, to status to (storing paymentRef,
// if any, on confirmed only: a refused payment's is not the order's), takes
// their units off their buyers' unpaid counts, and moves them in the stock
// rows: to sold on a confirm, back to available (and the buyers'
// allowances) on a cancel or expiry (returns, by cause). Each SKU's UPDATE is
// followed by its orders' events (by: who cancels).
func (s *Store) move(tx *gorm.DB, rows []orderModel, to service.Status, paymentRef string, cause service.Op, by string) ([]service.Return, error) {
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	set := map[string]any{"status": to}
	if to == service.StatusConfirmed && paymentRef != "" {
		set["payment_ref"] = paymentRef
	}
	res := tx.Model(&orderModel{}).Where("id IN ? AND status = ?", ids, service.StatusReserved).Updates(set)
	switch {
	case res.Error != nil:
		return nil, res.Error
	case res.RowsAffected != int64(len(rows)):
		return nil, fmt.Errorf("repo: %d of %d locked reserved orders were not reserved: %w", int64(len(rows))-res.RowsAffected, len(rows), service.ErrBusy)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	// Paid or returned, the orders are no longer unpaid; a return gives the
	// allowance back too.
	if err := givePurchasesBack(tx, rows, to != service.StatusConfirmed); err != nil {
		return nil, err
	}
	if to == service.StatusConfirmed {
		for _, u := range unitsBySKU(rows) {
			if err := tx.Exec("UPDATE stock SET reserved = reserved - ?, sold = sold + ?, event_seq = LAST_INSERT_ID(event_seq + ?), updated_at = ? WHERE sku = ?",
				u.units, u.units, u.orders, now, u.sku).Error; err != nil {
				return nil, err
			}
			if err := insertEvents(gormExec(tx), u.sku, transitionEvents(ofSKU(rows, u.sku), to, ""), now); err != nil {
				return nil, err
			}
		}
		return nil, nil
	}
	return s.giveUnitsBack(tx, rows, transitionEvents(rows, to, by), cause, now)
}

// ofSKU is the rows of sku, in rows' order.
func ofSKU(rows []orderModel, sku string) []orderModel {
	var out []orderModel
	for _, r := range rows {
		if r.SKU == sku {
			out = append(out, r)
		}
	}
	return out
}

// skuUnits is the units of some orders of one SKU.
type skuUnits struct {
	sku    string
	orders int
	units  int64
}

// unitsBySKU sums rows' units per SKU, in SKU order (the order the stock
// rows are locked in).
func unitsBySKU(rows []orderModel) []skuUnits {
	var out []skuUnits
	for _, r := range rows {
		i := slices.IndexFunc(out, func(u skuUnits) bool { return u.sku == r.SKU })
		if i < 0 {
			out, i = append(out, skuUnits{sku: r.SKU}), len(out)
		}
		out[i].orders++
		out[i].units += int64(r.Quantity)
	}
	slices.SortFunc(out, func(a, b skuUnits) int { return cmp.Compare(a.sku, b.sku) })
	return out
}

// givePurchasesBack lowers the unpaid count of rows' buyers by their
// units (every reserved order is counted there) and, with allowance, their
// allowance too (counted while the SKU has a limit; a row left over from
// an earlier limit is rebuilt when one is switched on again), one statement
// per SKU, buyers in key order. Both floor at 0: a count never wraps.
func givePurchasesBack(tx *gorm.DB, rows []orderModel, allowance bool) error {
	per := map[string]map[string]int64{}
	for _, r := range rows {
		if per[r.SKU] == nil {
			per[r.SKU] = map[string]int64{}
		}
		per[r.SKU][r.Buyer] += int64(r.Quantity)
	}
	for _, sku := range slices.Sorted(maps.Keys(per)) {
		buyers := slices.Sorted(maps.Keys(per[sku]))
		var cases strings.Builder
		units := make([]any, 0, 2*len(buyers))
		for _, b := range buyers {
			cases.WriteString(" WHEN ? THEN ?")
			units = append(units, b, per[sku][b])
		}
		less := func(col string) string {
			return col + " = GREATEST(CAST(" + col + " AS SIGNED) - CASE buyer" + cases.String() + " ELSE 0 END, 0)"
		}
		q, args := "UPDATE buyer_purchases SET "+less("unpaid"), slices.Clone(units)
		if allowance {
			q, args = q+", "+less("quantity"), append(args, units...)
		}
		if err := tx.Exec(q+" WHERE sku = ? AND buyer IN ?", append(args, sku, buyers)...).Error; err != nil {
			return err
		}
	}
	return nil
}

// giveUnitsBack returns rows' units to available, SKU by SKU, with one
// return ledger row per order: each SKU's row is read locked and written as
// service.AfterReturn says (its restock sequence moved by the one rule, once
// per SKU); the version is left alone, so a return never looks like a
// write past the lock.
func (s *Store) giveUnitsBack(tx *gorm.DB, rows []orderModel, evs []eventRow, cause service.Op, now time.Time) ([]service.Return, error) {
	var rets []service.Return
	for _, u := range unitsBySKU(rows) {
		cur, err := readStock(tx, u.sku, true)
		if err != nil {
			return nil, err
		}
		after := service.AfterReturn(cur.stock(), u.units, s.maxQuantity)
		if err := tx.Exec("UPDATE stock SET available = ?, reserved = ?, restock_seq = ?, event_seq = LAST_INSERT_ID(event_seq + ?), updated_at = ? WHERE sku = ?",
			after.Available, after.Reserved, after.RestockSeq, u.orders, now, u.sku).Error; err != nil {
			return nil, err
		}
		var mine []eventRow
		for i, r := range rows {
			if r.SKU == u.sku {
				mine = append(mine, evs[i])
			}
		}
		if err := insertEvents(gormExec(tx), u.sku, mine, now); err != nil {
			return nil, err
		}
		rets = append(rets, service.Return{SKU: u.sku, Orders: u.orders, Units: u.units, Cause: cause, RestockSeq: after.RestockSeq})
	}
	ledger := make([]ledgerModel, len(rows))
	for i := range rows {
		ledger[i] = ledgerModel{SKU: rows[i].SKU, Kind: kindReturn, Delta: int64(rows[i].Quantity), OrderID: &rows[i].ID, CreatedAt: now}
	}
	if err := insertLedger(tx, ledger); err != nil {
		return nil, err
	}
	return rets, nil
}
