package handler

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// ipKey keys an IPv6 address by its /64, an IPv4 address (IPv4-mapped too)
// by itself.
func TestIPKey(t *testing.T) {
	for _, c := range []struct{ ip, want string }{
		{"192.0.2.1", "192.0.2.1"},
		{"::ffff:192.0.2.1", "192.0.2.1"},
		{"2001:db8:1:2::1", "2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff:ffff:ffff:fffe", "2001:db8:1:2::/64"},
		{"2001:db8:1:3::1", "2001:db8:1:3::/64"},
		{"fe80::1%eth0", "fe80::/64"},
		{"::1", "::/64"},
		{"not an IP", "not an IP"},
	} {
		if got := ipKey(c.ip); got != c.want {
			t.Errorf("ipKey(%q) = %q; want %q", c.ip, got, c.want)
		}
	}
}

// fakeThrottle records its checks and refuses every client while refuse is
// set.
type fakeThrottle struct {
	mu     sync.Mutex
	checks []string // key, and " failed" when the check failed
	refuse bool
}

func (f *fakeThrottle) Check(_ context.Context, key string, failed bool) (Decision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if failed {
		key += " failed"
	}
	f.checks = append(f.checks, key)
	return Decision{Allowed: !f.refuse, RetryAfter: 41500 * time.Millisecond}, nil
}

func (f *fakeThrottle) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.checks
	f.checks = nil
	return c
}

// Each token check of the buyer, admin and payment routes is passed to the
// throttle under the client's key, marked failed when a bearer token was
// sent and is wrong; a refused client gets 429 rate-limited with
// Retry-After on each of those routes, a right token too, and the public
// routes never ask.
func TestTokenChecksAreThrottled(t *testing.T) {
	th := &fakeThrottle{}
	e := newEdge(t, Config{AuthThrottle: th, PaymentToken: "pay-secret"}, nil)
	send := func(method, path, auth string) *httptest.ResponseRecorder {
		req := httptest.NewRequestWithContext(t.Context(), method, path, nil)
		req.RemoteAddr = "[2001:db8:7:7::1]:1234"
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, req)
		return rec
	}
	const key = "ip:2001:db8:7:7::/64"
	for _, c := range []struct {
		name, method, path, auth string
		status                   int
		check                    string
	}{
		{"a wrong admin token", "GET", "/v1/admin/orders/1", "Bearer guess", 401, key + " failed"},
		{"the admin token", "GET", "/v1/admin/orders/1", "Bearer admin-secret", 200, key},
		{"no token on an admin route", "GET", "/v1/admin/orders/1", "", 401, key},
		{"another scheme on an admin route", "GET", "/v1/admin/orders/1", "Basic YTpi", 401, key},
		{"a wrong buyer token", "GET", "/v1/orders/1", "Bearer nope", 401, key + " failed"},
		{"a buyer's token", "GET", "/v1/orders/1", "Bearer tok:u1", 200, key},
		{"a wrong payment token", "POST", "/v1/admin/orders/1/confirm", "Bearer guess", 401, key + " failed"},
		{"the payment token", "POST", "/v1/admin/orders/1/confirm", "Bearer pay-secret", 200, key},
		{"the public stock", "GET", "/v1/stock/A", "", 200, ""},
	} {
		rec := send(c.method, c.path, c.auth)
		got := th.take()
		if rec.Code != c.status || c.check == "" && len(got) != 0 || c.check != "" && (len(got) != 1 || got[0] != c.check) {
			t.Errorf("%s: %s %s = %d, throttle checks %q; want %d, checks [%s]", c.name, c.method, c.path, rec.Code, got, c.status, c.check)
		}
	}
	th.refuse = true
	for _, c := range []struct{ method, path, auth string }{
		{"GET", "/v1/admin/orders/1", "Bearer admin-secret"},
		{"PUT", "/v1/admin/stock/A", "Bearer admin-secret"},
		{"GET", "/v1/admin/orders/1", "Bearer guess"},
		{"POST", "/v1/admin/orders/1/confirm", "Bearer pay-secret"},
		{"POST", "/v1/orders", "Bearer tok:u1"},
		{"GET", "/v1/orders", ""},
	} {
		rec := send(c.method, c.path, c.auth)
		if rec.Code != 429 || !strings.Contains(rec.Body.String(), "/rate-limited") || rec.Header().Get("Retry-After") != "42" {
			t.Errorf("refused client: %s %s (%q) = %d Retry-After %q %s; want 429 rate-limited, Retry-After 42",
				c.method, c.path, c.auth, rec.Code, rec.Header().Get("Retry-After"), rec.Body)
		}
	}
	if rec := send("GET", "/v1/stock/A", ""); rec.Code != 200 {
		t.Errorf("refused client: GET /v1/stock/A = %d; want 200 (no token needed, never throttled)", rec.Code)
	}
}
