package handler_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/seckill/stock/client"
	"github.com/seckill/stock/internal/service"
)

// A sale's schedule over HTTP, at three instances on one database (two
// strategies: the counter's units must come back from a refusal): before
// the start every instance refuses with sale-not-started, Retry-After and
// the start; from the start every instance sells, all the units; an end
// set at one instance ends the sale at all of them at once, a key placed
// before it is still answered with its order, and a unit returned after
// it goes back to available unsold.
func TestSaleSchedule(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	ins := []*instance{
		newInstance(t, d, instanceOpts{payment: paymentToken}),
		newInstance(t, d, instanceOpts{strategy: service.StrategyCounterCond}),
		newInstance(t, d, instanceOpts{batchMax: 1}),
	}
	start := time.Now().Add(3 * time.Second).UTC().Truncate(time.Microsecond)
	st, err := ins[0].admin.SetStock(t.Context(), "SCH", client.StockSetting{Available: 5, PaymentWindowSeconds: 60, SaleStartsAt: &start})
	if err != nil || st.SaleStartsAt == nil || !st.SaleStartsAt.Equal(start) || st.SaleEndsAt != nil {
		t.Fatalf("SetStock with a start = %+v, %v; want the start %v, no end", st, err, start)
	}
	read, err := ins[1].admin.Stock(t.Context(), "SCH")
	if err != nil || !read.SaleStartsAt.Equal(start) || read.Now.IsZero() || !read.Now.Before(start) {
		t.Fatalf("GET stock before the start = %+v, %v; want the start and a now before it", read, err)
	}
	for i, in := range ins {
		r := in.orderAs(t, "early", "early-"+strconv.Itoa(i), "SCH", 1)
		wantAnswer(t, "an order before the start at instance "+strconv.Itoa(i), r, http.StatusConflict, "sale-not-started")
		var p struct {
			StartsAt time.Time `json:"starts_at"`
		}
		r.json(t, &p)
		secs, _ := strconv.Atoi(r.header.Get("Retry-After"))
		if !p.StartsAt.Equal(start) || secs < 1 || secs > 4 {
			t.Fatalf("sale-not-started at instance %d: starts_at %v, Retry-After %q; want %v and 1-4 s", i, p.StartsAt, r.header.Get("Retry-After"), start)
		}
	}
	time.Sleep(time.Until(start) + 100*time.Millisecond)
	keys := []string{"open-0", "open-1", "open-2", "open-3", "open-4"}
	for j, key := range keys { // every unit: the counter's refused takes came back
		if r := ins[j%3].orderAs(t, "b"+key, key, "SCH", 1); r.status != http.StatusCreated {
			t.Fatalf("order %s after the start at instance %d = %d %s", key, j%3, r.status, r.body)
		}
	}
	wantAnswer(t, "a sixth order", ins[1].orderAs(t, "late", "sixth", "SCH", 1), http.StatusConflict, "sold-out")
	scheduleEnded(t, ins)
}

// scheduleEnded ends SCH's sale at instance 1 and checks every instance.
func scheduleEnded(t *testing.T, ins []*instance) {
	t.Helper()
	end := time.Now().UTC().Truncate(time.Microsecond)
	if _, err := ins[1].admin.SetStock(t.Context(), "SCH", client.StockSetting{Available: 0, PaymentWindowSeconds: 60, SaleEndsAt: &end}); err != nil {
		t.Fatalf("SetStock ending the sale: %v", err)
	}
	o := ins[2].orderAs(t, "bopen-0", "open-0", "SCH", 1)
	if o.status != http.StatusOK || o.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("a replay after the end = %d %s; want 200, the order placed before it", o.status, o.body)
	}
	id := o.lifecycleOrder(t).ID
	if r := ins[0].confirm(t, id, bearerOf(paymentToken), ""); r.status != http.StatusOK {
		t.Fatalf("confirm after the end = %d %s", r.status, r.body)
	}
	if r := ins[0].cancel(t, ins[0].orderAs(t, "bopen-1", "open-1", "SCH", 1).lifecycleOrder(t).ID, "bopen-1"); r.status != http.StatusOK {
		t.Fatalf("cancel after the end = %d %s", r.status, r.body)
	}
	for i, in := range ins {
		wantAnswer(t, "an order after the end at instance "+strconv.Itoa(i), in.orderAs(t, "late", "late-"+strconv.Itoa(i), "SCH", 1),
			http.StatusConflict, "sale-ended")
	}
	a := ins[0].audit(t, "SCH")
	if !a.Consistent || a.Available != 1 || a.Orders != 5 {
		t.Fatalf("audit after the end = %+v; want consistent, the cancelled unit available, 5 orders", a)
	}
	for _, body := range []string{`{"available":1,"sale_starts_at":"tomorrow"}`, `{"available":1,"sale_ends_at":7}`,
		`{"available":1,"sale_starts_at":"0999-01-01T00:00:00Z"}`} {
		r := do(t, "PUT", ins[0].url+"/v1/admin/stock/SCH", jsonHeader("Authorization", "Bearer "+adminToken), body)
		wantAnswer(t, "PUT "+body, r, http.StatusBadRequest, "invalid-request")
	}
	bad := end.Add(-time.Hour)
	if _, err := ins[0].admin.SetStock(t.Context(), "SCH", client.StockSetting{Available: 1, PaymentWindowSeconds: 60, SaleEndsAt: &bad}); !client.IsKind(err, client.KindInvalidRequest) {
		t.Fatalf("SetStock with an end before the start = %v; want invalid-request", err)
	}
	st, err := ins[0].admin.SetStock(t.Context(), "SCH", client.StockSetting{Available: 1, PaymentWindowSeconds: 60, ClearStart: true, ClearEnd: true})
	if err != nil || st.SaleStartsAt != nil || st.SaleEndsAt != nil {
		t.Fatalf("SetStock clearing the schedule = %+v, %v; want none", st, err)
	}
	if r := ins[2].orderAs(t, "late", "reopened", "SCH", 1); r.status != http.StatusCreated {
		t.Fatalf("an order after the schedule was cleared = %d %s", r.status, r.body)
	}
}
