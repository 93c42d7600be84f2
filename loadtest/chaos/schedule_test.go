package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill/stock/client"
	"github.com/seckill/stock/internal/auth"
	"github.com/seckill/stock/loadtest/driver"
	"github.com/seckill/stock/loadtest/fleet"
)

// The sale schedule's row: whether an order is early is decided by
// MariaDB's clock, read with the stock row in the order's transaction, on
// every write path, the DB-only one included.

const (
	// startLead is how far ahead of MariaDB's clock the sale's start is set.
	startLead = 4 * time.Second
	// arrivalTail is how long after the start the last buyer arrives.
	arrivalTail = time.Second
	// clockSlack is what the row allows between the clocks it compares:
	// MariaDB's UTC_TIMESTAMP(6) (the start is set from it and orders are
	// refused by it), the instances' time.Now() (which stamps
	// orders.created_at) and the test's (which times the requests). On
	// this one machine they are the same kernel clock, read by three
	// processes.
	clockSlack = 5 * time.Millisecond
	// refusedBound bounds how long after the start a sale-not-started
	// answer may arrive: its request was refused before the start, and the
	// answer came back over a machine loaded by the crowd pressing at it.
	refusedBound = 2 * time.Second
	// crowdInFlight caps the crowd's requests in flight over the three
	// instances, well under each one's STOCK_MAX_CONNS_PER_IP (64).
	crowdInFlight = 30
)

// S1. A sale's start passes while Redis is down: the SKU is set with stock
// units and sale_starts_at startLead ahead of MariaDB's clock, the rig's
// Redis is SIGKILLed at once, so every order goes down the DB-only path
// (the conditional UPDATE alone, STOCK_ON_REDIS_DOWN=db-only), and twice as
// many buyers as units arrive over the three instances from the kill until
// arrivalTail after the start, polling through the start instant
// (waitingCrowd) until each is answered 201, 200 or sold-out.
//
// MySQL's rows must show the stock sold exactly, one order for each buyer
// told 201 or 200 and no other, and no order created before the start by
// more than the service's clock may run ahead of MariaDB's: a read's clock
// is carried forward from just before its statement was sent (repo's
// dbClock), so an order may be stamped before the start by at most the time
// from its request's send to its creation (the note gives how many were,
// and by how much). Every sale-not-started answer must be to a request
// sent before the start, and arrive within refusedBound of it. Redis is
// started again after the sale, and every instance must take the lock
// again. The recovery column counts from the start to the first 201.
func saleStartsRedisDown(t *testing.T, row *Row) {
	ctx := ctxFor(t, 3*time.Minute)
	r := newRig(t, rigConfig{strategy: "lock+version"})
	stock := size[int64](300, 1000)
	admin, err := client.New(r.fleet.URLs()[0], client.WithToken(r.token))
	if err != nil {
		t.Fatal(err)
	}
	var dbNow time.Time
	if err := r.db.QueryRowContext(ctx, "SELECT UTC_TIMESTAMP(6)").Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	start := dbNow.Add(startLead).Truncate(time.Millisecond)
	if _, err := admin.SetStock(ctx, r.sku, client.StockSetting{Available: stock, SaleStartsAt: &start}); err != nil {
		t.Fatalf("SetStock(%q, %d units, starting %s): %v", r.sku, stock, start.Format(time.RFC3339Nano), err)
	}
	rtt := r.scheduleEverywhere(ctx, start)
	r.redis.Kill()
	killed := time.Now()

	// Every instance must be on the DB-only path before the start.
	var early float64
	var notOnPath []int
	sawEarly := make(chan struct{})
	go func() {
		defer close(sawEarly)
		if !driver.Sleep(ctx, time.Until(start.Add(-300*time.Millisecond))) {
			return
		}
		for _, in := range r.fleet.Instances {
			m, err := driver.ScrapeMetrics(ctx, in.URL)
			if err != nil || m.DBOnly == 0 {
				notOnPath = append(notOnPath, in.Index)
			}
			early += m.DBOnly
		}
	}()
	buyers := r.waitingCrowd(ctx, int(2*stock), killed, start.Add(arrivalTail))
	<-sawEarly
	r.fillFromMetrics(ctx, row)
	audit, auditErr := admin.Audit(ctx, r.sku)
	sale := r.saleRows(ctx)

	base := map[int]float64{}
	for _, in := range r.fleet.Instances {
		m, _ := driver.ScrapeMetrics(ctx, in.URL)
		base[in.Index] = m.LockResults["acquired"]
	}
	r.redis.Start()
	back := r.lockBackEach(ctx, admin, time.Now(), base, 20*time.Second)

	ans := answersAround(r.eventsOf(func(driver.Event) bool { return true }), start)
	before, tooEarly, most := stampedEarly(sale, ans.sentOf, start)
	row.Stock, row.Sold, row.Statuses = stock, sale.sold, ans.statuses
	row.Oversold = max(0, sale.sold-stock, sale.units-stock)
	row.LostUpdates = max(0, sale.units-sale.sold)
	row.Recovery = ans.firstCreated
	stamped, after := "0", "0 after it"
	if len(before) > 0 {
		stamped = fmt.Sprintf("%d, by up to %.1fms, each by less than its request's round trip", len(before), ms(most))
	}
	if ans.refusedAfter > 0 {
		after = fmt.Sprintf("%d after it (the last %s after the start)", ans.refusedAfter, msOrNone(ans.lastRefusal))
	}
	row.Note = fmt.Sprintf("start set %v ahead of MariaDB's clock (the test's clock too: read through each instance inside a round trip of at most %.1fms), "+
		"Redis SIGKILLed %.2fs before it; %d buyers arriving until %v after it, polling every 50-150ms; the first 201 %s after the start, the last order %s after it; "+
		"orders created before the start: %s; sale-not-started answers: %d arrived before the start, %s, %d to requests sent after it; "+
		"db-only attempts %.0f (%.0f by 0.3s before the start); Redis started again after the sale: the lock taken again on every instance within %s; recovery counts from the start.",
		startLead, ms(rtt), start.Sub(killed).Seconds(), len(buyers), arrivalTail, msOrNone(ans.firstCreated), msOrNone(sale.lastCreated.Sub(start)),
		stamped, ans.refusedBefore, after, ans.sentAfter, row.DBOnly, early, secs(back))
	t.Logf("S1: %s", row.Note)
	if len(before) > 0 {
		t.Logf("S1: orders created before the start: %v", before)
	}

	// The premise: the start passed while every instance was on the
	// DB-only path, with buyers refused before it and served after it.
	if len(notOnPath) > 0 || ans.refusedBefore == 0 || ans.firstCreated < 0 {
		t.Errorf("premise: instances %v counted no db-only attempt by 0.3s before the start; %d sale-not-started answers before it; first 201 after %v; "+
			"want every instance db-only before the start, buyers refused before it and served after it\n%s", notOnPath, ans.refusedBefore, ans.firstCreated, r.fleet.Logs())
	}
	// MySQL's rows: no order before the start, the stock sold exactly.
	if len(tooEarly) > 0 {
		t.Errorf("orders created before the start %s by more than %v: %v; want none",
			start.Format(time.RFC3339Nano), clockSlack, tooEarly)
	}
	if sale.sold != stock || sale.available != 0 || sale.reserved != 0 || sale.units != stock || len(sale.byKey) != int(stock) {
		t.Errorf("stock row sold %d, available %d, reserved %d; %d orders of %d units; want sold %d exactly, nothing left, one unit an order",
			sale.sold, sale.available, sale.reserved, len(sale.byKey), sale.units, stock)
	}
	if len(sale.twice) > 0 {
		t.Errorf("buyers or keys with two orders: %v; want none", sale.twice)
	}
	if auditErr != nil || !audit.Consistent || audit.Oversold != 0 {
		t.Errorf("audit of %s: %+v, %v; want consistent, oversold 0", r.sku, audit, auditErr)
	}
	// The buyers: each answered; each one told of an order has it in MySQL,
	// and MySQL has no order no buyer was told of.
	told, unanswered := 0, map[string]int{}
	for i, b := range buyers {
		if b.order == nil {
			if b.last != "409 "+client.KindSoldOut {
				unanswered[b.last]++
			}
			continue
		}
		told++
		if o, ok := sale.byKey[crowdKey(i)]; !ok || o.id != b.order.ID {
			t.Errorf("buyer %d was answered %s with order %d; MySQL has %+v under its key %s", i, b.last, b.order.ID, o, crowdKey(i))
		}
	}
	if len(unanswered) > 0 || told != len(sale.byKey) {
		t.Errorf("buyers: %d told of an order, %d orders in MySQL; ended otherwise than with an order or sold-out: %v; want every buyer answered, one order per 201/200",
			told, len(sale.byKey), unanswered)
	}
	// The answers: sale-not-started only to a request sent before the
	// start, back within refusedBound.
	if ans.sentAfter > 0 || ans.late > 0 {
		t.Errorf("sale-not-started answers: %d to requests sent after the start (+%v), %d arriving over %v after it; want none",
			ans.sentAfter, clockSlack, ans.late, refusedBound)
	}
	if back < 0 {
		t.Errorf("after the Redis restart not every instance took the lock within 20s\n%s", r.fleet.Logs())
	}
}

// stampedEarly lists the orders of sale created before start, and those
// created before it by more than clockSlack (created_at is the instance's
// clock, written after the read whose MariaDB clock let the order in: on
// one machine no order may come earlier than the start by more than the
// two clocks' granularity). most is the most any order was early by.
func stampedEarly(sale saleRows, sentOf map[int]time.Time, start time.Time) (before, tooEarly []string, most time.Duration) {
	for key, o := range sale.byKey {
		lead := start.Sub(o.created)
		if lead <= 0 {
			continue
		}
		most = max(most, lead)
		sent := sentOf[o.buyerIndex]
		detail := fmt.Sprintf("%s %.1fms before (its request sent %.1fms before the start)", key, ms(lead), ms(start.Sub(sent)))
		before = append(before, detail)
		if lead > clockSlack {
			tooEarly = append(tooEarly, detail)
		}
	}
	return before, tooEarly, most
}

// ms is d in milliseconds, for notes.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// msOrNone formats a measured duration in milliseconds; negative: none.
func msOrNone(d time.Duration) string {
	if d < 0 {
		return "none"
	}
	return fmt.Sprintf("%.1fms", ms(d))
}

// scheduleEverywhere reads the SKU through every instance: each must show
// start as its sale_starts_at, and MariaDB's clock as the read carries it
// must fall inside the read's round trip on the test's clock (+-clockSlack):
// the clocks the row compares are one. It returns the longest round trip.
func (r *rig) scheduleEverywhere(ctx context.Context, start time.Time) time.Duration {
	r.t.Helper()
	var longest time.Duration
	for _, url := range r.fleet.URLs() {
		c, err := client.New(url)
		if err != nil {
			r.t.Fatal(err)
		}
		sent := time.Now()
		s, err := c.Stock(ctx, r.sku)
		got := time.Now()
		if err != nil || s.SaleStartsAt == nil || !s.SaleStartsAt.Equal(start) {
			r.t.Fatalf("Stock(%q) at %s = %+v, %v; want sale_starts_at %s", r.sku, url, s, err, start.Format(time.RFC3339Nano))
		}
		if s.Now.Before(sent.Add(-clockSlack)) || s.Now.After(got.Add(clockSlack)) {
			r.t.Fatalf("Stock(%q) at %s: MariaDB's clock %s, sent at %s and answered at %s by the test's; want it in between (+-%v)",
				r.sku, url, s.Now.Format(time.RFC3339Nano), sent.Format(time.RFC3339Nano), got.Format(time.RFC3339Nano), clockSlack)
		}
		longest = max(longest, got.Sub(sent))
	}
	return longest
}

// fillFromMetrics copies the instances' counters into the row: the rig is
// fresh, so their totals are the run's.
func (r *rig) fillFromMetrics(ctx context.Context, row *Row) {
	row.DBOnly = r.metricSum(ctx, dbOnly)
	row.Conflicts = r.metricSum(ctx, conflicts)
	row.LostLocks = r.metricSum(ctx, func(m driver.InstanceMetrics) float64 { return m.LockResults["lost"] })
}

// crowdBuyer is how one buyer of a waiting crowd ended.
type crowdBuyer struct {
	last  string        // its last answer: "201", "200", "409 sold-out", "no-response", ...; "aborted": ctx ended first
	order *client.Order // the order it was told of (201 or 200); nil: none
}

// crowdKeyPrefix starts every Idempotency-Key of a waiting crowd.
const crowdKeyPrefix = "s1-"

// crowdKey is buyer i's Idempotency-Key.
func crowdKey(i int) string { return crowdKeyPrefix + strconv.Itoa(i) }

// waitingCrowd runs n buyers of one unit of the rig's SKU, buyer i
// arriving at from + i/n of the way to until, on instance i mod 3, with a
// token and a key of its own; at most crowdInFlight requests are in flight.
// A buyer sends its order again, with the same key, 50-150ms after a
// sale-not-started (never later than its Retry-After), and after
// Retry-After or a backoff on 429, 502-504 or no answer (failing over to
// the next instance on the last three), until it is answered anything else.
// Every request is recorded in the rig's events. It returns each buyer's
// end once every buyer has one, or ctx ended.
func (r *rig) waitingCrowd(ctx context.Context, n int, from, until time.Time) []crowdBuyer {
	r.t.Helper()
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: crowdInFlight,
		DisableCompression:  true,
	}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var apis []*client.Client
	for _, url := range r.fleet.URLs() {
		c, err := client.New(url, client.WithHTTPClient(hc))
		if err != nil {
			r.t.Fatal(err)
		}
		apis = append(apis, c)
	}
	out := make([]crowdBuyer, n)
	slots := make(chan struct{}, crowdInFlight)
	var wg sync.WaitGroup
	for i := range n {
		tok, err := auth.Mint([]byte(fleet.JWTSecret), crowdBuyerID(r.sku, i), time.Hour, "", "")
		if err != nil {
			r.t.Fatal(err)
		}
		arrival := from.Add(until.Sub(from) * time.Duration(i) / time.Duration(n))
		wg.Go(func() {
			out[i] = crowdBuyer{last: "aborted"}
			if !driver.Sleep(ctx, time.Until(arrival)) {
				return
			}
			out[i] = r.waitForSale(ctx, i, apis, tok, slots)
		})
	}
	wg.Wait()
	return out
}

// crowdBuyerID is buyer i's id (its token's sub).
func crowdBuyerID(sku string, i int) string { return sku + "-b" + strconv.Itoa(i) }

// waitForSale is buyer i of waitingCrowd.
func (r *rig) waitForSale(ctx context.Context, i int, apis []*client.Client, tok string, slots chan struct{}) crowdBuyer {
	u := i % len(apis)
	for try := 0; ; try++ {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return crowdBuyer{last: "aborted"}
		}
		sent := time.Now()
		placed, err := apis[u].As(tok).Place(ctx, crowdKey(i), r.sku, 1)
		at := time.Now()
		<-slots
		e := driver.Event{Buyer: i, Try: try, URL: apis[u].BaseURL(), Sent: sent, At: at, Status: "no-response"}
		var p *client.Problem
		var wait time.Duration
		switch {
		case err == nil:
			e.Status = strconv.Itoa(driver.PlacedStatus(placed))
		case errors.As(err, &p):
			e.Status, wait = strconv.Itoa(p.Status), p.RetryAfter
			if p.Type != "about:blank" {
				e.Problem = p.Kind()
			}
		case ctx.Err() != nil:
			return crowdBuyer{last: "aborted"}
		}
		r.mu.Lock()
		r.events = append(r.events, e)
		r.mu.Unlock()
		last := label(e)
		switch {
		case err == nil:
			return crowdBuyer{last: last, order: &placed.Order}
		case e.Problem == client.KindSaleNotStarted:
			gap := time.Duration(50+rand.IntN(100)) * time.Millisecond //nolint:gosec // G404: jitter, not a secret
			if wait > 0 {
				gap = min(gap, wait)
			}
			wait = gap
		case p == nil || p.Status == http.StatusBadGateway || p.Status == http.StatusServiceUnavailable || p.Status == http.StatusGatewayTimeout:
			u = (u + 1) % len(apis)
		case p.Status == http.StatusTooManyRequests:
		default: // sold out, or an answer that will not change
			return crowdBuyer{last: last}
		}
		if wait == 0 {
			wait = time.Duration(50<<min(try, 4)+rand.IntN(50)) * time.Millisecond //nolint:gosec // G404: jitter, not a secret
		}
		if !driver.Sleep(ctx, wait) {
			return crowdBuyer{last: last}
		}
	}
}

// label is an answer as the responses column counts it: the status, and
// the problem's kind if any ("409 sale-not-started").
func label(e driver.Event) string {
	if e.Problem == "" {
		return e.Status
	}
	return e.Status + " " + e.Problem
}

// startAnswers is what the crowd's answers say against the start.
type startAnswers struct {
	statuses map[string]int // by label
	// refusedBefore and refusedAfter count the sale-not-started answers
	// that arrived before and after the start; sentAfter those to requests
	// sent after it (+clockSlack); late those arriving past refusedBound.
	refusedBefore, refusedAfter, sentAfter, late int

	lastRefusal  time.Duration // from the start to the last sale-not-started answer after it; -1: none
	firstCreated time.Duration // from the start to the first 201; -1: none
	// sentOf is, for each buyer, the send of the request that placed its
	// order or of an earlier one: the request answered 201, else its first.
	sentOf map[int]time.Time
}

// answersAround sums up events against start.
func answersAround(events []driver.Event, start time.Time) startAnswers {
	a := startAnswers{statuses: map[string]int{}, lastRefusal: -1, firstCreated: -1, sentOf: map[int]time.Time{}}
	created := map[int]time.Time{}
	for _, e := range events {
		a.statuses[label(e)]++
		if first, ok := a.sentOf[e.Buyer]; !ok || e.Sent.Before(first) {
			a.sentOf[e.Buyer] = e.Sent
		}
		if e.Status == "201" {
			created[e.Buyer] = e.Sent
		}
		switch {
		case e.Problem == client.KindSaleNotStarted:
			if e.At.After(start) {
				a.refusedAfter++
				a.lastRefusal = max(a.lastRefusal, e.At.Sub(start))
			} else {
				a.refusedBefore++
			}
			if e.Sent.After(start.Add(clockSlack)) {
				a.sentAfter++
			}
			if e.At.After(start.Add(refusedBound)) {
				a.late++
			}
		case e.Status == "201":
			if d := e.At.Sub(start); a.firstCreated < 0 || d < a.firstCreated {
				a.firstCreated = d
			}
		}
	}
	for i, sent := range created {
		a.sentOf[i] = sent
	}
	return a
}

// saleOrder is one order row, as the schedule's row reads it.
type saleOrder struct {
	id         int64
	buyerIndex int // the crowd's buyer i whose key it has
	created    time.Time
}

// saleRows is what MySQL holds of the rig's SKU after a scheduled sale.
type saleRows struct {
	available, reserved, sold int64
	units                     int64                // the orders' quantities
	byKey                     map[string]saleOrder // the orders, by idempotency key
	twice                     []string             // buyers or keys with more than one order
	lastCreated               time.Time
}

// saleRows reads the SKU's stock row and orders.
func (r *rig) saleRows(ctx context.Context) saleRows {
	r.t.Helper()
	s := saleRows{byKey: map[string]saleOrder{}}
	err := r.db.QueryRowContext(ctx, "SELECT available, reserved, sold FROM stock WHERE sku = ?", r.sku).Scan(&s.available, &s.reserved, &s.sold)
	if err != nil {
		r.t.Fatalf("stock row of %s: %v", r.sku, err)
	}
	rows, err := r.db.QueryContext(ctx, "SELECT id, buyer, idempotency_key, quantity, created_at FROM orders WHERE sku = ? ORDER BY id", r.sku)
	if err != nil {
		r.t.Fatalf("orders of %s: %v", r.sku, err)
	}
	defer func() { _ = rows.Close() }()
	buyers := map[string]bool{}
	for rows.Next() {
		var o saleOrder
		var buyer, key string
		var n int64
		if err := rows.Scan(&o.id, &buyer, &key, &n, &o.created); err != nil {
			r.t.Fatalf("orders of %s: %v", r.sku, err)
		}
		if _, dup := s.byKey[key]; dup {
			s.twice = append(s.twice, "key "+key)
		}
		if buyers[buyer] {
			s.twice = append(s.twice, "buyer "+buyer)
		}
		o.buyerIndex = -1
		if n, ok := strings.CutPrefix(key, crowdKeyPrefix); ok {
			if i, err := strconv.Atoi(n); err == nil {
				o.buyerIndex = i
			}
		}
		s.byKey[key], buyers[buyer] = o, true
		s.units += n
		if o.created.After(s.lastCreated) {
			s.lastCreated = o.created
		}
	}
	if err := rows.Err(); err != nil {
		r.t.Fatalf("orders of %s: %v", r.sku, err)
	}
	return s
}

// lockBackEach places orders on a second SKU of its own (no schedule)
// through each instance in turn, every 50ms, until every instance has
// counted a lock acquisition beyond its base, and returns how long after t0
// the last one did (or -1 after limit).
func (r *rig) lockBackEach(ctx context.Context, admin *client.Client, t0 time.Time, base map[int]float64, limit time.Duration) time.Duration {
	r.t.Helper()
	probe := r.sku + "-probe"
	if _, err := admin.SetStock(ctx, probe, client.StockSetting{Available: 100_000}); err != nil {
		r.t.Errorf("SetStock(%q): %v", probe, err)
		return -1
	}
	tok, err := auth.Mint([]byte(fleet.JWTSecret), probe, time.Hour, "", "")
	if err != nil {
		r.t.Fatal(err)
	}
	waiting := map[int]*client.Client{}
	for _, in := range r.fleet.Instances {
		if waiting[in.Index], err = client.New(in.URL, client.WithToken(tok)); err != nil {
			r.t.Fatal(err)
		}
	}
	for n := 0; len(waiting) > 0; n++ {
		if time.Since(t0) > limit {
			return -1
		}
		for i, c := range waiting {
			_, _ = c.Place(ctx, fmt.Sprintf("probe-%d-%d", i, n), probe, 1) // any answer: the lock is what is counted
			if m, err := driver.ScrapeMetrics(ctx, c.BaseURL()); err == nil && m.LockResults["acquired"] > base[i] {
				delete(waiting, i)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(t0)
}
