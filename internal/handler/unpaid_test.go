package handler_test

import (
	"net/http"
	"testing"

	"github.com/seckill/stock/internal/service"
)

// No hoarding over HTTP, at two instances on one database (two strategies:
// the counter's units must come back from a refusal): one buyer reserves
// up to the default cap (STOCK_MAX_QUANTITY, 100, with a payment window),
// an order past it is refused with unpaid-limit, the cap and what the
// buyer has unpaid, at either instance; paying an order makes room; the
// PUT and GET /v1/stock show the cap in force, null for none.
func TestUnpaidLimit(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	ins := []*instance{
		newInstance(t, d, instanceOpts{payment: paymentToken}),
		newInstance(t, d, instanceOpts{strategy: service.StrategyCounterCond}),
	}
	put := func(body string) reply {
		return do(t, "PUT", ins[0].url+"/v1/admin/stock/UNP", jsonHeader("Authorization", "Bearer "+adminToken), body)
	}
	capIs := func(what string, r reply, want *int64) {
		t.Helper()
		var st struct {
			Cap *int64 `json:"max_unpaid_per_buyer"`
		}
		r.json(t, &st)
		if r.status != http.StatusOK || (st.Cap == nil) != (want == nil) || st.Cap != nil && *st.Cap != *want {
			t.Fatalf("%s = %d %s; want max_unpaid_per_buyer %v", what, r.status, r.body, want)
		}
	}
	hundred, five := int64(100), int64(5)
	capIs("PUT without a window", put(`{"available":300}`), nil)
	capIs("PUT with a window", put(`{"available":300,"payment_window_seconds":60}`), &hundred)
	capIs("GET stock", do(t, "GET", ins[1].url+"/v1/stock/UNP", nil, ""), &hundred)

	first := ins[0].orderAs(t, "hoarder", "u-1", "UNP", 60)
	if first.status != http.StatusCreated || ins[1].orderAs(t, "hoarder", "u-2", "UNP", 40).status != http.StatusCreated {
		t.Fatalf("orders of 60 and 40 under a cap of 100 = %d %s, ...; want both placed", first.status, first.body)
	}
	for i, in := range ins {
		r := in.orderAs(t, "hoarder", "u-3", "UNP", 1)
		wantAnswer(t, "an order past the cap", r, http.StatusConflict, "unpaid-limit")
		var p struct {
			Cap    int64  `json:"max_unpaid_per_buyer"`
			Unpaid int64  `json:"unpaid"`
			Detail string `json:"detail"`
		}
		if r.json(t, &p); p.Cap != 100 || p.Unpaid != 100 || p.Detail == "" {
			t.Fatalf("unpaid-limit at instance %d = %s; want the cap 100, 100 unpaid and a detail", i, r.body)
		}
	}
	if r := ins[1].orderAs(t, "other", "o-1", "UNP", 100); r.status != http.StatusCreated {
		t.Fatalf("another buyer's order of 100 = %d %s; want placed (a cap per buyer)", r.status, r.body)
	}
	if r := ins[0].confirm(t, first.lifecycleOrder(t).ID, jsonHeader("Authorization", "Bearer "+paymentToken), `{"payment_ref":"pay-u1"}`); r.status != http.StatusOK {
		t.Fatalf("confirm = %d %s", r.status, r.body)
	}
	if r := ins[1].orderAs(t, "hoarder", "u-3", "UNP", 60); r.status != http.StatusCreated {
		t.Fatalf("an order of 60 after paying 60 = %d %s; want placed", r.status, r.body)
	}
	wantAnswer(t, "an order past the cap again", ins[0].orderAs(t, "hoarder", "u-4", "UNP", 1), http.StatusConflict, "unpaid-limit")

	capIs("PUT with a cap of 5", put(`{"available":100,"payment_window_seconds":60,"max_unpaid_per_buyer":5}`), &five)
	capIs("PUT with no cap", put(`{"available":100,"payment_window_seconds":60,"max_unpaid_per_buyer":null}`), nil)
	capIs("GET stock with no cap", do(t, "GET", ins[1].url+"/v1/stock/UNP", nil, ""), nil)
	if r := ins[1].orderAs(t, "hoarder", "u-5", "UNP", 1); r.status != http.StatusCreated {
		t.Fatalf("an order with no cap = %d %s; want placed", r.status, r.body)
	}
	for _, bad := range []string{`0`, `-1`, `1000000001`, `"5"`, `1.5`} {
		wantAnswer(t, "PUT with max_unpaid_per_buyer "+bad, put(`{"available":100,"max_unpaid_per_buyer":`+bad+`}`),
			http.StatusBadRequest, "invalid-request")
	}
	if a := ins[1].audit(t, "UNP"); !a.Consistent || a.UnpaidMismatch != 0 {
		t.Fatalf("audit = %+v; want consistent", a)
	}
}
