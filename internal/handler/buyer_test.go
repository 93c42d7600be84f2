package handler_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/seckill/stock/internal/handler"
	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/testserver"
)

func (in *instance) orderAs(t testing.TB, buyer, key, sku string, qty int) reply {
	t.Helper()
	return do(t, "POST", in.url+"/v1/orders", jsonHeader("Idempotency-Key", key, "Authorization", "Bearer "+tokenFor(t, buyer)),
		fmt.Sprintf(`{"sku":%q,"quantity":%d}`, sku, qty))
}

// orderRetrying is orderAs, retried on 429 and 503 (up to 20 times, 10ms
// apart) as a client does: for an order that may meet an instance that has
// not heard of a restock yet (told to retry, service/restocked.go).
func (in *instance) orderRetrying(t testing.TB, buyer, key, sku string, qty int) reply {
	t.Helper()
	for try := 0; ; try++ {
		r := in.orderAs(t, buyer, key, sku, qty)
		if (r.status != 429 && r.status != 503) || try == 20 {
			return r
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (in *instance) setLimit(t testing.TB, sku string, n, limit int) {
	t.Helper()
	r := do(t, "PUT", in.url+"/v1/admin/stock/"+sku, jsonHeader("Authorization", "Bearer "+adminToken),
		fmt.Sprintf(`{"available":%d,"per_buyer_limit":%d}`, n, limit))
	if r.status != http.StatusOK {
		t.Fatalf("PUT stock %s = %d %s", sku, r.status, r.body)
	}
}

func sign(t testing.TB, method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Every bad token is a 401 invalid-token problem with WWW-Authenticate:
// Bearer error="invalid_token", and writes nothing.
func TestBadTokensAre401(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	in := newInstance(t, d, instanceOpts{noAuthThrottle: true})
	in.setStock(t, "TOK", 10)
	now := time.Now()
	ok := jwt.MapClaims{"sub": "b1", "exp": now.Add(time.Hour).Unix()}
	with := func(k string, v any) jwt.MapClaims {
		c := jwt.MapClaims{}
		for kk, vv := range ok {
			c[kk] = vv
		}
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	good := sign(t, jwt.SigningMethodHS256, jwtSecret, ok)
	parts := strings.Split(good, ".")
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"admin","exp":9999999999}`)) + "." + parts[2]
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + parts[1] + "."
	cases := []struct{ name, auth string }{
		{"no Authorization header", ""},
		{"empty bearer", "Bearer "},
		{"Basic scheme", "Basic " + base64.StdEncoding.EncodeToString([]byte("b1:pw"))},
		{"token without scheme", good},
		{"not a JWT", "Bearer not-a-jwt"},
		{"garbage segments", "Bearer aaa.bbb.ccc"},
		{"expired", "Bearer " + sign(t, jwt.SigningMethodHS256, jwtSecret, with("exp", now.Add(-time.Hour).Unix()))},
		{"not yet valid", "Bearer " + sign(t, jwt.SigningMethodHS256, jwtSecret, with("nbf", now.Add(time.Hour).Unix()))},
		{"no exp", "Bearer " + sign(t, jwt.SigningMethodHS256, jwtSecret, with("exp", nil))},
		{"wrong secret", "Bearer " + sign(t, jwt.SigningMethodHS256, []byte("another-secret-of-at-least-32-bytes!!"), ok)},
		{"alg none", "Bearer " + none},
		{"alg none, signed by the library", "Bearer " + sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, ok)},
		{"HS512 with the right secret", "Bearer " + sign(t, jwt.SigningMethodHS512, jwtSecret, ok)},
		{"RS256 when only HS256 is configured", "Bearer " + sign(t, jwt.SigningMethodRS256, rsaKey, ok)},
		{"EdDSA when only HS256 is configured", "Bearer " + sign(t, jwt.SigningMethodEdDSA, edKey, ok)},
		{"payload tampered", "Bearer " + tampered},
		{"empty sub", "Bearer " + sign(t, jwt.SigningMethodHS256, jwtSecret, with("sub", ""))},
		{"no sub", "Bearer " + sign(t, jwt.SigningMethodHS256, jwtSecret, with("sub", nil))},
		{"sub too long", "Bearer " + sign(t, jwt.SigningMethodHS256, jwtSecret, with("sub", strings.Repeat("x", 129)))},
		{"the admin token", "Bearer " + adminToken},
	}
	for i, c := range cases {
		r := do(t, "POST", in.url+"/v1/orders", jsonHeader("Idempotency-Key", fmt.Sprint("tok-", i), "Authorization", c.auth),
			`{"sku":"TOK","quantity":1}`)
		if r.status != http.StatusUnauthorized || r.problemType() != "invalid-token" ||
			!strings.Contains(r.header.Get("WWW-Authenticate"), `error="invalid_token"`) {
			t.Errorf("%s: %d %s (WWW-Authenticate %q); want 401 invalid-token", c.name, r.status, r.body, r.header.Get("WWW-Authenticate"))
		}
	}
	if n := len(d.ordersOf(t, "TOK")); n != 0 {
		t.Fatalf("%d orders written by requests with bad tokens; want none", n)
	}
	// The good token, and one expired within the leeway, are accepted.
	if r := do(t, "POST", in.url+"/v1/orders", jsonHeader("Idempotency-Key", "tok-good", "Authorization", "Bearer "+good), `{"sku":"TOK","quantity":1}`); r.status != 201 {
		t.Fatalf("good token = %d %s", r.status, r.body)
	}
	skewed := sign(t, jwt.SigningMethodHS256, jwtSecret, with("exp", now.Add(-10*time.Second).Unix()))
	if r := do(t, "POST", in.url+"/v1/orders", jsonHeader("Idempotency-Key", "tok-skew", "Authorization", "Bearer "+skewed), `{"sku":"TOK","quantity":1}`); r.status != 201 {
		t.Fatalf("token expired 10s ago (within the 30s leeway) = %d %s", r.status, r.body)
	}
}

// Keys are scoped per buyer; orders are private to their buyer (and the
// admin); the list is the caller's own, paginated by cursor.
func TestBuyersOwnTheirKeysAndOrders(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	in := newInstance(t, d, instanceOpts{})
	in.setStock(t, "OWN", 100)
	a1, b1 := in.orderAs(t, "alice", "same-key", "OWN", 1), in.orderAs(t, "bob", "same-key", "OWN", 1)
	if a1.status != 201 || b1.status != 201 {
		t.Fatalf("two buyers with one key = %d, %d; want two orders", a1.status, b1.status)
	}
	var oa, ob service.Order
	a1.json(t, &oa)
	b1.json(t, &ob)
	if oa.ID == ob.ID || oa.Buyer != "alice" || ob.Buyer != "bob" {
		t.Fatalf("orders %+v and %+v; want two, one per buyer", oa, ob)
	}
	if r := in.orderAs(t, "alice", "same-key", "OWN", 1); r.status != 200 {
		t.Fatalf("alice's replay = %d; want 200", r.status)
	}
	if r := in.orderAs(t, "alice", "same-key", "OWN", 2); r.status != 422 {
		t.Fatalf("alice reusing her key with another body = %d; want 422", r.status)
	}
	get := func(who string, id int64) reply {
		auth := "Bearer " + tokenFor(t, who)
		if who == "admin" {
			auth = "Bearer " + adminToken
		}
		return do(t, "GET", fmt.Sprintf("%s/v1/orders/%d", in.url, id), map[string]string{"Authorization": auth}, "")
	}
	adminGet := func(auth string, id int64) reply {
		return do(t, "GET", fmt.Sprintf("%s/v1/admin/orders/%d", in.url, id), map[string]string{"Authorization": auth}, "")
	}
	if r := get("alice", oa.ID); r.status != 200 {
		t.Fatalf("alice reading her order = %d", r.status)
	}
	if r := get("bob", oa.ID); r.status != 404 || r.problemType() != "order-not-found" {
		t.Fatalf("bob reading alice's order = %d %s; want 404 (not 403: ids tell nothing)", r.status, r.body)
	}
	if r := get("admin", oa.ID); r.status != 401 || r.problemType() != "invalid-token" {
		t.Fatalf("the admin token on a buyer's route = %d %s; want 401 invalid-token (the admin reads under /v1/admin)", r.status, r.body)
	}
	if r := adminGet("Bearer "+adminToken, oa.ID); r.status != 200 {
		t.Fatalf("admin reading alice's order = %d", r.status)
	}
	if r := adminGet("Bearer "+tokenFor(t, "alice"), oa.ID); r.status != 401 || r.problemType() != "unauthorized" {
		t.Fatalf("alice's token on the admin's read of her own order = %d %s; want 401 unauthorized", r.status, r.body)
	}
	if r := do(t, "GET", fmt.Sprintf("%s/v1/orders/%d", in.url, oa.ID), map[string]string{"Authorization": ""}, ""); r.status != 401 {
		t.Fatalf("anonymous read of an order = %d; want 401", r.status)
	}
	for i := range 4 {
		in.orderAs(t, "alice", fmt.Sprint("more-", i), "OWN", 1)
	}
	var ids []int64
	cursor := ""
	for page := 0; page < 5; page++ {
		url := in.url + "/v1/orders?sku=OWN&limit=2"
		if cursor != "" {
			url += "&cursor=" + cursor
		}
		r := do(t, "GET", url, map[string]string{"Authorization": "Bearer " + tokenFor(t, "alice")}, "")
		var p struct {
			Orders     []service.Order `json:"orders"`
			NextCursor string          `json:"next_cursor"`
		}
		r.json(t, &p)
		for _, o := range p.Orders {
			if o.Buyer != "alice" {
				t.Fatalf("alice's list has %+v", o)
			}
			ids = append(ids, o.ID)
		}
		if cursor = p.NextCursor; cursor == "" {
			break
		}
	}
	if len(ids) != 5 {
		t.Fatalf("alice's orders over the pages = %v; want her 5", ids)
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] >= ids[i-1] {
			t.Fatalf("pages not newest first without repeats: %v", ids)
		}
	}
	r := do(t, "GET", in.url+"/v1/orders?sku=OWN", map[string]string{"Authorization": "Bearer " + tokenFor(t, "carol")}, "")
	if r.status != 200 || !strings.Contains(string(r.body), `"orders":[]`) {
		t.Fatalf("carol's list = %d %s; want none", r.status, r.body)
	}
}

// The per-buyer limit is exact across three instances for every safe
// strategy: a greedy buyer firing many concurrent orders holds exactly the
// limit, is told limit-exceeded with what is left, and the audit agrees.
func TestPerBuyerLimitIsExact(t *testing.T) {
	t.Parallel()
	for _, st := range append(slices.Clone(safeStrategies), "db-only") {
		t.Run(string(st), func(t *testing.T) {
			t.Parallel()
			d := newDB(t)
			o := instanceOpts{strategy: st}
			if st == "db-only" { // lock+version with Redis down
				srv := testserver.StartRedis(t)
				srv.Kill()
				o = instanceOpts{strategy: service.StrategyLockVersion, redisAddr: srv.Addr}
			}
			ins := []*instance{newInstance(t, d, o), newInstance(t, d, o), newInstance(t, d, o)}
			ins[0].setLimit(t, "LIM", 1000, 3)
			var wg sync.WaitGroup
			var mu sync.Mutex
			codes := map[int]int{}
			for i := range 30 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for try := 0; ; try++ {
						r := ins[i%3].orderAs(t, "greedy", fmt.Sprint("g-", i), "LIM", 1)
						if (r.status == 429 || r.status == 503) && try < 20 {
							time.Sleep(10 * time.Millisecond)
							continue
						}
						if r.status == 409 {
							var p handler.Problem
							r.json(t, &p)
							if r.problemType() != "limit-exceeded" || p.Remaining == nil || *p.Remaining != 0 || p.Limit == nil || *p.Limit != 3 {
								t.Errorf("refusal = %s; want limit-exceeded with limit 3, remaining 0", r.body)
							}
						}
						mu.Lock()
						codes[r.status]++
						mu.Unlock()
						return
					}
				}()
			}
			wg.Wait()
			if codes[201] != 3 || codes[409] != 27 {
				t.Fatalf("greedy buyer's 30 orders with a limit of 3 = %v; want 3 x 201, 27 x 409", codes)
			}
			// A partial allowance: 2 units asked with 1 left would exceed.
			ins[0].setLimit(t, "LIM", 1000, 4)
			if r := ins[1].orderRetrying(t, "greedy", "g-two", "LIM", 2); r.status != 409 || !strings.Contains(string(r.body), `"remaining":1`) {
				t.Fatalf("2 more with 1 left = %d %s; want 409 with remaining 1", r.status, r.body)
			}
			if r := ins[2].orderRetrying(t, "greedy", "g-one", "LIM", 1); r.status != 201 {
				t.Fatalf("1 more with 1 left = %d %s; want 201", r.status, r.body)
			}
			if r := ins[0].orderAs(t, "greedy", "g-one", "LIM", 1); r.status != 200 {
				t.Fatalf("replay of an accepted order at the limit = %d; want 200", r.status)
			}
			if a := ins[0].audit(t, "LIM"); !a.Consistent || a.MaxBuyerHolds != 4 || a.BuyersOverLimit != 0 {
				t.Fatalf("audit = %+v; want consistent, greedy holding 4 (the limit)", a)
			}
		})
	}
}

// The unsafe `none` strategy is caught exceeding the limit: its read-check-
// write of the buyer's count loses updates under concurrent orders.
func TestNoneExceedsTheLimit(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	// The first order to reach COMMIT holds its buyer_purchases row until
	// another order of the buyer is blocked writing that row: that one read
	// the allowance before the first committed, so both are placed.
	blocked := d.statementWaits(t, "INSERT INTO `buyer_purchases`")
	var first atomic.Bool
	hook := func() {
		if first.CompareAndSwap(false, true) && !blocked(time.Minute) {
			t.Error("no second order of the buyer blocked on its buyer_purchases row within a minute")
		}
	}
	ins := []*instance{newInstance(t, d, instanceOpts{strategy: service.StrategyNone, hook: hook}),
		newInstance(t, d, instanceOpts{strategy: service.StrategyNone, hook: hook})}
	ins[0].setLimit(t, "NONE", 1000, 1)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() { defer wg.Done(); ins[i%2].orderAs(t, "greedy", fmt.Sprint("n-", i), "NONE", 1) }()
	}
	wg.Wait()
	if a := ins[0].audit(t, "NONE"); a.BuyersOverLimit == 0 || a.Consistent {
		t.Fatalf("none with 20 concurrent orders of one buyer, limit 1: audit = %+v; want the buyer caught over the limit", a)
	}
}

// A token whose sub is another buyer's id with white space around it, or
// with a control character in it, is refused (401) on every buyer route:
// ids are compared byte for byte, and one that differs from another only
// in what no screen shows is not accepted as a buyer at all. The store
// side is TestBuyerMatchesExactly (internal/repo).
func TestPaddedBuyerIDsAreRefused(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	in := newInstance(t, d, instanceOpts{noAuthThrottle: true})
	in.setStock(t, "PAD", 10)
	placed := in.orderAs(t, "alice", "k1", "PAD", 1)
	if placed.status != http.StatusCreated {
		t.Fatalf("alice's order = %d %s", placed.status, placed.body)
	}
	var o struct{ ID int64 }
	if err := json.Unmarshal(placed.body, &o); err != nil || o.ID == 0 {
		t.Fatalf("alice's order %s: %v", placed.body, err)
	}
	for _, sub := range []string{"alice ", " alice", "alice\t", "alice\n", "ali\x00ce", "alice\u0085", "alice\u00a0"} {
		tok := "Bearer " + sign(t, jwt.SigningMethodHS256, jwtSecret, jwt.MapClaims{"sub": sub, "exp": time.Now().Add(time.Hour).Unix()})
		for _, req := range []struct{ method, path, body string }{
			{"POST", "/v1/orders", `{"sku":"PAD","quantity":1}`},
			{"GET", "/v1/orders", ""},
			{"GET", fmt.Sprintf("/v1/orders/%d", o.ID), ""},
		} {
			h := jsonHeader("Idempotency-Key", "k1", "Authorization", tok)
			if req.body == "" {
				h = map[string]string{"Authorization": tok}
			}
			r := do(t, req.method, in.url+req.path, h, req.body)
			if r.status != http.StatusUnauthorized || r.problemType() != "invalid-token" {
				t.Errorf("%s %s with sub %q = %d %s; want 401 invalid-token", req.method, req.path, sub, r.status, r.body)
			}
		}
	}
	if n := len(d.ordersOf(t, "PAD")); n != 1 {
		t.Fatalf("orders of PAD = %d; want alice's one", n)
	}
}
