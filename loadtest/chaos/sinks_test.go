package chaos

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/seckill/stock/events"
	"github.com/seckill/stock/internal/testserver"
	"github.com/seckill/stock/loadtest/fleet"
)

// The two consumers of the outbox rows (outbox_test.go) and the one check
// of what they got: a webhook receiver that verifies every signature and
// keeps every delivery, duplicates included; a durable JetStream consumer
// reading the whole stream; and checkDeliveries, which holds either
// against MySQL's own rows.

// delivery is one event as a consumer got it.
type delivery struct {
	id   string // the header's event id (Stock-Event-Id, Nats-Msg-Id)
	body []byte
	at   time.Time // when it arrived (webhook) or was stored (JetStream)
}

// The webhook receiver's modes.
const (
	hookOK   int32 = iota // 200, recorded
	hookFail              // 500, not recorded
	hookHang              // no answer until the sender gives up, not recorded
	hookHold              // the next delivery recorded, then held unanswered (holdNext)
)

// hookReceiver is the webhook's receiving end, on a loopback port the
// instances reach. It answers as its mode says, and records each
// delivery it answers 200, in the order it took them.
type hookReceiver struct {
	srv    *httptest.Server
	secret string
	mode   atomic.Int32
	delay  atomic.Int64      // nanoseconds to wait before taking a delivery
	held   chan events.Event // the delivery hookHold caught
	free   chan struct{}     // answers the held delivery

	mu      sync.Mutex
	got     []delivery
	refused map[string]int // "500", "timeout": attempts turned away
	bad     []string       // bad signatures, ids or bodies
}

// startHookReceiver starts a receiver checking signatures with secret,
// closed at the end of the test.
func startHookReceiver(t *testing.T, secret string) *hookReceiver {
	h := &hookReceiver{secret: secret, refused: map[string]int{}, held: make(chan events.Event, 1), free: make(chan struct{}, 1)}
	h.srv = httptest.NewServer(h)
	t.Cleanup(func() {
		h.mode.Store(hookOK)
		h.srv.Close()
	})
	return h
}

// URL is where the instances POST.
func (h *hookReceiver) URL() string { return h.srv.URL + "/events" }

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	at := time.Now()
	id := req.Header.Get(events.HeaderID)
	if err != nil {
		h.reject(w, fmt.Sprintf("event %s: reading the body: %v", id, err))
		return
	}
	// The raw bytes, before any decoding.
	if err := events.Verify(h.secret, req.Header.Get(events.HeaderSignature), body, 5*time.Minute); err != nil {
		h.reject(w, fmt.Sprintf("event %s: %v (header %q)", id, err, req.Header.Get(events.HeaderSignature)))
		return
	}
	var e events.Event
	if err := json.Unmarshal(body, &e); err != nil || e.ID != id {
		h.reject(w, fmt.Sprintf("event %s: body id %q, decode error %v", id, e.ID, err))
		return
	}
	switch h.mode.Load() {
	case hookFail:
		h.count("500")
		http.Error(w, "receiver failing on purpose", http.StatusInternalServerError)
		return
	case hookHang:
		h.count("timeout")
		select { // the sender's timeout closes the connection
		case <-req.Context().Done():
		case <-time.After(10 * time.Second):
		}
		http.Error(w, "too late", http.StatusGatewayTimeout)
		return
	}
	if d := time.Duration(h.delay.Load()); d > 0 {
		time.Sleep(d)
	}
	h.mu.Lock()
	h.got = append(h.got, delivery{id: id, body: body, at: at})
	h.mu.Unlock()
	if h.mode.CompareAndSwap(hookHold, hookOK) {
		h.held <- e
		select { // taken, not yet acknowledged: the sender waits
		case <-h.free:
		case <-req.Context().Done():
		}
	}
	w.WriteHeader(http.StatusOK)
}

// holdNext makes the receiver take the next delivery and keep its sender
// waiting for the answer: it returns that event once it came, or false
// after limit. release answers it.
func (h *hookReceiver) holdNext(limit time.Duration) (events.Event, bool) {
	select { // a release whose delivery had already ended
	case <-h.free:
	default:
	}
	h.mode.Store(hookHold)
	select {
	case e := <-h.held:
		return e, true
	case <-time.After(limit):
		if h.mode.CompareAndSwap(hookHold, hookOK) {
			return events.Event{}, false
		}
		return <-h.held, true // caught just now
	}
}

// release answers the delivery holdNext holds (200).
func (h *hookReceiver) release() {
	select {
	case h.free <- struct{}{}:
	default:
	}
}

func (h *hookReceiver) reject(w http.ResponseWriter, why string) {
	h.mu.Lock()
	h.bad = append(h.bad, why)
	h.mu.Unlock()
	http.Error(w, "bad delivery", http.StatusUnauthorized)
}

func (h *hookReceiver) count(what string) {
	h.mu.Lock()
	h.refused[what]++
	h.mu.Unlock()
}

// deliveries returns what was taken so far, in arrival order.
func (h *hookReceiver) deliveries() []delivery {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.got)
}

// refusals returns the attempts turned away so far, by kind.
func (h *hookReceiver) refusals() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.refused)
}

// badDeliveries returns what failed verification so far.
func (h *hookReceiver) badDeliveries() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.bad)
}

// highest is the highest seq of sku taken so far (0: none).
func (h *hookReceiver) highest(sku string) int64 {
	var top int64
	for _, d := range h.deliveries() {
		var e events.Event
		if json.Unmarshal(d.body, &e) == nil && e.SKU == sku {
			top = max(top, e.Seq)
		}
	}
	return top
}

// streamReader reads the service's stream from its start with a durable
// consumer, in stream order.
type streamReader struct {
	srv    *testserver.NATS
	stream string
	nc     *nats.Conn
	cons   jetstream.Consumer
	got    []delivery
	last   uint64 // stream sequence of the last message read
	// redelivered counts messages the consumer sent again (not
	// duplicates in the stream: those are read once each, like any other).
	redelivered int
	problems    []string
}

// read fetches what the stream holds past what was read, creating the
// consumer once the stream exists. It returns nil while the stream is
// not there yet.
func (s *streamReader) read(ctx context.Context) error {
	if s.nc == nil {
		nc, err := nats.Connect(s.srv.URL(), nats.Name("chaos-check"), nats.MaxReconnects(-1), nats.ReconnectWait(200*time.Millisecond))
		if err != nil {
			return err
		}
		s.nc = nc
	}
	if s.cons == nil {
		js, err := jetstream.New(s.nc)
		if err != nil {
			return err
		}
		c, err := js.CreateOrUpdateConsumer(ctx, s.stream, jetstream.ConsumerConfig{
			Durable: "chaos-check", DeliverPolicy: jetstream.DeliverAllPolicy, AckPolicy: jetstream.AckExplicitPolicy,
		})
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		s.cons = c
	}
	for {
		batch, err := s.cons.Fetch(1000, jetstream.FetchMaxWait(300*time.Millisecond))
		if err != nil {
			return err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return err
			}
			_ = m.Ack()
			switch seq := md.Sequence.Stream; {
			case seq <= s.last:
				s.redelivered++
				continue
			case seq != s.last+1:
				s.problems = append(s.problems, fmt.Sprintf("the consumer skipped stream messages %d..%d", s.last+1, seq-1))
			}
			s.last = md.Sequence.Stream
			id := m.Headers().Get(jetstream.MsgIDHeader)
			if other := m.Headers().Get(events.HeaderID); other != id {
				s.problems = append(s.problems, fmt.Sprintf("message %d: Nats-Msg-Id %q, Stock-Event-Id %q", md.Sequence.Stream, id, other))
			}
			s.got = append(s.got, delivery{id: id, body: slices.Clone(m.Data()), at: md.Timestamp})
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return err
		}
		if n == 0 {
			return nil
		}
	}
}

func (s *streamReader) close() {
	if s.nc != nil {
		s.nc.Close()
	}
}

// outboxRow is an outbox_events row as the check needs it.
type outboxRow struct {
	sku, typ, status, cancelledBy string
	seq, orderID                  int64
}

// orderRow is an orders row as the check needs it.
type orderRow struct {
	sku, buyer, status string
	quantity           int
}

// outboxSnapshot is MySQL's word on what was written: every event row,
// every order, each SKU's last event number, and the events given up on.
type outboxSnapshot struct {
	events   map[string]outboxRow // by id
	orders   map[int64]orderRow
	eventSeq map[string]int64 // stock.event_seq by SKU
	failures int              // outbox_failures rows
}

// readSnapshot reads the snapshot, trying again for up to 30s while MySQL
// does not answer (a restarted server).
func readSnapshot(ctx context.Context, db *sql.DB) (*outboxSnapshot, error) {
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		var s *outboxSnapshot
		if s, err = snapshotOnce(ctx, db); err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return s, err
		}
	}
}

func snapshotOnce(ctx context.Context, db *sql.DB) (*outboxSnapshot, error) {
	s := &outboxSnapshot{events: map[string]outboxRow{}, orders: map[int64]orderRow{}, eventSeq: map[string]int64{}}
	// One transaction, one consistent view of the tables.
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	err = eachRow(ctx, tx, func(rows *sql.Rows) error {
		var id int64
		var e outboxRow
		err := rows.Scan(&id, &e.sku, &e.seq, &e.typ, &e.orderID, &e.status, &e.cancelledBy)
		s.events[strconv.FormatInt(id, 10)] = e
		return err
	}, "SELECT id, sku, seq, type, COALESCE(order_id, 0), COALESCE(status, ''), COALESCE(cancelled_by, '') FROM outbox_events")
	if err != nil {
		return nil, err
	}
	err = eachRow(ctx, tx, func(rows *sql.Rows) error {
		var id int64
		var o orderRow
		err := rows.Scan(&id, &o.sku, &o.buyer, &o.status, &o.quantity)
		s.orders[id] = o
		return err
	}, "SELECT id, sku, buyer, status, quantity FROM orders")
	if err != nil {
		return nil, err
	}
	err = eachRow(ctx, tx, func(rows *sql.Rows) error {
		var sku string
		var seq int64
		err := rows.Scan(&sku, &seq)
		s.eventSeq[sku] = seq
		return err
	}, "SELECT sku, event_seq FROM stock")
	if err != nil {
		return nil, err
	}
	if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM outbox_failures").Scan(&s.failures); err != nil {
		return nil, err
	}
	return s, nil
}

// queryer is a *sql.DB or a *sql.Tx.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// eachRow runs query and calls scan on each of its rows.
func eachRow(ctx context.Context, q queryer, scan func(*sql.Rows) error, query string, args ...any) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// ids reads one column of ids.
func ids(ctx context.Context, q queryer, query string, args ...any) ([]string, error) {
	var out []string
	err := eachRow(ctx, q, func(rows *sql.Rows) error {
		var id string
		err := rows.Scan(&id)
		out = append(out, id)
		return err
	}, query, args...)
	return out, err
}

// sinkCheck is what checkDeliveries found of one consumer.
type sinkCheck struct {
	sink       string
	deliveries int // everything received, duplicates included
	distinct   int
	duplicates int
	// byType counts the distinct events by type.
	byType map[string]int
	// maxLag is the longest time from an event's write to its first
	// delivery.
	maxLag time.Duration
	// missing counts MySQL's events never received.
	missing  int
	problems []string
}

// maxProblems bounds the problems one check lists (the count is kept).
const maxProblems = 12

func (c *sinkCheck) fail(format string, args ...any) {
	if len(c.problems) < maxProblems {
		c.problems = append(c.problems, fmt.Sprintf(format, args...))
	} else if len(c.problems) == maxProblems {
		c.problems = append(c.problems, "(more problems left out)")
	}
}

// ok reports whether nothing was wrong.
func (c sinkCheck) ok() bool { return len(c.problems) == 0 }

func (c sinkCheck) String() string {
	return fmt.Sprintf("%s: %d deliveries, %d distinct events, %d duplicates, max lag %s", c.sink, c.deliveries, c.distinct, c.duplicates, secs(c.maxLag))
}

// checkDeliveries holds what one consumer got, in arrival order, against
// MySQL's rows: every delivery is an event of outbox_events (none of a
// rolled-back transaction) with the same content; a duplicate carries the
// same id and the same JSON; per SKU, the first deliveries count seq 1, 2,
// 3, ... with no gap and no reordering; every event row was received;
// every order has exactly one order.placed and at most one of confirmed,
// cancelled or expired, matching its final status, and no event names an
// order MySQL does not have.
func checkDeliveries(sink string, got []delivery, snap *outboxSnapshot) sinkCheck {
	c := sinkCheck{sink: sink, deliveries: len(got), byType: map[string]int{}}
	first := map[string]delivery{}     // by id
	next := map[string]int64{}         // per SKU: the seq the next first delivery must have
	placed := map[int64][]string{}     // order.placed per order: its status
	ends := map[int64][]events.Event{} // confirmed, cancelled or expired per order
	for i, d := range got {
		var e events.Event
		if err := json.Unmarshal(d.body, &e); err != nil {
			c.fail("delivery %d (event %s): undecodable body %q: %v", i, d.id, d.body, err)
			continue
		}
		if e.ID != d.id {
			c.fail("delivery %d: header id %q, body id %q", i, d.id, e.ID)
		}
		if f, seen := first[e.ID]; seen {
			c.duplicates++
			if !sameJSON(f.body, d.body) {
				c.fail("event %s delivered again with another body:\nfirst %s\nlater %s", e.ID, f.body, d.body)
			}
			continue
		}
		first[e.ID] = d
		c.byType[e.Type]++
		c.maxLag = max(c.maxLag, d.at.Sub(e.OccurredAt))
		if want := next[e.SKU] + 1; e.Seq != want {
			c.fail("%s: first delivery of seq %d (event %s, %s) came when seq %d was due (a gap or reordering)", e.SKU, e.Seq, e.ID, e.Type, want)
		}
		next[e.SKU] = max(next[e.SKU], e.Seq)
		row, ok := snap.events[e.ID]
		if !ok {
			c.fail("event %s (%s seq %d, %s, order %v) is not in outbox_events: an event of a rolled-back transaction?", e.ID, e.SKU, e.Seq, e.Type, orderID(e))
			continue
		}
		if got := (outboxRow{sku: e.SKU, typ: e.Type, seq: e.Seq, orderID: orderID(e), status: orderStatus(e), cancelledBy: cancelledBy(e)}); got != row {
			c.fail("event %s: delivered %+v; MySQL's row %+v", e.ID, got, row)
		}
		if e.Order == nil {
			continue
		}
		o, ok := snap.orders[e.Order.ID]
		switch {
		case !ok:
			c.fail("event %s (%s) names order %d, which MySQL does not have", e.ID, e.Type, e.Order.ID)
			continue
		case o.sku != e.SKU || o.buyer != e.Order.Buyer || o.quantity != e.Order.Quantity:
			c.fail("event %s: order %d of %s, buyer %q, quantity %d; MySQL: %s, %q, %d", e.ID, e.Order.ID, e.SKU, e.Order.Buyer, e.Order.Quantity, o.sku, o.buyer, o.quantity)
		}
		if e.Type == events.OrderPlaced {
			placed[e.Order.ID] = append(placed[e.Order.ID], e.Order.Status)
		} else {
			ends[e.Order.ID] = append(ends[e.Order.ID], e)
		}
	}
	c.distinct = len(first)
	for id, row := range snap.events {
		if _, ok := first[id]; !ok {
			if c.missing == 0 {
				c.fail("event %s (%s seq %d, %s) never arrived", id, row.sku, row.seq, row.typ)
			}
			c.missing++
		}
	}
	if c.missing > 0 || c.distinct != len(snap.events) {
		c.fail("%d distinct events received, %d missing; MySQL has %d event rows", c.distinct, c.missing, len(snap.events))
	}
	for sku, seq := range snap.eventSeq {
		if next[sku] != seq {
			c.fail("%s: received up to seq %d; the stock row's event_seq is %d", sku, next[sku], seq)
		}
	}
	for id, o := range snap.orders {
		checkOrder(&c, id, o, placed[id], ends[id])
	}
	return c
}

// checkOrder holds order id's events (the status of each order.placed,
// and the other events) against its final status in MySQL.
func checkOrder(c *sinkCheck, id int64, o orderRow, placed []string, ends []events.Event) {
	if len(placed) != 1 {
		c.fail("order %d (%s): %d order.placed events; want exactly 1", id, o.status, len(placed))
		return
	}
	want := map[string]string{"confirmed": events.OrderConfirmed, "cancelled": events.OrderCancelled, "expired": events.OrderExpired}[o.status]
	switch {
	case len(ends) > 1:
		c.fail("order %d (%s): %d end events (%s, %s, ...); want at most one", id, o.status, len(ends), ends[0].Type, ends[1].Type)
	case len(ends) == 1 && ends[0].Type != want:
		c.fail("order %d is %s in MySQL; its event is %s", id, o.status, ends[0].Type)
	case len(ends) == 0 && o.status != "reserved" && (o.status != "confirmed" || placed[0] != "confirmed"):
		// Confirmed with no order.confirmed: placed confirmed (no payment
		// window), as its order.placed must say.
		c.fail("order %d is %s in MySQL, with no %s event (placed %s)", id, o.status, want, placed[0])
	case len(ends) == 1 && placed[0] != "reserved":
		c.fail("order %d was placed %s, then %s; only a reserved order moves on", id, placed[0], ends[0].Type)
	}
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

func orderID(e events.Event) int64 {
	if e.Order == nil {
		return 0
	}
	return e.Order.ID
}

func orderStatus(e events.Event) string {
	if e.Order == nil {
		return ""
	}
	return e.Order.Status
}

func cancelledBy(e events.Event) string {
	if e.Order == nil {
		return ""
	}
	return e.Order.CancelledBy
}

// sinkEnv is what turns both sinks on: NATS at natsURL, the webhook at
// hookURL with secret, one attempt bounded by timeout, retries at most 1s
// apart.
func sinkEnv(natsURL, hookURL, secret string, timeout time.Duration) map[string]string {
	return map[string]string{
		"STOCK_EVENTS_NATS_URL": natsURL, "STOCK_WEBHOOK_URL": hookURL, "STOCK_WEBHOOK_SECRET": secret,
		"STOCK_WEBHOOK_TIMEOUT": timeout.String(), "STOCK_WEBHOOK_MAX_BACKOFF": "1s",
	}
}

// sinks is the two consumers of a rig's events.
type sinks struct {
	t      *testing.T
	nats   *testserver.NATS
	hook   *hookReceiver
	stream *streamReader
	secret string
}

// startSinks starts a nats-server and a webhook receiver with a fresh
// secret; env turns them on in the instances (attempt timeout as given).
func startSinks(t *testing.T, timeout time.Duration) (*sinks, map[string]string) {
	s := &sinks{t: t, nats: testserver.StartNATS(t), secret: fleet.Secret()}
	s.hook = startHookReceiver(t, s.secret)
	s.stream = &streamReader{srv: s.nats, stream: "STOCK"}
	t.Cleanup(s.stream.close)
	return s, sinkEnv(s.nats.URL(), s.hook.URL(), s.secret, timeout)
}

// eventIDs is the ids of outbox_events (nil when MySQL does not answer).
func eventIDs(ctx context.Context, db *sql.DB) []string {
	out, err := ids(ctx, db, "SELECT id FROM outbox_events")
	if err != nil {
		return nil
	}
	return out
}

// missingFrom counts the ids no delivery in got has.
func missingFrom(ids []string, got []delivery) int {
	have := make(map[string]bool, len(got))
	for _, d := range got {
		have[d.id] = true
	}
	n := 0
	for _, id := range ids {
		if !have[id] {
			n++
		}
	}
	return n
}

// catchUp waits, for at most limit, until both consumers have every event
// MySQL holds, and returns how long that took (-1: they did not).
func (s *sinks) catchUp(ctx context.Context, db *sql.DB, limit time.Duration) time.Duration {
	start := time.Now()
	for {
		if err := s.stream.read(ctx); err != nil {
			s.t.Logf("reading the stream: %v", err)
		}
		ids := eventIDs(ctx, db)
		hook, nats := missingFrom(ids, s.hook.deliveries()), missingFrom(ids, s.stream.got)
		if ids != nil && hook == 0 && nats == 0 {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			s.t.Logf("not caught up after %v: %d events in MySQL, %d missing on the webhook, %d on NATS", limit, len(ids), hook, nats)
			return -1
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// outboxResult is what verify found.
type outboxResult struct {
	snap        *outboxSnapshot
	hook, nats  sinkCheck
	caughtUp    time.Duration
	refused     map[string]int
	redelivered int // by the JetStream consumer itself
}

// verify waits until both consumers caught up with MySQL (60s at most),
// checks each against MySQL's rows, and fails the test on any problem.
func (s *sinks) verify(ctx context.Context, r *rig) outboxResult {
	s.t.Helper()
	var res outboxResult
	res.caughtUp = s.catchUp(ctx, r.db, 60*time.Second)
	snap, err := readSnapshot(ctx, r.db)
	if err != nil {
		s.t.Fatalf("reading MySQL's outbox rows: %v", err)
	}
	res.snap = snap
	res.hook = checkDeliveries("webhook", s.hook.deliveries(), snap)
	res.nats = checkDeliveries("nats", s.stream.got, snap)
	res.refused = s.hook.refusals()
	res.redelivered = s.stream.redelivered
	s.t.Logf("MySQL: %d events, %d orders; %v; %v; webhook attempts turned away %v; caught up in %s",
		len(snap.events), len(snap.orders), res.hook, res.nats, res.refused, secs(res.caughtUp))
	var problems []string
	if bad := s.hook.badDeliveries(); len(bad) > 0 {
		problems = append(problems, fmt.Sprintf("webhook: %d deliveries failed verification, first: %s", len(bad), bad[0]))
	}
	for _, p := range s.stream.problems {
		problems = append(problems, "nats: "+p)
	}
	for _, c := range []sinkCheck{res.hook, res.nats} {
		for _, p := range c.problems {
			problems = append(problems, c.sink+": "+p)
		}
	}
	if snap.failures > 0 {
		problems = append(problems, fmt.Sprintf("outbox_failures holds %d events given up on; want none", snap.failures))
	}
	if res.caughtUp < 0 {
		problems = append(problems, "the consumers did not catch up with MySQL within 60s")
	}
	if len(problems) > 0 {
		s.t.Errorf("%s: the delivered events disagree with MySQL:\n%s\n%s", s.t.Name(), strings.Join(problems, "\n"), r.fleet.Logs())
	}
	return res
}

// note is what every outbox row reports.
func (o outboxResult) note() string {
	types := make([]string, 0, len(o.hook.byType))
	for _, typ := range events.Types() {
		if n := o.hook.byType[typ]; n > 0 {
			types = append(types, fmt.Sprintf("%d %s", n, typ))
		}
	}
	return fmt.Sprintf("%d events in MySQL (%s) for %d orders; NATS: %d in the stream, %d duplicates, max lag %s; "+
		"webhook: %d deliveries, %d duplicates, max lag %s; the check found both consumers caught up with MySQL %s after the load ended.",
		len(o.snap.events), strings.Join(types, ", "), len(o.snap.orders), o.nats.deliveries, o.nats.duplicates, secs(o.nats.maxLag),
		o.hook.deliveries, o.hook.duplicates, secs(o.hook.maxLag), secs(o.caughtUp))
}
