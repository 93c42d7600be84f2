package handler

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// The per-buyer limit covers every order route: placing, listing, reading
// one order and cancelling it.
func TestPerBuyerLimitOnEveryOrderRoute(t *testing.T) {
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/v1/orders", `{"sku":"A","quantity":1}`},
		{"GET", "/v1/orders", ""},
		{"GET", "/v1/orders/1", ""},
		{"HEAD", "/v1/orders/1", ""},
		{"POST", "/v1/orders/1/cancel", ""},
	} {
		l := &fixedLimiter{n: 1, seen: map[string]int{}}
		e := newEdge(t, Config{BuyerLimiter: l}, nil)
		send := func() *httptest.ResponseRecorder {
			return e.do(r.method, r.path, r.body, "Idempotency-Key", "k", "Authorization", "Bearer tok:u1")
		}
		if rec := send(); rec.Code >= 300 {
			t.Errorf("%s %s within u1's limit = %d %s; want 2xx", r.method, r.path, rec.Code, rec.Body)
			continue
		}
		if rec := send(); rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
			t.Errorf("%s %s past u1's limit = %d (Retry-After %q); want 429 with Retry-After", r.method, r.path, rec.Code, rec.Header().Get("Retry-After"))
		}
		if l.seen["buyer:u1"] != 2 {
			t.Errorf("%s %s twice: the buyer limiter saw %v; want buyer:u1 x2", r.method, r.path, l.seen)
		}
	}
}

// The per-IP limit keys an IPv6 client by its /64 and an IPv4 client (an
// IPv4-mapped IPv6 address too) by its address.
func TestClientKeys(t *testing.T) {
	l := &fixedLimiter{n: 1, seen: map[string]int{}}
	e := newEdge(t, Config{Limiter: l}, nil)
	send := func(remote string) int {
		req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/v1/stock/A", nil)
		req.RemoteAddr = remote
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, req)
		return rec.Code
	}
	if c := send("[2001:db8:1:2::1]:1234"); c != 200 {
		t.Fatalf("first request of 2001:db8:1:2::1 = %d; want 200", c)
	}
	if c := send("[2001:db8:1:2::beef]:1234"); c != 429 {
		t.Errorf("2001:db8:1:2::beef, of the same /64, after its limit = %d; want 429", c)
	}
	if c := send("[2001:db8:1:3::1]:1234"); c != 200 {
		t.Errorf("2001:db8:1:3::1, another /64 = %d; want 200", c)
	}
	send("192.0.2.1:1234")
	if c := send("[::ffff:192.0.2.1]:1234"); c != 429 {
		t.Errorf("::ffff:192.0.2.1 after 192.0.2.1 used its limit = %d; want 429 (the same client)", c)
	}
	if l.seen["ip:2001:db8:1:2::/64"] != 2 || l.seen["ip:192.0.2.1"] != 2 || len(l.seen) != 3 {
		t.Errorf("limiter keys %v; want ip:2001:db8:1:2::/64 x2, ip:2001:db8:1:3::/64 x1, ip:192.0.2.1 x2", l.seen)
	}
}
