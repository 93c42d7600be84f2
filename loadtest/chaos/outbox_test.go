package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seckill/stock/events"
	"github.com/seckill/stock/internal/testserver"
	"github.com/seckill/stock/loadtest/driver"
	"github.com/seckill/stock/loadtest/fleet"
)

// The outbox rows: a sale with both sinks on (a JetStream of the rig's own
// nats-server, and a webhook receiver in the test that verifies every
// signature), a fault, and then, once both consumers caught up with MySQL,
// checkDeliveries (sinks_test.go) on each: after dedupe by id, every event
// row delivered exactly once, per SKU in seq order with no gap, duplicates
// identical, every order's events matching its final status, and nothing
// of a transaction that did not commit. Most rows sell under a payment
// window (driver.RunLifecycle), so orders are confirmed, cancelled and
// expired too; the rollback row sells without one.

// 1. A relay SIGKILLed between delivering and marking: it is stopped while
// it holds a SKU's webhook cursor and the receiver has taken events past
// it, then killed. Another relay takes the cursor once the lease (3s)
// lapses and delivers those events again: duplicates, none lost.
func killRelay(t *testing.T, row *Row) {
	ctx := ctxFor(t, 3*time.Minute)
	s, env := startSinks(t, 2*time.Second)
	// Instance 0 runs no relay (the driver audits through it at the end, so
	// it must live): the relay caught is one of the others.
	r := lifeRig(t, rigConfig{env: env, instanceEnv: map[int]map[string]string{0: {"STOCK_EVENTS_RELAY": "false"}}}, 0)
	// 10ms a delivery: each batch takes a while to mark.
	s.hook.delay.Store(int64(10 * time.Millisecond))
	var seen []lifeAnswer
	var mu sync.Mutex
	out := r.lifeLoad(ctx, 150, size(10*time.Second, 16*time.Second), &seen, &mu)
	// Mid-sale: once the webhook has taken a few dozen events.
	if cursorMoved(ctx, r.db, "webhook", lifeSKU(ctx, t, r), 30, 30*time.Second) < 0 {
		t.Fatalf("the webhook's cursor did not pass seq 30 within 30s\n%s", r.fleet.Logs())
	}
	k := s.killMidDelivery(ctx, r, 1, 2)
	s.hook.delay.Store(0)
	moved := cursorMoved(ctx, r.db, "webhook", k.sku, k.cursor, 30*time.Second)
	res := r.lifeWait(out, row)
	o := s.verify(ctx, r)
	row.Note = fmt.Sprintf("%s (try %d) stopped, then SIGKILLed, holding the webhook cursor of %s at seq %d while the receiver had taken up to seq %d; "+
		"another relay moved the cursor on %s after the kill (lease 3s). ", describe(k.victim), k.tries, k.sku, k.cursor, k.taken, secs(moved)) +
		o.note() + " " + lifeNote(res)
	if unmarked := int(k.taken - k.cursor); o.hook.duplicates < unmarked {
		t.Errorf("after killing the relay with seq %d..%d of %s delivered but not marked: %d webhook duplicates; want at least %d (sent again by the next relay)",
			k.cursor+1, k.taken, k.sku, o.hook.duplicates, unmarked)
	}
}

// relayKill is where killMidDelivery struck.
type relayKill struct {
	victim *fleet.Instance
	sku    string
	cursor int64 // the webhook cursor's seq at the kill
	taken  int64 // the highest seq of the SKU the receiver had then
	tries  int
}

// killMidDelivery SIGKILLs a candidate instance while its relay is between
// delivering and marking. The receiver takes the next delivery and keeps
// its sender waiting for the answer; the SKU's cursor names the sender (the
// owner is host-pid-random). killMidDelivery stops it (SIGSTOP), lets a
// mark in flight commit, and reads the cursor again: still its, and behind
// what the receiver took, it kills the stopped process. Otherwise (a relay
// not among the candidates) it lets the delivery go and tries again, for
// at most 40s.
func (s *sinks) killMidDelivery(ctx context.Context, r *rig, candidates ...int) relayKill {
	s.t.Helper()
	byPID := map[string]*fleet.Instance{}
	for _, i := range candidates {
		in := r.fleet.Instances[i]
		byPID[strconv.Itoa(in.PID())] = in
	}
	try := 0
	for deadline := time.Now().Add(40 * time.Second); time.Now().Before(deadline); {
		e, ok := s.hook.holdNext(time.Until(deadline))
		if !ok {
			break
		}
		try++
		if k, ok := s.killSender(ctx, r, e.SKU, byPID); ok {
			k.tries = try
			s.hook.release()
			return k
		}
		s.hook.release()
		time.Sleep(time.Duration(5+rand.IntN(40)) * time.Millisecond) //nolint:gosec // G404: jitter, not a secret
	}
	s.t.Fatalf("no candidate %v was caught between delivering and marking in %d tries over 40s\n%s", candidates, try, r.fleet.Logs())
	return relayKill{}
}

// killSender SIGKILLs the relay holding sku's webhook cursor if it is in
// byPID and, once stopped, its cursor is still behind what the receiver
// took; it reports whether it did.
func (s *sinks) killSender(ctx context.Context, r *rig, sku string, byPID map[string]*fleet.Instance) (relayKill, bool) {
	_, owner, err := cursorOf(ctx, r.db, "webhook", sku)
	in := byPID[ownerPID(owner)]
	if err != nil || in == nil {
		return relayKill{}, false
	}
	if err := in.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatalf("SIGSTOP %s: %v", describe(in), err)
	}
	time.Sleep(50 * time.Millisecond) // a mark in flight commits
	seq, now, err := cursorOf(ctx, r.db, "webhook", sku)
	taken := s.hook.highest(sku)
	if err != nil || now != owner || taken <= seq {
		if err := in.Signal(syscall.SIGCONT); err != nil {
			s.t.Fatalf("SIGCONT %s: %v", describe(in), err)
		}
		return relayKill{}, false
	}
	// SIGKILL while stopped: it never runs again (fleet's Kill sends
	// SIGCONT first).
	if err := in.Signal(syscall.SIGKILL); err != nil {
		s.t.Fatalf("SIGKILL %s: %v", describe(in), err)
	}
	in.Kill()
	s.t.Logf("%s owned the webhook cursor of %s at seq %d, the receiver had seq %d", describe(in), sku, seq, taken)
	return relayKill{victim: in, sku: sku, cursor: seq, taken: taken}, true
}

// ownerPID is the pid in a relay's owner name, host-pid-random (the host
// may hold dashes, the random part does not).
func ownerPID(owner string) string {
	parts := strings.Split(owner, "-")
	if len(parts) < 3 {
		return ""
	}
	return parts[len(parts)-2]
}

// cursorOf reads sink's cursor of sku: its seq and owner ("" when free).
func cursorOf(ctx context.Context, db *sql.DB, sink, sku string) (int64, string, error) {
	var seq int64
	var owner sql.NullString
	err := db.QueryRowContext(ctx, "SELECT seq, owner FROM outbox_cursors WHERE sink = ? AND sku = ?", sink, sku).Scan(&seq, &owner)
	return seq, owner.String, err
}

// cursorMoved waits until sink's cursor of sku is past seq and returns how
// long that took (-1 after limit).
func cursorMoved(ctx context.Context, db *sql.DB, sink, sku string, seq int64, limit time.Duration) time.Duration {
	start := time.Now()
	for time.Since(start) < limit {
		if now, _, err := cursorOf(ctx, db, sink, sku); err == nil && now > seq {
			return time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return -1
}

// 2. nats-server stopped (SIGTERM) for 5s under load and started again on
// the same port and store: publishes fail meanwhile and are retried; after
// the restart the relays catch up, and the stream holds every event once,
// in order.
func natsRestart(t *testing.T, row *Row) {
	ctx := ctxFor(t, 3*time.Minute)
	s, env := startSinks(t, 2*time.Second)
	r := lifeRig(t, rigConfig{env: env}, 0)
	var seen []lifeAnswer
	var mu sync.Mutex
	out := r.lifeLoad(ctx, 150, size(10*time.Second, 16*time.Second), &seen, &mu)
	if cursorMoved(ctx, r.db, "nats", lifeSKU(ctx, t, r), 30, 30*time.Second) < 0 {
		t.Fatalf("NATS's cursor did not pass seq 30 within 30s\n%s", r.fleet.Logs())
	}
	s.nats.Stop()
	t0 := time.Now()
	time.Sleep(5 * time.Second)
	s.nats.Start()
	t1 := time.Now()
	res := r.lifeWait(out, row)
	o := s.verify(ctx, r)
	caught := settledAfter(s.stream.got, t1)
	during := writtenBetween(ctx, r.db, t0, t1)
	row.Note = fmt.Sprintf("nats-server stopped %.1fs (restarted on its port and store); %d events written meanwhile; the last event written before the restart "+
		"was stored %s after it. ", t1.Sub(t0).Seconds(), during, secs(caught)) + o.note() + " " + lifeNote(res)
	if during == 0 {
		t.Errorf("no event written while nats-server was down; the outage was not under load")
	}
}

// lifeSKU is the SKU the lifecycle load set up (the one stock row of the
// rig's database), waiting up to 30s for it.
func lifeSKU(ctx context.Context, t *testing.T, r *rig) string {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var sku string
		if err := r.db.QueryRowContext(ctx, "SELECT sku FROM stock LIMIT 1").Scan(&sku); err == nil {
			return sku
		}
	}
	t.Fatalf("the lifecycle load set no stock within 30s\n%s", r.fleet.Logs())
	return ""
}

// writtenBetween counts the events written from t0 to t1 (-1: unread).
func writtenBetween(ctx context.Context, db *sql.DB, t0, t1 time.Time) int {
	n := -1
	_ = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM outbox_events WHERE occurred_at BETWEEN ? AND ?", t0.UTC(), t1.UTC()).Scan(&n)
	return n
}

// settledAfter is how long after t the last event written up to t
// reached the consumer whose deliveries got is (first deliveries; 0 when
// all came before t).
func settledAfter(got []delivery, t time.Time) time.Duration {
	seen := map[string]bool{}
	var last time.Duration
	for _, d := range got {
		var e events.Event
		if seen[d.id] || json.Unmarshal(d.body, &e) != nil {
			continue
		}
		seen[d.id] = true
		if !e.OccurredAt.After(t) {
			last = max(last, d.at.Sub(t))
		}
	}
	return last
}

// 3. The webhook receiver fails: 500 for a while, then no answer within
// STOCK_WEBHOOK_TIMEOUT (300ms), then 200 again. The relays retry (backoff
// capped at 1s) and, once it answers, deliver everything, in order.
func webhookDown(t *testing.T, row *Row) {
	ctx := ctxFor(t, 3*time.Minute)
	s, env := startSinks(t, 300*time.Millisecond)
	r := lifeRig(t, rigConfig{env: env}, 0)
	var seen []lifeAnswer
	var mu sync.Mutex
	out := r.lifeLoad(ctx, 150, size(10*time.Second, 18*time.Second), &seen, &mu)
	if cursorMoved(ctx, r.db, "webhook", lifeSKU(ctx, t, r), 1, 30*time.Second) < 0 {
		t.Fatalf("nothing reached the webhook within 30s\n%s", r.fleet.Logs())
	}
	phase := size(3*time.Second, 5*time.Second)
	s.hook.mode.Store(hookFail)
	t0 := time.Now()
	time.Sleep(phase)
	s.hook.mode.Store(hookHang)
	time.Sleep(phase)
	s.hook.mode.Store(hookOK)
	t1 := time.Now()
	res := r.lifeWait(out, row)
	o := s.verify(ctx, r)
	during := writtenBetween(ctx, r.db, t0, t1)
	row.Note = fmt.Sprintf("the receiver answered 500 for %v, then nothing within the 300ms timeout for %v: %d attempts answered 500, %d timed out; "+
		"%d events written meanwhile; once it answered again, the last of them arrived %s later. ",
		phase, phase, o.refused["500"], o.refused["timeout"], during, secs(settledAfter(s.hook.deliveries(), t1))) + o.note() + " " + lifeNote(res)
	if o.refused["500"] == 0 || o.refused["timeout"] == 0 || during == 0 {
		t.Errorf("receiver down: attempts turned away %v, events written meanwhile %d; want 500s, timeouts and events (the fault proved nothing)", o.refused, during)
	}
}

// 4. A transaction rolled back after writing its events: the lock holder
// is stopped (SIGSTOP) inside its transaction, its order and event rows
// written and not committed (seen with READ UNCOMMITTED), for 2.5 times its
// 1s lease; resumed, it finds the lock lost before COMMIT and rolls back.
// Those events must never reach a consumer, and the SKU's seq must go on
// without a gap (the next transaction reuses the numbers).
func rolledBack(t *testing.T, row *Row) {
	ctx := ctxFor(t, 3*time.Minute)
	s, env := startSinks(t, 2*time.Second)
	maps.Copy(env, pauseEnv)
	r := newRig(t, rigConfig{strategy: "lock+version", env: env})
	stock := size[int64](400, 1000)
	out := r.load(ctx, driver.Config{Stock: stock, Buyers: int(2 * stock), Concurrency: 20, Quantity: 1, Retries: 10, Duration: 2 * time.Minute})
	r.waitSold(ctx, stock/10)
	in, t0, dirty, tries := pauseWithEvents(ctx, r, 0, 1, 2)
	if in != nil {
		time.Sleep(time.Until(t0.Add(2500 * time.Millisecond)))
		if err := in.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	res := r.finish(out, row, t0)
	r.requireSafe(res, true)
	o := s.verify(ctx, r)
	lost := res.Metrics.Sum.Orders["lock_lost"]
	var committed, delivered []string
	got := deliveredIDs(s)
	for _, id := range dirty {
		if _, ok := o.snap.events[id]; ok {
			committed = append(committed, id)
		}
		if got[id] {
			delivered = append(delivered, id)
		}
	}
	row.Note = fmt.Sprintf("%s stopped inside its transaction (try %d) with %d uncommitted event rows (ids %s), for 2.5s (lease 1s); lock-lost orders (503): %.0f; "+
		"of those rows %d committed, %d delivered. ", nameOf(in), tries, len(dirty), idRange(dirty), lost, len(committed), len(delivered)) + o.note()
	switch {
	case len(dirty) == 0:
		t.Errorf("in %d pauses inside the holder's transaction no uncommitted event row was seen; the row proved nothing", tries)
	case len(delivered) > 0:
		t.Errorf("events %v of the transaction rolled back were delivered; want none", delivered)
	case len(committed) > 0 || lost == 0:
		t.Errorf("the paused transaction's events %v committed after all (lock-lost orders %.0f); want it rolled back (the row proved nothing)", committed, lost)
	}
}

// uncommittedEvents returns the ids of event rows written and not
// committed right now: read with READ UNCOMMITTED, not with READ COMMITTED
// just after.
func uncommittedEvents(ctx context.Context, db *sql.DB) []string {
	dirty, err := eventIDsAt(ctx, db, sql.LevelReadUncommitted)
	if err != nil {
		return nil
	}
	done, err := eventIDsAt(ctx, db, sql.LevelReadCommitted)
	if err != nil {
		return nil
	}
	committed := make(map[string]bool, len(done))
	for _, id := range done {
		committed[id] = true
	}
	var out []string
	for _, id := range dirty {
		if !committed[id] {
			out = append(out, id)
		}
	}
	return out
}

// eventIDsAt reads the ids of outbox_events at isolation level.
func eventIDsAt(ctx context.Context, db *sql.DB, level sql.IsolationLevel) ([]string, error) {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: level, ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	return ids(ctx, tx, "SELECT id FROM outbox_events ORDER BY id")
}

// idRange names a list of ids shortly: "7", "7..9", or "-".
func idRange(list []string) string {
	switch len(list) {
	case 0:
		return "-"
	case 1:
		return list[0]
	}
	return list[0] + ".." + list[len(list)-1]
}

// 5. MariaDB SIGKILLed mid-sale and started again after 1s, while an
// instance is stopped (SIGSTOP) inside its transaction with its order and
// event rows written: that transaction is lost with the crash. The events
// of every committed transaction are delivered once MySQL is back, none of
// the lost one's.
func mariadbKilled(t *testing.T, row *Row) {
	ctx := ctxFor(t, 4*time.Minute)
	m := testserver.StartMariaDB(t)
	s, env := startSinks(t, 2*time.Second)
	maps.Copy(env, pauseEnv)
	r := lifeRig(t, rigConfig{mysqlBase: m.Base, env: env}, 0)
	var seen []lifeAnswer
	var mu sync.Mutex
	out := r.lifeLoad(ctx, 300, size(10*time.Second, 16*time.Second), &seen, &mu)
	r.sku = lifeSKU(ctx, t, r) // the lock pauseHolder watches
	r.waitOrders(ctx, 60)      // a fifth of the stock
	in, _, dirty, tries := pauseWithEvents(ctx, r, 1, 2)
	written := writtenAt(ctx, t, r.db, sql.LevelReadUncommitted, dirty) // the lost rows' times, read before the crash
	if len(written) != len(dirty) {
		t.Fatalf("read when %d of the %d uncommitted event rows were written; want all", len(written), len(dirty))
	}
	m.Kill()
	t0 := time.Now()
	time.Sleep(time.Second)
	m.Start()
	back := time.Since(t0)
	if in != nil {
		if err := in.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	res := r.lifeWait(out, row)
	o := s.verify(ctx, r)
	// After the crash MariaDB may give a lost row's id to a later event (the
	// auto-increment counter goes back to what survived), which is no harm:
	// a lost event is a row with its id and the time it was written.
	now := writtenAt(ctx, t, r.db, sql.LevelReadCommitted, dirty)
	var survived, delivered []string
	for _, id := range dirty {
		if at, ok := now[id]; ok && at.Equal(written[id]) {
			survived = append(survived, id)
		}
	}
	for _, d := range append(s.hook.deliveries(), s.stream.got...) {
		if at, ok := written[d.id]; ok && occurredAt(d.body).Equal(at) && !slices.Contains(delivered, d.id) {
			delivered = append(delivered, d.id)
		}
	}
	row.Note = fmt.Sprintf("mariadbd SIGKILLed while %s was stopped inside its transaction (try %d) with %d event rows written (ids %s), started again after 1s "+
		"(answering %.1fs after the kill, crash recovery included); of those rows %d survived, %d were delivered. ",
		nameOf(in), tries, len(dirty), idRange(dirty), back.Seconds(), len(survived), len(delivered)) + o.note() + " " + lifeNote(res)
	switch {
	case len(dirty) == 0:
		t.Errorf("no transaction with uncommitted event rows was caught in %d pauses; the row proved nothing", tries)
	case len(delivered) > 0:
		t.Errorf("events %v of the transaction lost with MariaDB were delivered; want none", delivered)
	case len(survived) > 0:
		t.Errorf("events %v of a transaction stopped before its COMMIT survived the crash; want them lost", survived)
	}
}

// writtenAt reads, at isolation level, when each of the event rows ids
// was written (occurred_at); ids without a row are left out.
func writtenAt(ctx context.Context, t *testing.T, db *sql.DB, level sql.IsolationLevel, ids []string) map[string]time.Time {
	t.Helper()
	out := map[string]time.Time{}
	if len(ids) == 0 {
		return out
	}
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: level, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	err = eachRow(ctx, tx, func(rows *sql.Rows) error {
		var id, at string
		if err := rows.Scan(&id, &at); err != nil {
			return err
		}
		when, err := time.Parse(time.RFC3339Nano, at)
		out[id] = when
		return err
	}, "SELECT id, DATE_FORMAT(occurred_at, '%Y-%m-%dT%H:%i:%s.%fZ') FROM outbox_events WHERE id IN (?"+strings.Repeat(", ?", len(ids)-1)+")", args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// occurredAt is the occurred_at of an event's JSON body (zero if none).
func occurredAt(body []byte) time.Time {
	var e struct {
		OccurredAt time.Time `json:"occurred_at"`
	}
	_ = json.Unmarshal(body, &e)
	return e.OccurredAt
}

// pauseWithEvents stops (SIGSTOP) the lock holder among candidates inside
// its transaction (pauseHolder) at a moment its event rows are written and
// not committed, trying up to 5 pauses; it returns the stopped instance,
// when it was stopped, and those rows' ids (none: it was resumed, and the
// pauses proved nothing).
func pauseWithEvents(ctx context.Context, r *rig, candidates ...int) (*fleet.Instance, time.Time, []string, int) {
	r.t.Helper()
	for try := 1; ; try++ {
		in, t0 := r.pauseHolder(ctx, candidates...)
		if dirty := uncommittedEvents(ctx, r.db); len(dirty) > 0 {
			return in, t0, dirty, try
		}
		// Stopped before its event rows: resume it and try again.
		if err := in.Signal(syscall.SIGCONT); err != nil {
			r.t.Fatal(err)
		}
		if try == 5 {
			return nil, t0, nil, try
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// nameOf names in for a note (nil: none).
func nameOf(in *fleet.Instance) string {
	if in == nil {
		return "no instance"
	}
	return describe(in)
}

// deliveredIDs is the ids either consumer got.
func deliveredIDs(s *sinks) map[string]bool {
	got := map[string]bool{}
	for _, d := range append(s.hook.deliveries(), s.stream.got...) {
		got[d.id] = true
	}
	return got
}
