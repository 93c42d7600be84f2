package handler_test

import (
	"database/sql"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	_ "github.com/go-sql-driver/mysql"

	"github.com/seckill/stock/internal/service"
)

func openSQL(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func TestEndpoints(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	in := newInstance(t, d, instanceOpts{})
	admin := map[string]string{"Authorization": "Bearer " + adminToken}
	in.setStock(t, "SKU-1", 3)

	var st service.Stock
	r := do(t, "GET", in.url+"/v1/stock/SKU-1", nil, "")
	r.json(t, &st)
	if r.status != 200 || st.Available != 3 || st.Sold != 0 {
		t.Fatalf("GET stock = %d %+v; want 200 available 3", r.status, st)
	}

	r = in.order(t, "key-1", "SKU-1", 2)
	var o service.Order
	r.json(t, &o)
	if r.status != http.StatusCreated || o.ID == 0 || o.Quantity != 2 || o.SKU != "SKU-1" || o.Fence == nil {
		t.Fatalf("POST order = %d %s; want 201 with the order and its fence", r.status, r.body)
	}
	if loc := r.header.Get("Location"); loc != fmt.Sprintf("/v1/orders/%d", o.ID) {
		t.Fatalf("Location = %q", loc)
	}

	// Replay: same key, same body: 200, same order, nothing deducted.
	r = in.order(t, "key-1", "SKU-1", 2)
	var o2 service.Order
	r.json(t, &o2)
	if r.status != http.StatusOK || o2.ID != o.ID || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay = %d %s; want 200 with order %d", r.status, r.body, o.ID)
	}
	// Same key, other body: 422.
	if r = in.order(t, "key-1", "SKU-1", 1); r.status != http.StatusUnprocessableEntity || r.problemType() != "idempotency-key-reused" {
		t.Fatalf("key reuse = %d %s; want 422 idempotency-key-reused", r.status, r.body)
	}
	// Sold out: 1 left, 2 asked.
	r = in.order(t, "key-2", "SKU-1", 2)
	if r.status != http.StatusConflict || r.problemType() != "sold-out" || r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("sold out = %d %s %s; want 409 sold-out problem+json", r.status, r.header.Get("Content-Type"), r.body)
	}
	if r = in.order(t, "key-3", "NOPE", 1); r.status != http.StatusNotFound || r.problemType() != "unknown-sku" {
		t.Fatalf("unknown SKU = %d %s; want 404 unknown-sku", r.status, r.body)
	}

	r = do(t, "GET", fmt.Sprintf("%s/v1/orders/%d", in.url, o.ID), nil, "")
	r.json(t, &o2)
	if r.status != 200 || o2.ID != o.ID || o2.Key != "key-1" {
		t.Fatalf("GET order = %d %s", r.status, r.body)
	}
	if r = do(t, "GET", in.url+"/v1/orders/999999", nil, ""); r.status != 404 || r.problemType() != "order-not-found" {
		t.Fatalf("GET missing order = %d %s; want 404", r.status, r.body)
	}
	if r = do(t, "GET", in.url+"/v1/orders/abc", nil, ""); r.status != 400 {
		t.Fatalf("GET order abc = %d; want 400", r.status)
	}
	if r = do(t, "GET", in.url+"/v1/stock/NOPE", nil, ""); r.status != 404 || r.problemType() != "unknown-sku" {
		t.Fatalf("GET unknown stock = %d; want 404", r.status)
	}

	a := in.audit(t, "SKU-1")
	if !a.Consistent || a.Sold != 2 || a.Available != 1 || a.Stocked != 3 || a.Orders != 1 || a.Oversold != 0 {
		t.Fatalf("audit = %+v; want consistent, sold 2, available 1", a)
	}
	if r = do(t, "GET", in.url+"/v1/admin/stock/NOPE/audit", admin, ""); r.status != 404 {
		t.Fatalf("audit of unknown SKU = %d; want 404", r.status)
	}
	// Restock: the ledger keeps the audit exact.
	in.setStock(t, "SKU-1", 10)
	if a = in.audit(t, "SKU-1"); !a.Consistent || a.Stocked != 12 || a.Available != 10 {
		t.Fatalf("audit after restock = %+v; want stocked 12, available 10", a)
	}

	for _, c := range []struct {
		path string
		want int
		has  string
	}{
		{"/healthz", 200, "ok"},
		{"/readyz", 200, `"mysql":"up"`},
		{"/metrics", 200, "stock_orders_total{result=\"created\"} 1"},
	} {
		if r = do(t, "GET", in.url+c.path, nil, ""); r.status != c.want || !strings.Contains(string(r.body), c.has) {
			t.Fatalf("GET %s = %d, body without %q:\n%.400s", c.path, r.status, c.has, r.body)
		}
	}
	if r = do(t, "GET", in.url+"/nope", nil, ""); r.status != 404 || r.problemType() != "not-found" {
		t.Fatalf("unknown route = %d %s; want 404 not-found", r.status, r.body)
	}
	if r = do(t, "DELETE", in.url+"/v1/orders", nil, ""); r.status != 405 || r.problemType() != "method-not-allowed" {
		t.Fatalf("DELETE /v1/orders = %d %s; want 405", r.status, r.body)
	}
}

// A few malformed requests through the whole stack (handler, service,
// MySQL), as a smoke test: the full table runs on a recording service in
// TestMalformedRequestsTable, which also checks which requests reach the
// service.
func TestMalformedRequests(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	in := newInstance(t, d, instanceOpts{})
	in.setStock(t, "SKU-1", 5)
	ok := `{"sku":"SKU-1","quantity":1}`
	js := "application/json"
	bearer := "Bearer " + adminToken
	for _, c := range []struct {
		name, method, path, key, ctype, auth, body string
		status                                     int
		kind                                       string
	}{
		{"missing key", "POST", "/v1/orders", "", js, "", ok, 400, "invalid-request"},
		{"key with space", "POST", "/v1/orders", "bad key", js, "", ok, 400, "invalid-request"},
		{"quantity over cap", "POST", "/v1/orders", "k4", js, "", `{"sku":"SKU-1","quantity":101}`, 400, "invalid-request"},
		{"unknown field", "POST", "/v1/orders", "k10", js, "", `{"sku":"SKU-1","quantity":1,"price":0}`, 400, "invalid-request"},
		{"unknown sku", "POST", "/v1/orders", "k20", js, "", `{"sku":"SKU-404","quantity":1}`, 404, "unknown-sku"},
		{"body too large", "POST", "/v1/orders", "k21", js, "", `{"sku":"SKU-1","quantity":1,"x":"` + strings.Repeat("x", 5000) + `"}`, 413, "body-too-large"},
		{"wrong content type", "POST", "/v1/orders", "k22", "text/plain", "", ok, 415, "unsupported-media-type"},
		{"admin wrong token", "PUT", "/v1/admin/stock/SKU-1", "", js, "Bearer nope", `{"available":1000}`, 401, "unauthorized"},
		{"admin negative stock", "PUT", "/v1/admin/stock/SKU-1", "", js, bearer, `{"available":-1}`, 400, "invalid-request"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := map[string]string{}
			if c.key != "" {
				h["Idempotency-Key"] = c.key
			}
			if c.ctype != "" {
				h["Content-Type"] = c.ctype
			}
			if c.auth != "" {
				h["Authorization"] = c.auth
			}
			r := do(t, c.method, in.url+c.path, h, c.body)
			if r.status != c.status || r.problemType() != c.kind {
				t.Fatalf("%s %s %q = %d %s; want %d %s", c.method, c.path, c.body, r.status, r.body, c.status, c.kind)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("Content-Type = %q; want application/problem+json", ct)
			}
		})
	}
	if a := in.audit(t, "SKU-1"); a.Available != 5 || a.Sold != 0 || a.Orders != 0 || a.Stocked != 5 {
		t.Fatalf("stock after the malformed requests = %+v; want untouched (5 available, no orders)", a)
	}
}

func TestAdminDisabledWithoutToken(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	in := newInstance(t, d, instanceOpts{noAdmin: true})
	r := do(t, "PUT", in.url+"/v1/admin/stock/SKU-1", jsonHeader("Authorization", "Bearer "), `{"available":1}`)
	if r.status != http.StatusForbidden || r.problemType() != "admin-disabled" {
		t.Fatalf("admin without configured token = %d %s; want 403 admin-disabled", r.status, r.body)
	}
}

// 50 concurrent requests with one key, over two instances: exactly one order.
func TestIdempotencyUnderConcurrency(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	ins := []*instance{newInstance(t, d, instanceOpts{}), newInstance(t, d, instanceOpts{})}
	ins[0].setStock(t, "SKU-1", 100)
	var wg sync.WaitGroup
	replies := make([]reply, 50)
	start := make(chan struct{})
	for i := range replies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			replies[i] = ins[i%2].order(t, "same-key", "SKU-1", 1)
		}()
	}
	close(start)
	wg.Wait()
	var ids = map[int64]bool{}
	created := 0
	for _, r := range replies {
		if r.status != http.StatusCreated && r.status != http.StatusOK {
			t.Fatalf("reply %d %s; want 201 or 200", r.status, r.body)
		}
		if r.status == http.StatusCreated {
			created++
		}
		var o service.Order
		r.json(t, &o)
		ids[o.ID] = true
	}
	if created != 1 || len(ids) != 1 {
		t.Fatalf("50 requests with one key: %d created, %d distinct order ids; want 1 and 1", created, len(ids))
	}
	if a := ins[1].audit(t, "SKU-1"); a.Orders != 1 || a.Sold != 1 || !a.Consistent {
		t.Fatalf("audit = %+v; want one order, one unit sold", a)
	}
}
