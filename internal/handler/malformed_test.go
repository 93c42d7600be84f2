package handler

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/service/servicetest"
)

// recorder is a Service that records which of its methods were called and
// answers through the real service's parts on an in-memory store, so the
// service's own validation answers the requests the handler passes on.
type recorder struct {
	svc Service

	mu    sync.Mutex
	calls []string
}

func (r *recorder) record(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, name)
}

func (r *recorder) called() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = nil
}

func (r *recorder) Place(ctx context.Context, p service.PlaceRequest) (service.Order, bool, error) {
	r.record("Place")
	return r.svc.Place(ctx, p)
}

func (r *recorder) Order(ctx context.Context, buyer string, id int64) (service.Order, error) {
	r.record("Order")
	return r.svc.Order(ctx, buyer, id)
}

func (r *recorder) Orders(ctx context.Context, buyer string, f service.OrderFilter) ([]service.Order, error) {
	r.record("Orders")
	return r.svc.Orders(ctx, buyer, f)
}

func (r *recorder) AllOrders(ctx context.Context, f service.AllOrdersFilter) ([]service.Order, int64, error) {
	r.record("AllOrders")
	return r.svc.AllOrders(ctx, f)
}

func (r *recorder) Confirm(ctx context.Context, id int64, ref string) (service.Order, error) {
	r.record("Confirm")
	return r.svc.Confirm(ctx, id, ref)
}

func (r *recorder) Cancel(ctx context.Context, buyer string, id int64) (service.Order, error) {
	r.record("Cancel")
	return r.svc.Cancel(ctx, buyer, id)
}

func (r *recorder) Stock(ctx context.Context, sku string) (service.Stock, error) {
	r.record("Stock")
	return r.svc.Stock(ctx, sku)
}

func (r *recorder) SetStock(ctx context.Context, sku string, set service.StockSetting) (service.Stock, error) {
	r.record("SetStock")
	return r.svc.SetStock(ctx, sku, set)
}

func (r *recorder) Audit(ctx context.Context, sku string) (service.Audit, error) {
	r.record("Audit")
	return r.svc.Audit(ctx, sku)
}

// Every malformed request is answered with its status and problem type and
// writes nothing. The ones the handler can tell (the body, its type and
// size, a missing header or field, authentication, the path) never reach
// the service; the ones only the service's rules refuse (the key's and the
// SKU's characters, the quantity's range, the stock's bounds) reach it and
// are refused there.
func TestMalformedRequestsTable(t *testing.T) {
	store := servicetest.NewMemStore()
	if _, err := store.SetStock(context.Background(), "SKU-1", service.StockSetting{Available: 5}); err != nil {
		t.Fatal(err)
	}
	p := service.Build(service.Config{Strategy: service.StrategyLockVersion, BatchMax: 64}, store, servicetest.NewLocker(), nil, nil)
	rec := &recorder{svc: Services{Placer: p.Service, Lifecycle: p.Lifecycle, Inventory: p.Inventory}}
	e := newEdge(t, Config{}, rec)
	ok := `{"sku":"SKU-1","quantity":1}`
	js := "application/json"
	bearer := "Bearer admin-secret"
	for _, c := range []struct {
		name, method, path, key, ctype, auth, body string
		status                                     int
		kind                                       string
		reaches                                    string // the Service method called, "" for none
	}{
		{"missing key", "POST", "/v1/orders", "", js, "", ok, 400, "invalid-request", ""},
		{"key too long", "POST", "/v1/orders", strings.Repeat("k", 65), js, "", ok, 400, "invalid-request", "Place"},
		{"key with space", "POST", "/v1/orders", "bad key", js, "", ok, 400, "invalid-request", "Place"},
		{"key with slash", "POST", "/v1/orders", "a/b", js, "", ok, 400, "invalid-request", "Place"},
		{"key non-ascii", "POST", "/v1/orders", "clé", js, "", ok, 400, "invalid-request", "Place"},
		{"quantity missing", "POST", "/v1/orders", "k1", js, "", `{"sku":"SKU-1"}`, 400, "invalid-request", ""},
		{"quantity zero", "POST", "/v1/orders", "k2", js, "", `{"sku":"SKU-1","quantity":0}`, 400, "invalid-request", "Place"},
		{"quantity negative", "POST", "/v1/orders", "k3", js, "", `{"sku":"SKU-1","quantity":-1}`, 400, "invalid-request", "Place"},
		{"quantity over cap", "POST", "/v1/orders", "k4", js, "", `{"sku":"SKU-1","quantity":101}`, 400, "invalid-request", "Place"},
		{"quantity huge", "POST", "/v1/orders", "k5", js, "", `{"sku":"SKU-1","quantity":1e30}`, 400, "invalid-request", ""},
		{"quantity int64 overflow", "POST", "/v1/orders", "k6", js, "", `{"sku":"SKU-1","quantity":9223372036854775808}`, 400, "invalid-request", ""},
		{"quantity string", "POST", "/v1/orders", "k7", js, "", `{"sku":"SKU-1","quantity":"1"}`, 400, "invalid-request", ""},
		{"quantity float", "POST", "/v1/orders", "k8", js, "", `{"sku":"SKU-1","quantity":1.5}`, 400, "invalid-request", ""},
		{"quantity null", "POST", "/v1/orders", "k9", js, "", `{"sku":"SKU-1","quantity":null}`, 400, "invalid-request", ""},
		{"unknown field", "POST", "/v1/orders", "k10", js, "", `{"sku":"SKU-1","quantity":1,"price":0}`, 400, "invalid-request", ""},
		{"field name in other case", "POST", "/v1/orders", "k24", js, "", `{"SKU":"SKU-1","quantity":1}`, 400, "invalid-request", ""},
		{"field twice", "POST", "/v1/orders", "k25", js, "", `{"sku":"SKU-1","quantity":1,"quantity":3}`, 400, "invalid-request", ""},
		{"admin field twice", "PUT", "/v1/admin/stock/SKU-1", "", js, bearer, `{"available":1,"available":1000}`, 400, "invalid-request", ""},
		{"not JSON", "POST", "/v1/orders", "k11", js, "", `sku=SKU-1&quantity=1`, 400, "invalid-request", ""},
		{"empty body", "POST", "/v1/orders", "k12", js, "", ``, 400, "invalid-request", ""},
		{"trailing data", "POST", "/v1/orders", "k13", js, "", ok + `{"sku":"SKU-1","quantity":1}`, 400, "invalid-request", ""},
		{"truncated JSON", "POST", "/v1/orders", "k14", js, "", `{"sku":"SKU-1",`, 400, "invalid-request", ""},
		{"array body", "POST", "/v1/orders", "k15", js, "", `[1]`, 400, "invalid-request", ""},
		{"sku missing", "POST", "/v1/orders", "k16", js, "", `{"quantity":1}`, 400, "invalid-request", ""},
		{"sku bad characters", "POST", "/v1/orders", "k17", js, "", `{"sku":"SKU 1;drop","quantity":1}`, 400, "invalid-request", "Place"},
		{"sku too long", "POST", "/v1/orders", "k18", js, "", `{"sku":"` + strings.Repeat("S", 65) + `","quantity":1}`, 400, "invalid-request", "Place"},
		{"sku empty", "POST", "/v1/orders", "k19", js, "", `{"sku":"","quantity":1}`, 400, "invalid-request", "Place"},
		{"unknown sku", "POST", "/v1/orders", "k20", js, "", `{"sku":"SKU-404","quantity":1}`, 404, "unknown-sku", "Place"},
		{"body too large", "POST", "/v1/orders", "k21", js, "", `{"sku":"SKU-1","quantity":1,"x":"` + strings.Repeat("x", 5000) + `"}`, 413, "body-too-large", ""},
		{"wrong content type", "POST", "/v1/orders", "k22", "text/plain", "", ok, 415, "unsupported-media-type", ""},
		{"no content type", "POST", "/v1/orders", "k23", "", "", ok, 415, "unsupported-media-type", ""},
		{"no buyer token", "POST", "/v1/orders", "k26", js, "none", ok, 401, "invalid-token", ""},
		{"bad buyer token", "POST", "/v1/orders", "k27", js, "Bearer nope", ok, 401, "invalid-token", ""},
		{"order id not a number", "GET", "/v1/orders/abc", "", "", "", ``, 400, "invalid-request", ""},
		{"order id zero", "GET", "/v1/orders/0", "", "", "", ``, 400, "invalid-request", ""},
		{"orders limit not a number", "GET", "/v1/orders?limit=x", "", "", "", ``, 400, "invalid-request", ""},
		{"orders bad cursor", "GET", "/v1/orders?cursor=-1", "", "", "", ``, 400, "invalid-request", ""},
		{"orders limit too big", "GET", "/v1/orders?limit=1000", "", "", "", ``, 400, "invalid-request", "Orders"},
		{"admin orders cursor not a number", "GET", "/v1/admin/orders?after=x", "", "", bearer, ``, 400, "invalid-request", ""},
		{"admin orders cursor zero", "GET", "/v1/admin/orders?after=0", "", "", bearer, ``, 400, "invalid-request", ""},
		{"admin orders limit not a number", "GET", "/v1/admin/orders?limit=1.5", "", "", bearer, ``, 400, "invalid-request", ""},
		{"admin orders limit zero", "GET", "/v1/admin/orders?limit=0", "", "", bearer, ``, 400, "invalid-request", "AllOrders"},
		{"admin orders limit too big", "GET", "/v1/admin/orders?limit=101", "", "", bearer, ``, 400, "invalid-request", "AllOrders"},
		{"admin orders bad status", "GET", "/v1/admin/orders?status=paid", "", "", bearer, ``, 400, "invalid-request", "AllOrders"},
		{"admin orders bad sku", "GET", "/v1/admin/orders?sku=a%20b", "", "", bearer, ``, 400, "invalid-request", "AllOrders"},
		{"admin orders without token", "GET", "/v1/admin/orders", "", "", "none", ``, 401, "unauthorized", ""},
		{"admin without token", "PUT", "/v1/admin/stock/SKU-1", "", js, "", `{"available":1000}`, 401, "unauthorized", ""},
		{"admin wrong token", "PUT", "/v1/admin/stock/SKU-1", "", js, "Bearer nope", `{"available":1000}`, 401, "unauthorized", ""},
		{"admin token not bearer", "PUT", "/v1/admin/stock/SKU-1", "", js, "admin-secret", `{"available":1000}`, 401, "unauthorized", ""},
		{"audit wrong token", "GET", "/v1/admin/stock/SKU-1/audit", "", "", "Bearer x", ``, 401, "unauthorized", ""},
		{"admin negative stock", "PUT", "/v1/admin/stock/SKU-1", "", js, bearer, `{"available":-1}`, 400, "invalid-request", "SetStock"},
		{"admin stock missing", "PUT", "/v1/admin/stock/SKU-1", "", js, bearer, `{}`, 400, "invalid-request", ""},
		{"admin stock string", "PUT", "/v1/admin/stock/SKU-1", "", js, bearer, `{"available":"9"}`, 400, "invalid-request", ""},
		{"admin stock too big", "PUT", "/v1/admin/stock/SKU-1", "", js, bearer, `{"available":10000000000}`, 400, "invalid-request", "SetStock"},
		{"admin bad sku", "PUT", "/v1/admin/stock/bad%20sku", "", js, bearer, `{"available":1}`, 400, "invalid-request", "SetStock"},
		{"admin wrong content type", "PUT", "/v1/admin/stock/SKU-1", "", "text/plain", bearer, `{"available":1}`, 415, "unsupported-media-type", ""},
		{"stock bad sku", "GET", "/v1/stock/bad%20sku", "", "", "", ``, 400, "invalid-request", "Stock"},
		{"unknown route", "GET", "/v1/nope", "", "", "", ``, 404, "not-found", ""},
		{"wrong method", "DELETE", "/v1/orders", "", "", "", ``, 405, "method-not-allowed", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec.reset()
			req := httptest.NewRequestWithContext(t.Context(), c.method, c.path, strings.NewReader(c.body))
			if c.key != "" {
				req.Header.Set("Idempotency-Key", c.key)
			}
			if c.ctype != "" {
				req.Header.Set("Content-Type", c.ctype)
			}
			switch {
			case c.auth == "none":
			case c.auth != "":
				req.Header.Set("Authorization", c.auth)
			case strings.HasPrefix(c.path, "/v1/orders"):
				req.Header.Set("Authorization", "Bearer tok:u1")
			}
			w := httptest.NewRecorder()
			e.h.ServeHTTP(w, req)
			var p Problem
			_ = json.Unmarshal(w.Body.Bytes(), &p)
			if w.Code != c.status || p.Type != ProblemBase+c.kind {
				t.Fatalf("%s %s %q = %d %s; want %d %s", c.method, c.path, c.body, w.Code, w.Body, c.status, c.kind)
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("Content-Type = %q; want application/problem+json", ct)
			}
			var want []string
			if c.reaches != "" {
				want = []string{c.reaches}
			}
			if got := rec.called(); !slices.Equal(got, want) {
				t.Fatalf("service calls for %s %s %q = %v; want %v", c.method, c.path, c.body, got, want)
			}
		})
	}
	// The one store call that got past the service's validation (the
	// unknown SKU's) wrote nothing either.
	a, err := store.Audit(context.Background(), "SKU-1")
	orders, oerr := store.Orders(context.Background(), "u1", service.OrderFilter{Limit: 100})
	if err != nil || oerr != nil || a.Available != 5 || a.Orders != 0 || a.Stocked != 5 || len(orders) != 0 || store.Stats().SetStocks != 1 {
		t.Fatalf("store after the malformed requests: audit %+v, %v, orders %v, %v, writes %+v; want untouched (5 available, no orders, no restock)",
			a, err, orders, oerr, store.Stats())
	}
}
