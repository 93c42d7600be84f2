package handler_test

import (
	"net/http"
	"strings"
	"testing"
)

const shop = "https://shop.example"

// Browsers: a preflight from an allowed origin is answered with what a
// sale's page needs, one from another origin is refused, a real order from
// an allowed origin can be read by the page, and the admin routes and
// confirm are never open to a browser. Nothing a preflight does writes.
func TestCORS(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	in := newInstance(t, d, instanceOpts{cors: []string{shop, "http://localhost:3000"}, payment: paymentToken})
	in.setStock(t, "CORS", 10)
	preflight := func(path, origin, method string) reply {
		return do(t, "OPTIONS", in.url+path, map[string]string{"Origin": origin, "Access-Control-Request-Method": method,
			"Access-Control-Request-Headers": "authorization, idempotency-key, content-type", "Authorization": ""}, "")
	}

	r := preflight("/v1/orders", shop, "POST")
	h := r.header
	if r.status != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != shop ||
		!strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") ||
		!strings.Contains(strings.ToLower(h.Get("Access-Control-Allow-Headers")), "idempotency-key") ||
		h.Get("Access-Control-Max-Age") != "600" || h.Get("Access-Control-Allow-Credentials") != "" {
		t.Fatalf("preflight from %s = %d %v; want 204 with its origin, POST, Idempotency-Key, max age 600, no credentials", shop, r.status, h)
	}
	for _, path := range []string{"/v1/orders/1", "/v1/orders/1/cancel", "/v1/stock/CORS"} {
		if r := preflight(path, shop, "GET"); r.status != http.StatusNoContent || r.header.Get("Access-Control-Allow-Origin") != shop {
			t.Fatalf("preflight of %s = %d %v; want 204 for %s", path, r.status, r.header, shop)
		}
	}
	r = preflight("/v1/orders", "https://evil.example", "POST")
	if r.status != http.StatusForbidden || r.problemType() != "cors-origin-refused" || r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("preflight from another origin = %d %s %v; want 403 cors-origin-refused, no Access-Control-Allow-Origin", r.status, r.body, r.header)
	}
	for _, path := range []string{"/v1/admin/stock/CORS", "/v1/admin/stock/CORS/audit", "/v1/admin/orders/1", "/v1/admin/orders/1/confirm", "/healthz", "/openapi.json"} {
		if r := preflight(path, shop, "POST"); r.status == http.StatusNoContent || r.header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("preflight of %s = %d %v; want it not open to browsers", path, r.status, r.header)
		}
	}

	order := do(t, "POST", in.url+"/v1/orders", jsonHeader("Idempotency-Key", "cors-1", "Origin", shop), `{"sku":"CORS","quantity":1}`)
	exposed := strings.ToLower(order.header.Get("Access-Control-Expose-Headers"))
	if order.status != http.StatusCreated || order.header.Get("Access-Control-Allow-Origin") != shop ||
		!strings.Contains(exposed, "location") || !strings.Contains(exposed, "idempotent-replayed") || !strings.Contains(exposed, "retry-after") {
		t.Fatalf("order from %s = %d %v; want 201 readable by the page (its origin, Location and the rest exposed)", shop, order.status, order.header)
	}
	other := do(t, "POST", in.url+"/v1/orders", jsonHeader("Idempotency-Key", "cors-2", "Origin", "https://evil.example"), `{"sku":"CORS","quantity":1}`)
	if other.header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("an order from another origin carried Access-Control-Allow-Origin %q", other.header.Get("Access-Control-Allow-Origin"))
	}
	admin := do(t, "GET", in.url+"/v1/admin/stock/CORS/audit", map[string]string{"Authorization": "Bearer " + adminToken, "Origin": shop}, "")
	if admin.status != http.StatusOK || admin.header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("the admin audit from %s = %d %v; want 200 without CORS headers", shop, admin.status, admin.header)
	}
	if a := in.audit(t, "CORS"); a.Orders != 2 || !a.Consistent {
		t.Fatalf("audit after the preflights and two orders = %+v; want the two orders only", a)
	}

	off := newInstance(t, d, instanceOpts{})
	r = do(t, "OPTIONS", off.url+"/v1/orders", map[string]string{"Origin": shop, "Access-Control-Request-Method": "POST", "Authorization": ""}, "")
	if r.status != http.StatusMethodNotAllowed || r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("preflight without STOCK_CORS_ORIGINS = %d %v; want 405, no CORS headers", r.status, r.header)
	}
}
