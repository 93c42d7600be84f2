package repo

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/seckill/stock/events"
	"github.com/seckill/stock/internal/outbox"
)

// The outbox's reads and the relays' bookkeeping (outbox.Store). Times
// come from the server's clock (UTC_TIMESTAMP(6)), so instances with
// skewed clocks agree on leases.

var _ outbox.Store = (*Store)(nil)

// Outbox is the store's outbox.Store.
func (s *Store) Outbox() outbox.Store { return s }

// readCommitted is the isolation of the outbox's own transactions.
var readCommitted = sql.TxOptions{Isolation: sql.LevelReadCommitted}

// micros is d in whole microseconds, for INTERVAL ... MICROSECOND.
func micros(d time.Duration) int64 { return d.Microseconds() }

// TakeLease takes or renews the lease name for owner (outbox.Store).
func (s *Store) TakeLease(ctx context.Context, name, owner string, ttl time.Duration) (bool, error) {
	// The IFs run left to right: owner first, then the lease of the owner
	// it now names.
	_, err := s.sql.ExecContext(ctx, `INSERT INTO outbox_leases (name, owner, lease_until)
		VALUES (?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
		ON DUPLICATE KEY UPDATE
		  owner = IF(owner = VALUES(owner) OR lease_until < UTC_TIMESTAMP(6), VALUES(owner), owner),
		  lease_until = IF(owner = VALUES(owner), VALUES(lease_until), lease_until)`, name, owner, micros(ttl))
	if err != nil {
		return false, translate(ctx, "take lease", err)
	}
	var holder string
	if err := s.sql.QueryRowContext(ctx, "SELECT owner FROM outbox_leases WHERE name = ?", name).Scan(&holder); err != nil {
		return false, translate(ctx, "read lease", err)
	}
	return holder == owner, nil
}

// Stamp gives feed positions to committed events without one
// (outbox.Store). The locking read skips rows other transactions still
// hold (being written), so a slow writer never holds the feed up; its rows
// come later with higher positions. Per SKU that keeps seq order: a SKU's
// next event cannot be written before the previous one committed. Two
// stampers never run at once: each locks the "stamp" row of outbox_leases
// first, for its whole transaction.
//
// It runs READ COMMITTED: its locking read then takes no gap locks, which
// would hold up (or deadlock with) the INSERTs of new events.
func (s *Store) Stamp(ctx context.Context, limit int) (int, error) {
	tx, err := s.sql.BeginTx(ctx, &readCommitted)
	if err != nil {
		return 0, translate(ctx, "stamp", err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `INSERT INTO outbox_leases (name, owner, lease_until) VALUES ('stamp', '', UTC_TIMESTAMP(6))
		ON DUPLICATE KEY UPDATE name = name`); err != nil {
		return 0, translate(ctx, "stamp", err)
	}
	ids, err := scanIDs(tx.QueryContext(ctx, "SELECT id FROM outbox_events WHERE pos IS NULL ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED", limit))
	if err != nil || len(ids) == 0 {
		return 0, translate(ctx, "stamp", err)
	}
	// Numbered in id order from the highest position, in one pass (a
	// session variable counts; the transaction's one connection keeps it).
	if _, err := tx.ExecContext(ctx, "SET @stamp_pos = (SELECT COALESCE(MAX(pos), 0) FROM outbox_events)"); err != nil {
		return 0, translate(ctx, "stamp", err)
	}
	in := strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ")
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	if _, err := tx.ExecContext(ctx, "UPDATE outbox_events SET pos = (@stamp_pos := @stamp_pos + 1) WHERE id IN ("+in+") ORDER BY id", args...); err != nil { //nolint:gosec // G202: placeholders only
		return 0, translate(ctx, "stamp", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, translate(ctx, "stamp", err)
	}
	return len(ids), nil
}

// scanIDs reads one integer column.
func scanIDs(rows *sql.Rows, err error) ([]int64, error) {
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// eventSelect reads events with their orders' fields.
const eventSelect = `SELECT e.id, e.sku, e.seq, e.type, e.occurred_at, e.order_id, e.status, e.cancelled_by, e.stock,
	COALESCE(e.pos, 0), o.buyer, o.quantity, o.expires_at, o.payment_ref
	FROM outbox_events e LEFT JOIN orders o ON o.id = e.order_id `

// scanEvents reads eventSelect's rows.
func scanEvents(rows *sql.Rows, err error) ([]events.FeedEvent, error) {
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var out []events.FeedEvent
	for rows.Next() {
		var e events.FeedEvent
		var id int64
		var orderID, quantity sql.NullInt64
		var status, by, stock, buyer, ref sql.NullString
		var expires sql.NullTime
		if err := rows.Scan(&id, &e.SKU, &e.Seq, &e.Type, &e.OccurredAt, &orderID, &status, &by, &stock,
			&e.Position, &buyer, &quantity, &expires, &ref); err != nil {
			return nil, err
		}
		e.ID = strconv.FormatInt(id, 10)
		e.OccurredAt = e.OccurredAt.UTC()
		if orderID.Valid {
			e.Order = &events.Order{ID: orderID.Int64, Buyer: buyer.String, Quantity: int(quantity.Int64), Status: status.String, CancelledBy: by.String}
			if expires.Valid {
				t := expires.Time.UTC()
				e.Order.ExpiresAt = &t
			}
			if ref.Valid && e.Type == events.OrderConfirmed {
				e.Order.PaymentRef = &ref.String
			}
		}
		if stock.Valid {
			e.Stock = &events.Stock{}
			if err := json.Unmarshal([]byte(stock.String), e.Stock); err != nil {
				return nil, fmt.Errorf("event %d: stock: %w", id, err)
			}
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// Feed returns a page of the feed (outbox.Store).
func (s *Store) Feed(ctx context.Context, q outbox.FeedQuery) ([]events.FeedEvent, error) {
	where, args := "WHERE e.pos > ?", []any{q.After}
	if q.SKU != "" {
		where, args = where+" AND e.sku = ?", append(args, q.SKU)
	}
	evs, err := scanEvents(s.sql.QueryContext(ctx, eventSelect+where+" ORDER BY e.pos LIMIT ?", append(args, q.Limit)...))
	if err != nil {
		return nil, translate(ctx, "read feed", err)
	}
	for _, sink := range q.Sinks {
		if err := s.deliveryStates(ctx, sink, evs); err != nil {
			return nil, translate(ctx, "read delivery state", err)
		}
	}
	return evs, nil
}

// deliveryStates sets sink's delivery state of each of evs from its SKU's
// cursor and the failures.
func (s *Store) deliveryStates(ctx context.Context, sink string, evs []events.FeedEvent) error {
	if len(evs) == 0 {
		return nil
	}
	cursor := map[string]int64{}
	failed := map[string]string{}
	skus, ids := make([]any, 0, len(evs)), make([]any, 0, len(evs))
	for _, e := range evs {
		skus, ids = append(skus, e.SKU), append(ids, e.ID)
	}
	in := func(n int) string { return strings.TrimSuffix(strings.Repeat("?, ", n), ", ") }
	rows, err := s.sql.QueryContext(ctx, "SELECT sku, seq FROM outbox_cursors WHERE sink = ? AND sku IN ("+in(len(skus))+")", append([]any{sink}, skus...)...) //nolint:gosec // G202: placeholders only
	if err != nil {
		return err
	}
	for rows.Next() {
		var sku string
		var seq int64
		if err := rows.Scan(&sku, &seq); err != nil {
			_ = rows.Close()
			return err
		}
		cursor[sku] = seq
	}
	_ = rows.Close()
	rows, err = s.sql.QueryContext(ctx, "SELECT event_id, state FROM outbox_failures WHERE sink = ? AND event_id IN ("+in(len(ids))+")", append([]any{sink}, ids...)...) //nolint:gosec // G202: placeholders only
	if err != nil {
		return err
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var id, state string
		if err := rows.Scan(&id, &state); err != nil {
			return err
		}
		failed[id] = state
	}
	for i := range evs {
		evs[i].Delivery = deliveryState(evs[i].Delivery, sink, evs[i].Seq <= cursor[evs[i].SKU], failed[evs[i].ID])
	}
	return rows.Err()
}

// deliveryState adds sink's state to m: failed or redelivering when the
// failures say so, else delivered when the cursor is past it, else pending.
func deliveryState(m map[string]string, sink string, passed bool, failure string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	switch {
	case failure == "failed":
		m[sink] = "failed"
	case failure != "":
		m[sink] = "redelivering"
	case passed:
		m[sink] = "delivered"
	default:
		m[sink] = "pending"
	}
	return m
}

// Written returns the committed events above an id (outbox.Store).
func (s *Store) Written(ctx context.Context, after int64, limit int) ([]outbox.Written, int64, error) {
	if after < 0 {
		var top int64
		err := s.sql.QueryRowContext(ctx, "SELECT COALESCE(MAX(id), 0) FROM outbox_events").Scan(&top)
		return nil, top, translate(ctx, "read new events", err)
	}
	out, err := scanWritten(s.sql.QueryContext(ctx, "SELECT id, sku FROM outbox_events WHERE id > ? ORDER BY id LIMIT ?", after, limit))
	top := after
	if len(out) > 0 {
		top = out[len(out)-1].ID
	}
	return out, top, translate(ctx, "read new events", err)
}

// WrittenOf returns those of ids committed now (outbox.Store).
func (s *Store) WrittenOf(ctx context.Context, ids []int64) ([]outbox.Written, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	in := strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ")
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	out, err := scanWritten(s.sql.QueryContext(ctx, "SELECT id, sku FROM outbox_events WHERE id IN ("+in+")", args...)) //nolint:gosec // G202: placeholders only
	return out, translate(ctx, "read new events", err)
}

// scanWritten reads (id, sku) rows.
func scanWritten(rows *sql.Rows, err error) ([]outbox.Written, error) {
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var out []outbox.Written
	for rows.Next() {
		var w outbox.Written
		if err := rows.Scan(&w.ID, &w.SKU); err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

// Behind returns SKUs whose last event is past sink's cursor
// (outbox.Store).
func (s *Store) Behind(ctx context.Context, sink string, limit int) ([]string, error) {
	rows, err := s.sql.QueryContext(ctx, `SELECT s.sku FROM stock s LEFT JOIN outbox_cursors c ON c.sink = ? AND c.sku = s.sku
		WHERE s.event_seq > COALESCE(c.seq, 0) LIMIT ?`, sink, limit)
	if err != nil {
		return nil, translate(ctx, "read backlog", err)
	}
	defer func() { _ = rows.Close() }()
	var skus []string
	for rows.Next() {
		var sku string
		if err := rows.Scan(&sku); err != nil {
			return nil, translate(ctx, "read backlog", err)
		}
		skus = append(skus, sku)
	}
	return skus, translate(ctx, "read backlog", rows.Err())
}

// Claim takes sku's cursor of sink for owner (outbox.Store).
func (s *Store) Claim(ctx context.Context, sink, sku, owner string, ttl time.Duration) (outbox.Cursor, bool, error) {
	_, err := s.sql.ExecContext(ctx, `INSERT INTO outbox_cursors (sink, sku, owner, lease_until)
		VALUES (?, ?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
		ON DUPLICATE KEY UPDATE
		  owner = IF(owner IS NULL OR owner = VALUES(owner) OR lease_until < UTC_TIMESTAMP(6), VALUES(owner), owner),
		  lease_until = IF(owner = VALUES(owner), VALUES(lease_until), lease_until)`, sink, sku, owner, micros(ttl))
	if err != nil {
		return outbox.Cursor{}, false, translate(ctx, "claim cursor", err)
	}
	var c outbox.Cursor
	var holder, lastErr sql.NullString
	var first, retry sql.NullTime
	var left sql.NullInt64
	err = s.sql.QueryRowContext(ctx, `SELECT seq, owner, attempts, first_failed, retry_at, last_error,
		TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), lease_until) FROM outbox_cursors WHERE sink = ? AND sku = ?`,
		sink, sku).Scan(&c.Seq, &holder, &c.Attempts, &first, &retry, &lastErr, &left)
	if err != nil {
		return outbox.Cursor{}, false, translate(ctx, "claim cursor", err)
	}
	c.FirstFailed, c.RetryAt, c.LastError = first.Time, retry.Time, lastErr.String
	c.LeaseLeft = max(time.Duration(left.Int64)*time.Microsecond, 0)
	return c, holder.String == owner, nil
}

// After returns sku's events past seq (outbox.Store).
func (s *Store) After(ctx context.Context, sku string, seq int64, limit int) ([]events.Event, error) {
	evs, err := scanEvents(s.sql.QueryContext(ctx, eventSelect+"WHERE e.sku = ? AND e.seq > ? ORDER BY e.seq LIMIT ?", sku, seq, limit))
	if err != nil {
		return nil, translate(ctx, "read events", err)
	}
	out := make([]events.Event, len(evs))
	for i := range evs {
		out[i] = evs[i].Event
	}
	return out, nil
}

// Advance moves owner's cursor (outbox.Store).
func (s *Store) Advance(ctx context.Context, sink, sku, owner string, seq int64, ttl time.Duration) (bool, error) {
	res, err := s.sql.ExecContext(ctx, `UPDATE outbox_cursors SET seq = GREATEST(seq, ?), attempts = 0, first_failed = NULL, retry_at = NULL,
		last_error = NULL, lease_until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND WHERE sink = ? AND sku = ? AND owner = ?`,
		seq, micros(ttl), sink, sku, owner)
	return affected(ctx, "advance cursor", res, err)
}

// affected reports whether an owner's UPDATE matched its row.
func affected(ctx context.Context, op string, res sql.Result, err error) (bool, error) {
	if err != nil {
		return false, translate(ctx, op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, translate(ctx, op, err)
	}
	return n > 0, nil
}

// Retry records failed attempts and releases the lease (outbox.Store).
func (s *Store) Retry(ctx context.Context, sink, sku, owner string, c outbox.Cursor) (bool, error) {
	res, err := s.sql.ExecContext(ctx, `UPDATE outbox_cursors SET attempts = ?, first_failed = ?, retry_at = ?, last_error = ?,
		owner = NULL, lease_until = NULL WHERE sink = ? AND sku = ? AND owner = ?`,
		c.Attempts, c.FirstFailed.UTC(), c.RetryAt.UTC(), clip(c.LastError, 255), sink, sku, owner)
	return affected(ctx, "record retry", res, err)
}

// clip is s cut to at most n bytes.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// GiveUp records e as failed for good and moves past it (outbox.Store).
func (s *Store) GiveUp(ctx context.Context, sink, sku, owner string, e events.Event, c outbox.Cursor, ttl time.Duration) (bool, error) {
	tx, err := s.sql.BeginTx(ctx, nil)
	if err != nil {
		return false, translate(ctx, "give up", err)
	}
	defer func() { _ = tx.Rollback() }()
	res, err := tx.ExecContext(ctx, `UPDATE outbox_cursors SET seq = GREATEST(seq, ?), attempts = 0, first_failed = NULL,
		retry_at = NULL, last_error = NULL, lease_until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND WHERE sink = ? AND sku = ? AND owner = ?`,
		e.Seq, micros(ttl), sink, sku, owner)
	ok, err := affected(ctx, "give up", res, err)
	if err != nil || !ok {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO outbox_failures (event_id, sink, state, attempts, last_error, failed_at)
		VALUES (?, ?, 'failed', ?, ?, UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE state = 'failed', attempts = VALUES(attempts),
		last_error = VALUES(last_error), failed_at = VALUES(failed_at)`, e.ID, sink, c.Attempts, clip(c.LastError, 255)); err != nil {
		return false, translate(ctx, "give up", err)
	}
	return true, translate(ctx, "give up", tx.Commit())
}

// Release gives up owner's lease (outbox.Store).
func (s *Store) Release(ctx context.Context, sink, sku, owner string) error {
	_, err := s.sql.ExecContext(ctx, "UPDATE outbox_cursors SET owner = NULL, lease_until = NULL WHERE sink = ? AND sku = ? AND owner = ?", sink, sku, owner)
	return translate(ctx, "release cursor", err)
}

// Redeliver asks for an event to be sent again (outbox.Store).
func (s *Store) Redeliver(ctx context.Context, id int64, sink string) error {
	var sku string
	var seq int64
	err := s.sql.QueryRowContext(ctx, "SELECT sku, seq FROM outbox_events WHERE id = ?", id).Scan(&sku, &seq)
	if errors.Is(err, sql.ErrNoRows) {
		return outbox.ErrNoEvent
	}
	if err != nil {
		return translate(ctx, "redeliver", err)
	}
	var cur int64
	err = s.sql.QueryRowContext(ctx, "SELECT seq FROM outbox_cursors WHERE sink = ? AND sku = ?", sink, sku).Scan(&cur)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return translate(ctx, "redeliver", err)
	}
	if seq > cur {
		return outbox.ErrNotDelivered
	}
	_, err = s.sql.ExecContext(ctx, `INSERT INTO outbox_failures (event_id, sink, state, attempts, failed_at)
		VALUES (?, ?, 'redeliver', 0, UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE state = 'redeliver', failed_at = VALUES(failed_at)`, id, sink)
	return translate(ctx, "redeliver", err)
}

// Redeliveries claims events asked for again (outbox.Store).
func (s *Store) Redeliveries(ctx context.Context, sink string, limit int, stale time.Duration) ([]outbox.Redelivery, error) {
	ids, err := scanIDs(s.sql.QueryContext(ctx, `SELECT event_id FROM outbox_failures WHERE sink = ? AND (state = 'redeliver'
		OR state = 'sending' AND failed_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND) LIMIT ?`, sink, micros(stale), limit))
	if err != nil {
		return nil, translate(ctx, "read redeliveries", err)
	}
	var out []outbox.Redelivery
	for _, id := range ids {
		res, err := s.sql.ExecContext(ctx, `UPDATE outbox_failures SET state = 'sending', failed_at = UTC_TIMESTAMP(6)
			WHERE event_id = ? AND sink = ? AND (state = 'redeliver' OR state = 'sending' AND failed_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND)`,
			id, sink, micros(stale))
		if ok, err := affected(ctx, "claim redelivery", res, err); err != nil || !ok {
			continue
		}
		evs, err := scanEvents(s.sql.QueryContext(ctx, eventSelect+"WHERE e.id = ?", id))
		if err != nil || len(evs) == 0 {
			_, _ = s.sql.ExecContext(ctx, "DELETE FROM outbox_failures WHERE event_id = ? AND sink = ?", id, sink) // pruned
			continue
		}
		var attempts int
		_ = s.sql.QueryRowContext(ctx, "SELECT attempts FROM outbox_failures WHERE event_id = ? AND sink = ?", id, sink).Scan(&attempts)
		out = append(out, outbox.Redelivery{Event: evs[0].Event, Attempts: attempts})
	}
	return out, nil
}

// Redelivered records a redelivery's outcome (outbox.Store).
func (s *Store) Redelivered(ctx context.Context, sink string, id int64, sendErr error) error {
	if sendErr == nil {
		_, err := s.sql.ExecContext(ctx, "DELETE FROM outbox_failures WHERE event_id = ? AND sink = ?", id, sink)
		return translate(ctx, "record redelivery", err)
	}
	_, err := s.sql.ExecContext(ctx, `UPDATE outbox_failures SET state = 'failed', attempts = attempts + 1, last_error = ?,
		failed_at = UTC_TIMESTAMP(6) WHERE event_id = ? AND sink = ?`, clip(sendErr.Error(), 255), id, sink)
	return translate(ctx, "record redelivery", err)
}

// Prune deletes old events, oldest first (outbox.Store): it reads the
// oldest ids and deletes those written before before, stopping at the
// first newer one (ids grow with time, near enough for retention).
func (s *Store) Prune(ctx context.Context, before time.Time, limit int) (int, error) {
	ids, err := scanIDs(s.sql.QueryContext(ctx, "SELECT id FROM (SELECT id, occurred_at FROM outbox_events ORDER BY id LIMIT ?) o WHERE occurred_at < ?",
		limit, before.UTC()))
	if err != nil || len(ids) == 0 {
		return 0, translate(ctx, "prune events", err)
	}
	tx, err := s.sql.BeginTx(ctx, &readCommitted) // no gap locks in the way of new events
	if err != nil {
		return 0, translate(ctx, "prune events", err)
	}
	defer func() { _ = tx.Rollback() }()
	res, err := tx.ExecContext(ctx, "DELETE FROM outbox_events WHERE id <= ? AND occurred_at < ?", ids[len(ids)-1], before.UTC())
	if err != nil {
		return 0, translate(ctx, "prune events", err)
	}
	n, _ := res.RowsAffected()
	if _, err := tx.ExecContext(ctx, "DELETE FROM outbox_failures WHERE event_id <= ?", ids[len(ids)-1]); err != nil {
		return 0, translate(ctx, "prune events", err)
	}
	return int(n), translate(ctx, "prune events", tx.Commit())
}

// Backlog is what sink has not delivered (outbox.Store): per SKU behind
// its cursor, the gap between the stock row's event_seq and the cursor, and
// the age of the event just past the cursor (the oldest pending one). It
// reads a row per SKU, not the events.
func (s *Store) Backlog(ctx context.Context, sink string) (outbox.Backlog, error) {
	var b outbox.Backlog
	var pending, oldest sql.NullInt64
	err := s.sql.QueryRowContext(ctx, `SELECT SUM(s.event_seq - COALESCE(c.seq, 0)), TIMESTAMPDIFF(MICROSECOND, MIN(e.occurred_at), UTC_TIMESTAMP(6))
		FROM stock s LEFT JOIN outbox_cursors c ON c.sink = ? AND c.sku = s.sku
		LEFT JOIN outbox_events e ON e.sku = s.sku AND e.seq = COALESCE(c.seq, 0) + 1
		WHERE s.event_seq > COALESCE(c.seq, 0)`, sink).Scan(&pending, &oldest)
	b.Pending = pending.Int64
	if err != nil {
		return b, translate(ctx, "read backlog", err)
	}
	b.Oldest = time.Duration(oldest.Int64) * time.Microsecond
	err = s.sql.QueryRowContext(ctx, "SELECT COUNT(*) FROM outbox_failures WHERE sink = ? AND state = 'failed'", sink).Scan(&b.Failed)
	return b, translate(ctx, "read backlog", err)
}

// EventsOf returns the events written for sku, in seq order (the store
// contract reads them).
func (s *Store) EventsOf(ctx context.Context, sku string) ([]events.Event, error) {
	return s.After(ctx, sku, 0, 1<<20)
}
