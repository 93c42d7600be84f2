package handler_test

import (
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seckill/stock/internal/apptest"
	"github.com/seckill/stock/internal/service"
)

var paymentToken = apptest.PaymentToken

// The order JSON of the lifecycle, as clients read it.
type lifecycleOrder struct {
	ID         int64          `json:"id"`
	Buyer      string         `json:"buyer"`
	SKU        string         `json:"sku"`
	Quantity   int            `json:"quantity"`
	Status     service.Status `json:"status"`
	ExpiresAt  *string        `json:"expires_at"`
	PaymentRef string         `json:"payment_ref"`
}

func (r reply) lifecycleOrder(t testing.TB) lifecycleOrder {
	t.Helper()
	var o lifecycleOrder
	r.json(t, &o)
	return o
}

func bearerOf(tok string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + tok}
}

func (in *instance) setWindow(t testing.TB, sku string, available, window int) reply {
	t.Helper()
	return do(t, "PUT", in.url+"/v1/admin/stock/"+sku, jsonHeader("Authorization", "Bearer "+adminToken),
		fmt.Sprintf(`{"available":%d,"payment_window_seconds":%d}`, available, window))
}

func (in *instance) confirm(t testing.TB, id int64, header map[string]string, body string) reply {
	t.Helper()
	return do(t, "POST", fmt.Sprintf("%s/v1/admin/orders/%d/confirm", in.url, id), header, body)
}

func (in *instance) cancel(t testing.TB, id int64, buyer string) reply {
	t.Helper()
	return do(t, "POST", fmt.Sprintf("%s/v1/orders/%d/cancel", in.url, id), bearerOf(tokenFor(t, buyer)), "")
}

func (in *instance) getOrder(t testing.TB, id int64) lifecycleOrder {
	t.Helper()
	r := do(t, "GET", fmt.Sprintf("%s/v1/admin/orders/%d", in.url, id), bearerOf(adminToken), "")
	if r.status != http.StatusOK {
		t.Fatalf("GET order %d = %d %s", id, r.status, r.body)
	}
	return r.lifecycleOrder(t)
}

func wantAnswer(t testing.TB, what string, r reply, status int, kind string) {
	t.Helper()
	if r.status != status || r.problemType() != kind {
		t.Fatalf("%s = %d %s; want %d %s", what, r.status, r.body, status, kind)
	}
}

// expiresFormat is RFC 3339 UTC with microseconds.
var expiresFormat = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$`)

// Every answer of the payment window, confirm and cancel, over HTTP against
// MySQL (each checked against the OpenAPI document by the instance).
func TestLifecycleAnswers(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	in := newInstance(t, d, instanceOpts{payment: paymentToken})
	if r := in.setWindow(t, "LC", 10, 86401); r.status != http.StatusBadRequest {
		t.Fatalf("a window of 86401 s = %d %s; want 400", r.status, r.body)
	}
	r := in.setWindow(t, "LC", 10, 60)
	var st service.Stock
	r.json(t, &st)
	if r.status != http.StatusOK || st.PaymentWindowSeconds != 60 {
		t.Fatalf("PUT with a window = %d %s; want it in the answer", r.status, r.body)
	}

	placed := in.order(t, "lc-1", "LC", 2)
	o := placed.lifecycleOrder(t)
	if placed.status != http.StatusCreated || o.Status != service.StatusReserved || o.ExpiresAt == nil || !expiresFormat.MatchString(*o.ExpiresAt) {
		t.Fatalf("order under a window = %d %s; want 201 reserved with expires_at in microseconds", placed.status, placed.body)
	}
	if rp := in.order(t, "lc-1", "LC", 2); rp.status != http.StatusOK || rp.lifecycleOrder(t).Status != service.StatusReserved {
		t.Fatalf("replay of a reserved order = %d %s", rp.status, rp.body)
	}
	r = do(t, "GET", in.url+"/v1/stock/LC", nil, "")
	r.json(t, &st)
	if st.Available != 8 || st.Reserved != 2 || st.Sold != 0 || st.PaymentWindowSeconds != 60 {
		t.Fatalf("GET stock with a reservation = %s; want available 8, reserved 2, sold 0, window 60", r.body)
	}
	if r := do(t, "GET", in.url+"/v1/orders?status=reserved", nil, ""); r.status != http.StatusOK || !strings.Contains(string(r.body), `"lc-1"`) {
		t.Fatalf("GET orders?status=reserved = %d %s; want lc-1", r.status, r.body)
	}
	if r := do(t, "GET", in.url+"/v1/orders?status=confirmed", nil, ""); r.status != http.StatusOK || strings.Contains(string(r.body), `"lc-1"`) {
		t.Fatalf("GET orders?status=confirmed = %d %s; want no lc-1", r.status, r.body)
	}
	wantAnswer(t, "GET orders?status=paid", do(t, "GET", in.url+"/v1/orders?status=paid", nil, ""), 400, "invalid-request")

	wantAnswer(t, "confirm with a buyer token", in.confirm(t, o.ID, bearerOf(tokenFor(t, testBuyer)), ""), 401, "payment-unauthorized")
	wantAnswer(t, "confirm without a token", in.confirm(t, o.ID, map[string]string{"Authorization": ""}, ""), 401, "payment-unauthorized")
	wantAnswer(t, "confirm of an unknown order", in.confirm(t, o.ID+100, bearerOf(paymentToken), ""), 404, "order-not-found")
	wantAnswer(t, "confirm with a bad payment_ref", in.confirm(t, o.ID, jsonHeader("Authorization", "Bearer "+paymentToken), `{"payment_ref":"a b"}`), 400, "invalid-request")
	c := in.confirm(t, o.ID, bearerOf(paymentToken), "") // no body, no Content-Type
	if c.status != http.StatusOK || c.lifecycleOrder(t).Status != service.StatusConfirmed {
		t.Fatalf("confirm = %d %s; want 200 confirmed", c.status, c.body)
	}
	if c := in.confirm(t, o.ID, bearerOf(adminToken), ""); c.status != http.StatusOK || c.lifecycleOrder(t).Status != service.StatusConfirmed {
		t.Fatalf("second confirm (admin token) = %d %s; want 200 confirmed", c.status, c.body)
	}
	wantAnswer(t, "cancel of a confirmed order", in.cancel(t, o.ID, testBuyer), 409, "order-confirmed")

	o2 := in.order(t, "lc-2", "LC", 1).lifecycleOrder(t)
	c = in.confirm(t, o2.ID, jsonHeader("Authorization", "Bearer "+paymentToken), `{"payment_ref":"pay-42"}`)
	if c.status != http.StatusOK || c.lifecycleOrder(t).PaymentRef != "pay-42" || in.getOrder(t, o2.ID).PaymentRef != "pay-42" {
		t.Fatalf("confirm with a payment_ref = %d %s; want it stored", c.status, c.body)
	}
	c = in.confirm(t, o2.ID, jsonHeader("Authorization", "Bearer "+paymentToken), `{"payment_ref":"pay-43"}`)
	wantAnswer(t, "a second payment with another payment_ref", c, 409, "order-already-paid")
	if !strings.Contains(string(c.body), "second payment must be refunded") {
		t.Fatalf("a second payment = %s; want a detail saying it must be refunded", c.body)
	}
	for _, body := range []string{`{"payment_ref":"pay-42"}`, ""} {
		if c := in.confirm(t, o2.ID, jsonHeader("Authorization", "Bearer "+paymentToken), body); c.status != http.StatusOK || c.lifecycleOrder(t).PaymentRef != "pay-42" {
			t.Fatalf("confirm with body %q of an order paid with pay-42 = %d %s; want 200, pay-42", body, c.status, c.body)
		}
	}
	if got := in.getOrder(t, o2.ID).PaymentRef; got != "pay-42" {
		t.Fatalf("payment_ref after a second payment = %q; want pay-42", got)
	}

	o3 := in.order(t, "lc-3", "LC", 1).lifecycleOrder(t)
	wantAnswer(t, "cancel by another buyer", in.cancel(t, o3.ID, "mallory"), 404, "order-not-found")
	for i := range 2 {
		if r := in.cancel(t, o3.ID, testBuyer); r.status != http.StatusOK || r.lifecycleOrder(t).Status != service.StatusCancelled {
			t.Fatalf("cancel #%d = %d %s; want 200 cancelled", i+1, r.status, r.body)
		}
	}
	c = in.confirm(t, o3.ID, bearerOf(paymentToken), "")
	wantAnswer(t, "confirm of a cancelled order", c, 409, "order-cancelled")
	if !strings.Contains(string(c.body), "refunded") {
		t.Fatalf("confirm of a cancelled order = %s; want a detail saying the payment must be refunded", c.body)
	}
	if rp := in.order(t, "lc-3", "LC", 1); rp.status != http.StatusOK || rp.lifecycleOrder(t).ID != o3.ID || rp.lifecycleOrder(t).Status != service.StatusCancelled {
		t.Fatalf("replay of a cancelled order's key = %d %s; want 200, the cancelled order", rp.status, rp.body)
	}
	o4 := in.order(t, "lc-4", "LC", 1).lifecycleOrder(t)
	wantAnswer(t, "the admin token on the buyer's cancel", do(t, "POST", fmt.Sprintf("%s/v1/orders/%d/cancel", in.url, o4.ID), bearerOf(adminToken), ""),
		401, "invalid-token")
	wantAnswer(t, "the payment token on the admin's cancel", do(t, "POST", fmt.Sprintf("%s/v1/admin/orders/%d/cancel", in.url, o4.ID), bearerOf(paymentToken), ""),
		401, "unauthorized")
	if r := do(t, "POST", fmt.Sprintf("%s/v1/admin/orders/%d/cancel", in.url, o4.ID), bearerOf(adminToken), ""); r.status != http.StatusOK {
		t.Fatalf("the admin's cancel = %d %s", r.status, r.body)
	}

	in.setWindow(t, "LX", 5, 1)
	late := in.order(t, "lx-1", "LX", 1).lifecycleOrder(t)
	gone := in.order(t, "lx-2", "LX", 1).lifecycleOrder(t)
	exp, _ := time.Parse(time.RFC3339Nano, *gone.ExpiresAt)
	time.Sleep(time.Until(exp) + 50*time.Millisecond)
	c = in.confirm(t, late.ID, jsonHeader("Authorization", "Bearer "+paymentToken), `{"payment_ref":"pay-late"}`)
	wantAnswer(t, "confirm past the deadline", c, 409, "order-expired")
	if !strings.Contains(string(c.body), "refunded") {
		t.Fatalf("confirm past the deadline = %s; want a detail saying the payment must be refunded", c.body)
	}
	if got := in.getOrder(t, late.ID); got.Status != service.StatusExpired || got.ExpiresAt == nil || got.PaymentRef != "" {
		t.Fatalf("order after a late confirm = %+v; want expired, expires_at kept, no payment_ref", got)
	}
	wantAnswer(t, "cancel past the deadline", in.cancel(t, gone.ID, testBuyer), 409, "order-expired")
	c = in.confirm(t, gone.ID, bearerOf(paymentToken), "")
	wantAnswer(t, "confirm of an expired order", c, 409, "order-expired")
	if !strings.Contains(string(c.body), "refunded") {
		t.Fatalf("confirm of an order expired before = %s; want a detail saying the payment must be refunded", c.body)
	}
	if rp := in.order(t, "lx-1", "LX", 1); rp.status != http.StatusOK || rp.lifecycleOrder(t).Status != service.StatusExpired {
		t.Fatalf("replay of an expired order's key = %d %s; want 200, the expired order", rp.status, rp.body)
	}
	for _, sku := range []string{"LC", "LX"} {
		if a := in.audit(t, sku); !a.Consistent {
			t.Fatalf("audit of %s = %+v", sku, a)
		}
	}
	a := in.audit(t, "LC")
	if a.Available != 7 || a.Reserved != 0 || a.Sold != 3 || a.OrdersByStatus["cancelled"] != 2 || a.LedgerReturned != 2 {
		t.Fatalf("audit of LC = %+v; want 7 available, 3 sold, 2 cancelled orders returned", a)
	}

	off := newInstance(t, d, instanceOpts{noAdmin: true})
	wantAnswer(t, "confirm with no payment or admin token configured", off.confirm(t, o.ID, bearerOf(paymentToken), ""), 403, "payment-disabled")
}

// Every instance sweeps: a reservation nobody pays expires without any
// request, and its unit is for sale again.
func TestUnpaidReservationsExpire(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	in := newInstance(t, d, instanceOpts{expiry: 50 * time.Millisecond})
	in.setWindow(t, "SW", 1, 1)
	o := in.order(t, "sw-1", "SW", 1).lifecycleOrder(t)
	wantAnswer(t, "an order while the unit is reserved", in.order(t, "sw-2", "SW", 1), 409, "sold-out")
	for end := time.Now().Add(30 * time.Second); in.getOrder(t, o.ID).Status == service.StatusReserved; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the reservation was not expired by the sweeper within 30 s of its deadline")
		}
	}
	if got := in.getOrder(t, o.ID); got.Status != service.StatusExpired {
		t.Fatalf("order after the sweep = %+v; want expired", got)
	}
	if r := in.order(t, "sw-3", "SW", 1); r.status != http.StatusCreated {
		t.Fatalf("an order after the expiry = %d %s; want the returned unit sold", r.status, r.body)
	}
	// sw-3 expires a second later in its turn (on a slow box, maybe before
	// the audit). A sweep commits, then counts: the metric read before the
	// audit is at most what the audit sees.
	counted := testutil.ToFloat64(in.metrics.Transitions.WithLabelValues("expired", "expire"))
	a := in.audit(t, "SW")
	if n := a.OrdersByStatus["expired"]; !a.Consistent || counted < 1 || float64(n) < counted || a.LedgerReturned != n {
		t.Fatalf("audit = %+v after stock_order_transitions_total{to=expired,cause=expire} %v; want consistent, "+
			"the sweep counted, one unit returned per expired order", a, counted)
	}
}

// A unit returned at one instance is for sale at another at once, however
// long that one keeps a SKU as sold out: the return is published over
// Redis as a restock is, with its restock sequence.
func TestReturnsReachEveryInstance(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	a := newInstance(t, d, instanceOpts{})
	b := newInstance(t, d, instanceOpts{soldOutTTL: time.Hour})
	a.setWindow(t, "RI", 1, 60)
	o := a.order(t, "ri-1", "RI", 1).lifecycleOrder(t)
	wantAnswer(t, "an order at b while the unit is reserved", b.order(t, "ri-2", "RI", 1), 409, "sold-out")
	if r := a.cancel(t, o.ID, testBuyer); r.status != http.StatusOK {
		t.Fatalf("cancel at a = %d %s", r.status, r.body)
	}
	time.Sleep(1500 * time.Millisecond) // the event's way through Redis: "within about a second", with room for a loaded box
	if r := b.order(t, "ri-3", "RI", 1); r.status != http.StatusCreated {
		t.Fatalf("an order at b after the return at a = %d %s; want 201 at the first try", r.status, r.body)
	}
	if au := a.audit(t, "RI"); !au.Consistent {
		t.Fatalf("audit = %+v", au)
	}
}

// The race: 200 reserved orders whose window ends now, a confirm and a
// cancel of each fired at once from three instances while their sweepers
// run. MySQL's rows then show each order in one final state, one return
// row of its units per cancelled or expired order and none for any other,
// available + reserved + sold = stocked, and every answer a client got
// agrees with them.
func TestLifecycleRace(t *testing.T) {
	t.Parallel()
	const n = 200
	d := newDB(t)
	var ins []*instance
	for range 3 {
		ins = append(ins, newInstance(t, d, instanceOpts{payment: paymentToken, expiry: 20 * time.Millisecond}))
	}
	ins[0].setWindow(t, "RACE", n, 3)
	placed := buyersAs(t, ins, "RACE", n)
	var first time.Time
	for _, o := range placed {
		exp, err := time.Parse(time.RFC3339Nano, *o.ExpiresAt)
		if err != nil {
			t.Fatal(err)
		}
		if first.IsZero() || exp.Before(first) {
			first = exp
		}
	}
	time.Sleep(time.Until(first) - 150*time.Millisecond)
	type answer struct {
		op   string
		code int
		kind string
		body lifecycleOrder
	}
	answers := make([][]answer, n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, o := range placed {
		for j, op := range []string{"confirm", "cancel"} {
			wg.Go(func() {
				time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond) //nolint:gosec // G404: jitter around the deadline, not a secret
				in := ins[(i+j)%len(ins)]
				var r reply
				if op == "confirm" {
					r = in.confirm(t, o.ID, bearerOf(paymentToken), "")
				} else {
					r = in.cancel(t, o.ID, o.Buyer)
				}
				a := answer{op: op, code: r.status, kind: r.problemType()}
				if r.status == http.StatusOK {
					a.body = r.lifecycleOrder(t)
				}
				mu.Lock()
				answers[i] = append(answers[i], a)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	final := waitFinal(t, d, "RACE", n)
	byStatus := map[string]int{}
	for i, o := range placed {
		st := final[o.ID]
		byStatus[st]++
		for _, a := range answers[i] {
			agrees := a.code == http.StatusOK && string(a.body.Status) == st ||
				a.code == http.StatusConflict && a.kind == "order-"+st
			if !agrees {
				t.Errorf("order %d ended %s, but %s was answered %d %s %+v", o.ID, st, a.op, a.code, a.kind, a.body)
			}
		}
	}
	checkLifecycleRows(t, d, "RACE")
	t.Logf("final states: %v", byStatus)
	for _, in := range ins {
		if c := testutil.ToFloat64(in.metrics.Conflicts.WithLabelValues("lock+version")); c != 0 {
			t.Errorf("backstop conflicts = %v; want 0 (a return is no write past the lock)", c)
		}
	}
}

// buyersAs places one order of sku per buyer (buyer-i, key k-i), spread
// over the instances, and returns the orders (201s) in buyer order.
func buyersAs(t testing.TB, ins []*instance, sku string, n int) []lifecycleOrder {
	t.Helper()
	out := make([]lifecycleOrder, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			buyer, key := fmt.Sprint("buyer-", i), fmt.Sprint("k-", i)
			for try := 0; ; try++ {
				r := do(t, "POST", ins[(i+try)%len(ins)].url+"/v1/orders",
					jsonHeader("Idempotency-Key", key, "Authorization", "Bearer "+tokenFor(t, buyer)), fmt.Sprintf(`{"sku":%q,"quantity":1}`, sku))
				if r.status == http.StatusCreated || r.status == http.StatusOK {
					out[i] = r.lifecycleOrder(t)
					return
				}
				if r.status != http.StatusTooManyRequests && r.status != http.StatusServiceUnavailable || try == 20 {
					t.Errorf("order of %s = %d %s", buyer, r.status, r.body)
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return out
}

// waitFinal returns the status of each of sku's orders from MySQL once
// none is reserved (the sweepers have run), by id.
func waitFinal(t testing.TB, d *db, sku string, n int) map[int64]string {
	t.Helper()
	sqlDB := openSQL(t, d.dsn)
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got := statusesOf(t, sqlDB, sku)
		reserved := 0
		for _, st := range got {
			if st == string(service.StatusReserved) {
				reserved++
			}
		}
		if len(got) != n {
			t.Fatalf("%d orders of %s in MySQL; want %d", len(got), sku, n)
		}
		if reserved == 0 {
			return got
		}
		if time.Now().After(end) {
			t.Fatalf("%d orders of %s still reserved a minute past their deadline", reserved, sku)
		}
	}
}

// statusesOf is the status of each of sku's orders, by id.
func statusesOf(t testing.TB, sqlDB *sql.DB, sku string) map[int64]string {
	t.Helper()
	rows, err := sqlDB.QueryContext(t.Context(), "SELECT id, status FROM orders WHERE sku = ?", sku)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rows.Close() }()
	got := map[int64]string{}
	for rows.Next() {
		var id int64
		var st string
		if err := rows.Scan(&id, &st); err != nil {
			t.Fatal(err)
		}
		got[id] = st
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// checkLifecycleRows checks sku's accounting straight from MySQL's rows:
// one return row of its units per cancelled or expired order and none for
// any other, the stock row's reserved and sold equal to the orders' units,
// and available + reserved + sold = stocked.
func checkLifecycleRows(t testing.TB, d *db, sku string) {
	t.Helper()
	sqlDB := openSQL(t, d.dsn)
	var badReturns, returnRows, returnedUnits, returnedOrders int64
	err := sqlDB.QueryRowContext(t.Context(), `SELECT
		(SELECT COUNT(*) FROM orders o WHERE o.sku = ? AND
			(SELECT COUNT(*) FROM stock_ledger l WHERE l.order_id = o.id AND l.kind = 'return' AND l.delta = o.quantity)
			<> IF(o.status IN ('cancelled', 'expired'), 1, 0)),
		(SELECT COUNT(*) FROM stock_ledger WHERE sku = ? AND kind = 'return'),
		(SELECT COALESCE(SUM(delta), 0) FROM stock_ledger WHERE sku = ? AND kind = 'return'),
		(SELECT COUNT(*) FROM orders WHERE sku = ? AND status IN ('cancelled', 'expired'))`, sku, sku, sku, sku).
		Scan(&badReturns, &returnRows, &returnedUnits, &returnedOrders)
	if err != nil {
		t.Fatal(err)
	}
	if badReturns != 0 || returnRows != returnedOrders {
		t.Errorf("%s: %d orders without exactly their one return row; %d return rows for %d cancelled or expired orders",
			sku, badReturns, returnRows, returnedOrders)
	}
	var available, reserved, sold, stocked, reservedUnits, confirmedUnits int64
	err = sqlDB.QueryRowContext(t.Context(), `SELECT available, reserved, sold, stocked,
		(SELECT COALESCE(SUM(quantity), 0) FROM orders WHERE sku = s.sku AND status = 'reserved'),
		(SELECT COALESCE(SUM(quantity), 0) FROM orders WHERE sku = s.sku AND status = 'confirmed')
		FROM stock s WHERE sku = ?`, sku).Scan(&available, &reserved, &sold, &stocked, &reservedUnits, &confirmedUnits)
	if err != nil {
		t.Fatal(err)
	}
	if available+reserved+sold != stocked || reserved != reservedUnits || sold != confirmedUnits || confirmedUnits > stocked {
		t.Errorf("%s: available %d + reserved %d + sold %d vs stocked %d; orders hold %d reserved, %d confirmed",
			sku, available, reserved, sold, stocked, reservedUnits, confirmedUnits)
	}
	t.Logf("%s: %d units returned by %d orders; available %d, reserved %d, sold %d of %d stocked",
		sku, returnedUnits, returnedOrders, available, reserved, sold, stocked)
}
