package handler_test

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/apptest"
	"github.com/seckill/stock/internal/testserver"
)

// Token guessing is throttled across instances: two instances share one
// count of failed token checks per client IP in Redis. The default budget
// (20 a minute) of wrong admin tokens is answered 401; past it, every route
// that needs a token answers that IP 429 rate-limited with Retry-After at
// either instance, for right tokens too, until the window passes. Failed
// buyer and payment tokens are counted in the same budget; right tokens
// are not counted.
func TestTokenGuessingIsThrottled(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	pay := apptest.Secret()
	a, b := newInstance(t, d, instanceOpts{payment: pay}), newInstance(t, d, instanceOpts{payment: pay})
	a.setStock(t, "G", 10)
	bearer := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
	audit := func(in *instance, tok string) reply {
		return do(t, "GET", in.url+"/v1/admin/stock/G/audit", bearer(tok), "")
	}
	for i := range 25 {
		if r := audit([]*instance{a, b}[i%2], adminToken); r.status != 200 {
			t.Fatalf("audit %d with the admin token = %d %s; want 200 (right tokens are not counted)", i, r.status, r.body)
		}
	}
	for i := range 20 {
		if r := audit([]*instance{a, b}[i%2], fmt.Sprint("guess-", i)); r.status != 401 {
			t.Fatalf("wrong admin token %d (of the 20 allowed) = %d %s; want 401", i, r.status, r.body)
		}
	}
	refusedEverywhere(t, []*instance{a, b}, pay, "after 20 wrong admin tokens")
	if r := do(t, "GET", a.url+"/v1/stock/G", nil, ""); r.status != 200 {
		t.Errorf("the public stock route of a throttled IP = %d %s; want 200 (it needs no token)", r.status, r.body)
	}

	// The count expires a minute after the first failure: shortened here.
	rdb := redis.NewClient(&redis.Options{Addr: testserver.SharedRedis})
	t.Cleanup(func() { _ = rdb.Close() })
	key := apptest.Config(d.dsn).Redis.Prefix + "authfail:ip:127.0.0.1"
	if ttl := rdb.PTTL(t.Context(), key).Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("TTL of the count %s = %v; want within (0, 1m]", key, ttl)
	}
	passWindow(t, rdb, key, a)
	if r := a.order(t, "after-the-window", "G", 1); r.status != 201 {
		t.Fatalf("an order after the window = %d %s; want 201", r.status, r.body)
	}

	// Wrong buyer and payment tokens use up the same budget.
	for i := range 10 {
		if r := do(t, "GET", b.url+"/v1/orders", bearer(fmt.Sprint("not-a-jwt-", i)), ""); r.status != 401 {
			t.Fatalf("wrong buyer token %d = %d %s; want 401", i, r.status, r.body)
		}
		if r := do(t, "POST", a.url+"/v1/admin/orders/1/confirm", bearer(fmt.Sprint("guess-", i)), ""); r.status != 401 {
			t.Fatalf("wrong payment token %d = %d %s; want 401", i, r.status, r.body)
		}
	}
	refusedEverywhere(t, []*instance{a, b}, pay, "after 10 wrong buyer and 10 wrong payment tokens")
	if got := d.ordersOf(t, "G"); len(got) != 1 || got["after-the-window"] == 0 {
		t.Fatalf("orders of G in MySQL = %v; want only after-the-window's (a refused order writes nothing)", got)
	}
}

// refusedEverywhere checks that every route that needs a token answers 429
// rate-limited with Retry-After (within the minute) and Cache-Control:
// no-store at each instance, whatever token it is sent.
func refusedEverywhere(t *testing.T, ins []*instance, pay, when string) {
	t.Helper()
	for _, in := range ins {
		for _, c := range []struct{ name, method, path, auth, body string }{
			{"a wrong admin token", "GET", "/v1/admin/stock/G/audit", "Bearer guess", ""},
			{"the admin token", "GET", "/v1/admin/stock/G/audit", "Bearer " + adminToken, ""},
			{"the admin token, set stock", "PUT", "/v1/admin/stock/G", "Bearer " + adminToken, `{"available":5}`},
			{"the payment token", "POST", "/v1/admin/orders/1/confirm", "Bearer " + pay, ""},
			{"a buyer's token, order", "POST", "/v1/orders", "Bearer " + tokenFor(t, testBuyer), `{"sku":"G","quantity":1}`},
			{"a buyer's token, cancel", "POST", "/v1/orders/1/cancel", "Bearer " + tokenFor(t, testBuyer), ""},
			{"no token", "GET", "/v1/orders", "", ""},
		} {
			r := do(t, c.method, in.url+c.path, jsonHeader("Authorization", c.auth, "Idempotency-Key", "throttled"), c.body)
			retry, err := strconv.Atoi(r.header.Get("Retry-After"))
			if r.status != http.StatusTooManyRequests || r.problemType() != "rate-limited" || err != nil || retry < 1 || retry > 60 ||
				r.header.Get("Cache-Control") != "no-store" {
				t.Errorf("%s: %s %s with %s = %d %s, Retry-After %q, Cache-Control %q; want 429 rate-limited, Retry-After 1..60, no-store",
					when, c.method, c.path, c.name, r.status, r.body, r.header.Get("Retry-After"), r.header.Get("Cache-Control"))
			}
		}
	}
}

// passWindow ends the count's window now (its key expires) and waits until
// in accepts the admin token again.
func passWindow(t *testing.T, rdb *redis.Client, key string, in *instance) {
	t.Helper()
	if err := rdb.PExpire(t.Context(), key, 50*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r := do(t, "GET", in.url+"/v1/admin/stock/G/audit", map[string]string{"Authorization": "Bearer " + adminToken}, "")
		if r.status == 200 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("the admin token 10s after the count expired = %d %s; want 200", r.status, r.body)
		}
	}
}

// Every answer carries X-Content-Type-Options: nosniff; every answer of the
// buyer's and the admin routes, errors included, Cache-Control: no-store;
// the public routes' answers no Cache-Control.
func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	pay := apptest.Secret()
	in := newInstance(t, d, instanceOpts{payment: pay})
	in.setStock(t, "H", 5)
	var placed struct{ ID int64 }
	in.order(t, "h1", "H", 1).json(t, &placed)
	id := strconv.FormatInt(placed.ID, 10)
	buyer, admin := "Bearer "+tokenFor(t, testBuyer), "Bearer "+adminToken
	for _, c := range []struct {
		method, path, auth, body string
		status                   int
		private                  bool
	}{
		{"GET", "/healthz", "", "", 200, false},
		{"GET", "/readyz", "", "", 200, false},
		{"GET", "/metrics", "", "", 200, false},
		{"GET", "/openapi.yaml", "", "", 200, false},
		{"HEAD", "/openapi.json", "", "", 200, false},
		{"GET", "/v1/stock/H", "", "", 200, false},
		{"GET", "/v1/stock/NOPE", "", "", 404, false},
		{"GET", "/v1/nope", "", "", 404, false},
		{"DELETE", "/v1/stock/H", "", "", 405, false},
		{"POST", "/v1/orders", buyer, `{"sku":"H","quantity":1}`, 201, true},
		{"POST", "/v1/orders", buyer, `{"sku":"H","quantity":0}`, 400, true},
		{"GET", "/v1/orders", buyer, "", 200, true},
		{"GET", "/v1/orders", "", "", 401, true},
		{"DELETE", "/v1/orders", buyer, "", 405, true},
		{"GET", "/v1/orders/" + id, buyer, "", 200, true},
		{"HEAD", "/v1/orders/" + id, buyer, "", 200, true},
		{"GET", "/v1/orders/999999", buyer, "", 404, true},
		{"POST", "/v1/orders/" + id + "/cancel", buyer, "", 409, true},
		{"GET", "/v1/admin/orders/" + id, admin, "", 200, true},
		{"GET", "/v1/admin/orders/" + id, "Bearer guess", "", 401, true},
		{"GET", "/v1/admin/stock/NOPE/audit", admin, "", 404, true},
		{"PUT", "/v1/admin/stock/H", admin, `{"available":5}`, 200, true},
		{"POST", "/v1/admin/orders/" + id + "/confirm", "Bearer " + pay, "", 200, true},
		{"GET", "/v1/admin/nope", admin, "", 404, true},
	} {
		r := do(t, c.method, in.url+c.path, jsonHeader("Authorization", c.auth, "Idempotency-Key", "h2"), c.body)
		cc := ""
		if c.private {
			cc = "no-store"
		}
		if r.status != c.status || r.header.Get("X-Content-Type-Options") != "nosniff" || r.header.Get("Cache-Control") != cc {
			t.Errorf("%s %s = %d, X-Content-Type-Options %q, Cache-Control %q; want %d, nosniff, %q",
				c.method, c.path, r.status, r.header.Get("X-Content-Type-Options"), r.header.Get("Cache-Control"), c.status, cc)
		}
	}
}
