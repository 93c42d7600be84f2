package handler_test

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill/stock/internal/service"
)

// adminPage is a JSON page of GET /v1/admin/orders, next kept raw so that
// null and absent differ.
type adminPage struct {
	Orders []json.RawMessage `json:"orders"`
	Next   json.RawMessage   `json:"next"`
}

// warehouse places 7 orders of two buyers on WH-1 (confirmed at once) and
// WH-2 (a payment window), cancels one of WH-2 and confirms another with a
// payment reference. It returns each order as the admin reads it, by id.
func warehouse(t *testing.T, in *instance) []lifecycleOrder {
	t.Helper()
	in.setStock(t, "WH-1", 50)
	if r := in.setWindow(t, "WH-2", 50, 600); r.status != http.StatusOK {
		t.Fatalf("PUT WH-2 = %d %s", r.status, r.body)
	}
	var ids []int64
	for i := range 7 {
		buyer, sku := []string{"w-a", "w-b"}[i%2], []string{"WH-1", "WH-2"}[i%2]
		r := in.orderAs(t, buyer, fmt.Sprint("wh-", i), sku, 1+i%3)
		if r.status != http.StatusCreated {
			t.Fatalf("order %d = %d %s", i, r.status, r.body)
		}
		ids = append(ids, r.lifecycleOrder(t).ID)
	}
	wantAnswer(t, "cancel", in.cancel(t, ids[1], "w-b"), http.StatusOK, "")
	wantAnswer(t, "confirm", in.confirm(t, ids[3], jsonHeader("Authorization", "Bearer "+adminToken), `{"payment_ref":"pay-3"}`), http.StatusOK, "")
	var all []lifecycleOrder
	for _, id := range ids {
		all = append(all, in.getOrder(t, id))
	}
	return all
}

// listAll walks GET /v1/admin/orders?query from the start, limit at a time,
// and returns the orders of every page. It fails t unless each page but the
// last is full with a next cursor, the last has next null (so a page after
// a next is never empty), and ids ascend.
func listAll(t *testing.T, in *instance, query string, limit int) []lifecycleOrder {
	t.Helper()
	var got []lifecycleOrder
	after := ""
	for {
		url := fmt.Sprintf("%s/v1/admin/orders?%s&limit=%d%s", in.url, query, limit, after)
		r := do(t, "GET", url, bearerOf(adminToken), "")
		if r.status != http.StatusOK {
			t.Fatalf("GET %s = %d %s", url, r.status, r.body)
		}
		var p adminPage
		r.json(t, &p)
		if after != "" && len(p.Orders) == 0 {
			t.Fatalf("GET %s = an empty page; want the page before to have had next null", url)
		}
		for _, raw := range p.Orders {
			var o lifecycleOrder
			if err := json.Unmarshal(raw, &o); err != nil {
				t.Fatal(err)
			}
			if len(got) > 0 && o.ID <= got[len(got)-1].ID {
				t.Fatalf("GET %s gave order %d after order %d; want ascending ids", url, o.ID, got[len(got)-1].ID)
			}
			got = append(got, o)
		}
		if string(p.Next) == "null" {
			return got
		}
		var next string
		if err := json.Unmarshal(p.Next, &next); err != nil || len(p.Orders) != limit {
			t.Fatalf("GET %s = %s; want a full page with a next cursor, or next null", url, r.body)
		}
		after = "&after=" + next
	}
}

// The admin's list over HTTP against MySQL: walked page by page, each
// filter meets every order it selects once, oldest first, the last page's
// next null (a last page that is full too); the orders are those of
// GET /v1/admin/orders/{id}, field for field.
func TestAdminOrderList(t *testing.T) {
	t.Parallel()
	in := newInstance(t, newDB(t), instanceOpts{})
	all := warehouse(t, in)
	for _, c := range []struct {
		query  string
		limits []int
		keep   func(lifecycleOrder) bool
	}{
		{"", []int{1, 2, 3, 7, 100}, func(lifecycleOrder) bool { return true }},
		{"sku=WH-1", []int{2, 4}, func(o lifecycleOrder) bool { return o.SKU == "WH-1" }},
		{"status=reserved", []int{1}, func(o lifecycleOrder) bool { return o.Status == service.StatusReserved }},
		{"sku=WH-2&status=cancelled", []int{5}, func(o lifecycleOrder) bool { return o.Status == service.StatusCancelled }},
		{"sku=WH-2&status=confirmed", []int{1}, func(o lifecycleOrder) bool { return o.SKU == "WH-2" && o.Status == service.StatusConfirmed }},
		{"status=expired", []int{3}, func(lifecycleOrder) bool { return false }},
	} {
		want := slices.DeleteFunc(slices.Clone(all), func(o lifecycleOrder) bool { return !c.keep(o) })
		for _, limit := range c.limits {
			if got := listAll(t, in, c.query, limit); !slices.EqualFunc(got, want, sameListed) {
				t.Errorf("GET /v1/admin/orders?%s by %d = %s; want %s", c.query, limit, listed(got), listed(want))
			}
		}
	}
	// The same JSON as an order's own answer, deadline and payment ref included.
	r := do(t, "GET", in.url+"/v1/admin/orders?sku=WH-2&status=confirmed", bearerOf(adminToken), "")
	var p adminPage
	r.json(t, &p)
	one := do(t, "GET", fmt.Sprintf("%s/v1/admin/orders/%d", in.url, all[3].ID), bearerOf(adminToken), "")
	if len(p.Orders) != 1 || !bytes.Equal(p.Orders[0], bytes.TrimSpace(one.body)) {
		t.Fatalf("the list's order = %s; want the order's own answer %s", p.Orders, one.body)
	}
}

// With Accept: text/csv the page is CSV: the header row, one row per order
// as its JSON says, and Next-Cursor (the JSON's next) on all but the last.
func TestAdminOrderListCSV(t *testing.T) {
	t.Parallel()
	in := newInstance(t, newDB(t), instanceOpts{})
	all := warehouse(t, in)
	csvAccept := map[string]string{"Authorization": "Bearer " + adminToken, "Accept": "text/csv"}
	var rows []lifecycleOrder
	after := ""
	for page := 0; ; page++ {
		url := in.url + "/v1/admin/orders?limit=4" + after
		r := do(t, "GET", url, csvAccept, "")
		if r.status != http.StatusOK || r.header.Get("Content-Type") != "text/csv; charset=utf-8" || r.header.Get("Vary") != "Accept" {
			t.Fatalf("GET %s as CSV = %d %q (Vary %q) %s; want 200 text/csv; charset=utf-8, Vary: Accept",
				url, r.status, r.header.Get("Content-Type"), r.header.Get("Vary"), r.body)
		}
		const head = "id,sku,buyer,quantity,status,created_at,expires_at,payment_ref\r\n"
		if !strings.HasPrefix(string(r.body), head) {
			t.Fatalf("GET %s as CSV = %q; want the header row %q first", url, r.body, head)
		}
		recs, err := csv.NewReader(bytes.NewReader(r.body)).ReadAll()
		if err != nil {
			t.Fatalf("GET %s as CSV = %q: %v", url, r.body, err)
		}
		for _, rec := range recs[1:] {
			rows = append(rows, csvOrder(t, rec))
		}
		var p adminPage
		do(t, "GET", url, bearerOf(adminToken), "").json(t, &p)
		next := r.header.Values("Next-Cursor")
		if want := strings.Trim(string(p.Next), `"`); (want == "null") != (len(next) == 0) || len(next) > 0 && next[0] != want {
			t.Fatalf("GET %s as CSV: Next-Cursor %q; want the JSON's next %s (null: no header)", url, next, p.Next)
		}
		if len(next) == 0 {
			if page != 1 {
				t.Fatalf("7 orders by 4 ended on page %d; want 2 pages", page+1)
			}
			break
		}
		after = "&after=" + next[0]
	}
	if !slices.EqualFunc(rows, all, sameListed) {
		t.Fatalf("CSV rows = %s; want %s", listed(rows), listed(all))
	}
	// JSON wins a tie, and wherever Accept ranks it higher.
	for _, accept := range []string{"", "*/*", "application/json, text/csv", "text/csv;q=0.5, application/json", "text/csv;q=0"} {
		r := do(t, "GET", in.url+"/v1/admin/orders", map[string]string{"Authorization": "Bearer " + adminToken, "Accept": accept}, "")
		if ct := r.header.Get("Content-Type"); r.status != http.StatusOK || ct != "application/json; charset=utf-8" {
			t.Errorf("GET /v1/admin/orders with Accept %q = %d %q; want 200 JSON", accept, r.status, ct)
		}
	}
}

// sameListed reports whether a and b are the same order in the same state.
func sameListed(a, b lifecycleOrder) bool {
	ea, eb := a.ExpiresAt, b.ExpiresAt
	a.ExpiresAt, b.ExpiresAt = nil, nil
	return a == b && (ea == nil) == (eb == nil) && (ea == nil || *ea == *eb)
}

// listed is os in JSON, for failure messages.
func listed(os []lifecycleOrder) string {
	b, _ := json.Marshal(os)
	return string(b)
}

// csvOrder is a CSV row as the order JSON the tests compare; it fails t
// unless the times are RFC 3339 UTC to the microsecond.
func csvOrder(t *testing.T, rec []string) lifecycleOrder {
	t.Helper()
	id, err1 := strconv.ParseInt(rec[0], 10, 64)
	q, err2 := strconv.Atoi(rec[3])
	if err1 != nil || err2 != nil || !expiresFormat.MatchString(rec[5]) || rec[6] != "" && !expiresFormat.MatchString(rec[6]) {
		t.Fatalf("CSV row %q: want an id, a quantity and RFC 3339 UTC times with microseconds", rec)
	}
	o := lifecycleOrder{ID: id, SKU: rec[1], Buyer: rec[2], Quantity: q, Status: service.Status(rec[4]), PaymentRef: rec[7]}
	if rec[6] != "" {
		o.ExpiresAt = &rec[6]
	}
	if _, err := time.Parse(time.RFC3339, rec[5]); err != nil {
		t.Fatalf("CSV row %q: created_at: %v", rec, err)
	}
	return o
}

// The list is the admin's: no token, a buyer's or a wrong one is 401, and
// without an admin token configured it is 403, as on the other admin
// routes; a cursor, status or limit it cannot take is 400.
func TestAdminOrderListRefusals(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	in := newInstance(t, d, instanceOpts{})
	url := in.url + "/v1/admin/orders"
	for what, auth := range map[string]string{"no token": "", "a buyer's token": "Bearer " + tokenFor(t, "w-a"), "a wrong token": "Bearer nope"} {
		wantAnswer(t, what, do(t, "GET", url, map[string]string{"Authorization": auth}, ""), http.StatusUnauthorized, "unauthorized")
	}
	off := newInstance(t, d, instanceOpts{noAdmin: true})
	wantAnswer(t, "admin token off", do(t, "GET", off.url+"/v1/admin/orders", bearerOf(adminToken), ""), http.StatusForbidden, "admin-disabled")
	for _, q := range []string{"after=x", "after=0", "after=-3", "after=1e3", "after=99999999999999999999", "status=paid",
		"sku=a%20b", "limit=0", "limit=101", "limit=x"} {
		wantAnswer(t, q, do(t, "GET", url+"?"+q, bearerOf(adminToken), ""), http.StatusBadRequest, "invalid-request")
	}
}
