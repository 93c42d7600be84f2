package handler

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/stock/internal/metrics"
	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/testlog"
)

// edge is a handler over a fake service (no database), with its metrics
// registry and its log in a buffer. Its requests carry the test's context.
type edge struct {
	ctx context.Context
	h   http.Handler
	reg *prometheus.Registry
	log *testlog.Buffer
}

func newEdge(t *testing.T, cfg Config, svc Service) *edge {
	t.Helper()
	if svc == nil {
		svc = acceptAll{svc: service.New(service.Config{}, nil, nil, nil, nil)}
	}
	reg := prometheus.NewRegistry()
	buf := &testlog.Buffer{}
	log := slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if cfg.AdminToken == "" {
		cfg.AdminToken = "admin-secret"
	}
	if cfg.Tokens == nil {
		cfg.Tokens = fakeTokens{}
	}
	h, err := New(cfg, svc, log, metrics.New(reg), reg)
	if err != nil {
		t.Fatal(err)
	}
	return &edge{ctx: t.Context(), h: h, reg: reg, log: buf}
}

func (e *edge) do(method, path, body string, hdr ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequestWithContext(e.ctx, method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	if req.Header.Get("Authorization") == "" && strings.HasPrefix(path, "/v1/orders") {
		req.Header.Set("Authorization", "Bearer tok:u1")
	}
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	return rec
}

// series counts the label sets of a metric family.
func (e *edge) series(t *testing.T, name string) int {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}

func (e *edge) count(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, _ := e.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// Clients cannot mint metric series: 1,000 random methods and paths leave
// stock_http_requests_total with a bounded number of series.
func TestMetricLabelsAreClosed(t *testing.T) {
	e := newEdge(t, Config{}, nil)
	letters := "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	rnd := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = letters[rand.IntN(len(letters))] //nolint:gosec // G404: test input, not a secret
		}
		return string(b)
	}
	for i := range 1000 {
		method := rnd(1 + rand.IntN(200)) //nolint:gosec // G404: test input, not a secret
		if i%10 == 0 {
			method = "post" // lower case is not POST
		}
		e.do(method, "/"+rnd(1+rand.IntN(50))+"/"+rnd(3), "") //nolint:gosec // G404: test input, not a secret
	}
	// Routes (about 10) x known methods + OTHER (8) x statuses seen.
	if n := e.series(t, "stock_http_requests_total"); n > 8 {
		t.Fatalf("stock_http_requests_total has %d series after 1,000 random methods and paths; want a handful", n)
	}
	if n := e.count(t, "stock_http_requests_total", map[string]string{"method": "OTHER", "route": "unmatched"}); n != 1000 {
		t.Fatalf("requests counted as OTHER on unmatched = %v; want 1000", n)
	}
}

// panicky panics in Place.
type panicky struct{ acceptAll }

func (panicky) Place(context.Context, service.PlaceRequest) (service.Order, bool, error) {
	panic("boom")
}

// A panicking handler's 500 is counted like every other answer.
func TestPanicsAreCounted(t *testing.T) {
	e := newEdge(t, Config{}, panicky{})
	rec := e.do("POST", "/v1/orders", `{"sku":"A","quantity":1}`, "Idempotency-Key", "k")
	if rec.Code != 500 {
		t.Fatalf("panicking Place answered %d; want 500", rec.Code)
	}
	if n := e.count(t, "stock_http_requests_total", map[string]string{"route": "/v1/orders", "method": "POST", "status": "500"}); n != 1 {
		t.Fatalf("stock_http_requests_total{route=/v1/orders,status=500} = %v; want 1", n)
	}
}

// No problem detail carries internal errors, Go type names or package prefixes.
func TestProblemDetailsAreForClients(t *testing.T) {
	e := newEdge(t, Config{}, nil)
	for _, body := range []string{`{"sku":"A","quantity":"x"}`, `{"sku":1,"quantity":1}`, `{"sku":"A","quantity":1.5}`,
		`{"sku":"A","quantity":1,"extra":1}`, `{`, ``, `[]`, `{"sku":"A","quantity":1}x`, `{"sku":"A","sku":"B","quantity":1}`,
		`{"sku":"A","quantity":2147483648}`, `{"sku":"A","quantity":-5}`, strings.Repeat(" ", 5000)} {
		rec := e.do("POST", "/v1/orders", body, "Idempotency-Key", "k")
		var p Problem
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || rec.Code/100 != 4 {
			t.Fatalf("POST %q = %d %s; want a 4xx problem", body, rec.Code, rec.Body)
		}
		for _, bad := range []string{"handler:", "service:", "int64", "int32", "json:", "*", "127.0.0.1", "tcp"} {
			if strings.Contains(p.Detail, bad) {
				t.Errorf("POST %q: detail %q contains %q", body, p.Detail, bad)
			}
		}
	}
	rec := e.do("POST", "/v1/orders", `{"sku":"A","quantity":2147483648}`, "Idempotency-Key", "k")
	if !strings.Contains(rec.Body.String(), "from 1 to 100") {
		t.Fatalf("quantity 2147483648 answered %s; want the real rule (1 to STOCK_MAX_QUANTITY)", rec.Body)
	}
	rec = e.do("POST", "/v1/orders", `{"sku":"A","quantity":"x"}`, "Idempotency-Key", "k")
	if !strings.Contains(rec.Body.String(), `must be an integer`) {
		t.Fatalf("quantity \"x\" answered %s; want 'must be an integer'", rec.Body)
	}
}

// A request body that does not arrive within the server's read timeout is
// 408, with no socket address in the answer.
func TestSlowBodyIs408(t *testing.T) {
	e := newEdge(t, Config{}, nil)
	srv := httptest.NewUnstartedServer(e.h)
	srv.Config.ReadTimeout = 300 * time.Millisecond
	srv.Start()
	defer srv.Close()
	var d net.Dialer
	conn, err := d.DialContext(t.Context(), "tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if _, err := fmt.Fprintf(conn, "POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nIdempotency-Key: k\r\nAuthorization: Bearer tok:u1\r\nContent-Length: 40\r\n\r\n{\"sku\":"); err != nil {
		t.Fatalf("writing the stalled request: %v", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "request-timeout") {
		t.Fatalf("stalled body answered %d %s; want 408 request-timeout", resp.StatusCode, body)
	}
	if strings.Contains(string(body), "127.0.0.1") || strings.Contains(string(body), "tcp") {
		t.Fatalf("408 body %s carries socket details", body)
	}
}

func TestTwoIdempotencyKeysAre400(t *testing.T) {
	e := newEdge(t, Config{}, nil)
	rec := e.do("POST", "/v1/orders", `{"sku":"A","quantity":1}`, "Idempotency-Key", "a", "Idempotency-Key", "b")
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), "once") {
		t.Fatalf("two Idempotency-Key headers = %d %s; want 400", rec.Code, rec.Body)
	}
}

func TestHeadAnswersLikeGet(t *testing.T) {
	e := newEdge(t, Config{ServeMetrics: true}, nil)
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/v1/stock/SKU-1", "/v1/orders/1"} {
		get, head := e.do("GET", path, ""), e.do("HEAD", path, "")
		if head.Code != get.Code || head.Header().Get("Content-Type") != get.Header().Get("Content-Type") {
			t.Errorf("HEAD %s = %d %q; GET = %d %q", path, head.Code, head.Header().Get("Content-Type"), get.Code, get.Header().Get("Content-Type"))
		}
	}
	srv := httptest.NewServer(e.h)
	defer srv.Close()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodHead, srv.URL+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(body) != 0 {
		t.Fatalf("HEAD /healthz over HTTP = %d with %d body bytes; want 200 and none", resp.StatusCode, len(body))
	}
}

func TestJSONBodiesEndInANewline(t *testing.T) {
	e := newEdge(t, Config{}, nil)
	for _, rec := range []*httptest.ResponseRecorder{e.do("GET", "/healthz", ""), e.do("GET", "/v1/stock/A", ""),
		e.do("POST", "/v1/orders", `{"sku":"A","quantity":1}`, "Idempotency-Key", "k"), e.do("GET", "/nope", "")} {
		if b := rec.Body.String(); !strings.HasSuffix(b, "}\n") {
			t.Errorf("body %q does not end in a newline", b)
		}
	}
}

// The access log has one line per 4xx answer (and 5xx), with the request
// id, which is echoed in the response; admin changes and failed admin
// logins are logged too.
func TestAccessAndAdminLog(t *testing.T) {
	e := newEdge(t, Config{}, nil)
	rec := e.do("POST", "/v1/orders", `{}`, "Idempotency-Key", "k", "X-Request-Id", "req-123")
	if rec.Header().Get("X-Request-Id") != "req-123" {
		t.Fatalf("X-Request-Id echoed = %q; want req-123", rec.Header().Get("X-Request-Id"))
	}
	if got := e.do("GET", "/healthz", "").Header().Get("X-Request-Id"); got == "" {
		t.Fatal("no X-Request-Id minted for a request without one")
	}
	if got := e.do("GET", "/healthz", "", "X-Request-Id", "bad id with spaces").Header().Get("X-Request-Id"); got == "bad id with spaces" {
		t.Fatal("an X-Request-Id with spaces was echoed; want a new one")
	}
	e.do("PUT", "/v1/admin/stock/A", `{"available":5}`, "Authorization", "Bearer wrong")
	if rec := e.do("PUT", "/v1/admin/stock/A", `{"available":5}`, "Authorization", "bearer admin-secret"); rec.Code != 200 {
		t.Fatalf("admin with a lower-case scheme = %d; want 200 (RFC 9110: case-insensitive)", rec.Code)
	}
	var access, failed, changed bool
	for _, l := range e.log.Records(t) {
		switch l["msg"] {
		case "request":
			if l["request_id"] == "req-123" && l["status"] == float64(400) && l["route"] == "/v1/orders" && l["method"] == "POST" {
				access = true
			}
			if l["status"] == float64(200) {
				t.Errorf("a 2xx access line at info level: %v (want debug only)", l)
			}
		case "admin: authentication failed":
			failed = l["client_ip"] != nil && l["request_id"] != nil
		case "admin: stock set":
			changed = l["sku"] == "A" && l["request_id"] != nil
		}
	}
	if !access || !failed || !changed {
		t.Fatalf("log has access line %v, failed admin login %v, stock change %v; want all", access, failed, changed)
	}
	// A flood of 4xx costs at most the budget of lines per second.
	e2 := newEdge(t, Config{LogBudget: 10}, nil)
	for range 500 {
		e2.do("GET", "/nope", "")
	}
	if n := len(e2.log.Records(t)); n > 20 {
		t.Fatalf("500 404s wrote %d log lines with a budget of 10/s; want at most ~10 a second", n)
	}
}

// blocking waits in Place until released.
type blocking struct {
	acceptAll
	in      chan struct{}
	release chan struct{}
}

func (b blocking) Place(ctx context.Context, r service.PlaceRequest) (service.Order, bool, error) {
	b.in <- struct{}{}
	<-b.release
	return service.Order{ID: 1}, false, nil
}

// Past MaxInflight requests, a request is answered 503 at once; probes are
// still answered.
func TestInflightCap(t *testing.T) {
	b := blocking{in: make(chan struct{}, 2), release: make(chan struct{})}
	e := newEdge(t, Config{MaxInflight: 2}, b)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.do("POST", "/v1/orders", `{"sku":"A","quantity":1}`, "Idempotency-Key", "k")
		}()
	}
	<-b.in
	<-b.in
	rec := e.do("POST", "/v1/orders", `{"sku":"A","quantity":1}`, "Idempotency-Key", "k")
	if rec.Code != 503 || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), "overloaded") {
		t.Fatalf("third request with 2 in flight and MaxInflight 2 = %d %s; want 503 overloaded with Retry-After", rec.Code, rec.Body)
	}
	if rec := e.do("GET", "/healthz", ""); rec.Code != 200 {
		t.Fatalf("/healthz while full = %d; want 200", rec.Code)
	}
	close(b.release)
	wg.Wait()
	if rec := e.do("POST", "/v1/orders", `{"sku":"A","quantity":1}`, "Idempotency-Key", "k"); rec.Code != 503 && rec.Code/100 != 2 {
		t.Fatalf("after the two finished = %d", rec.Code)
	}
}

// fixedLimiter allows the first n requests of each key.
type fixedLimiter struct {
	mu   sync.Mutex
	n    int
	seen map[string]int
}

func (l *fixedLimiter) Allow(_ context.Context, key string) (Decision, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen[key]++
	left := l.n - l.seen[key]
	return Decision{Allowed: left >= 0, Policy: `"ip";q=2;w=1`, Name: "ip", Remaining: max(left, 0),
		RetryAfter: 1500 * time.Millisecond, Reset: time.Second}, nil
}

// The rate limit answers 429 rate-limited with Retry-After and the RateLimit
// headers; the client IP is RemoteAddr unless the hop is a trusted proxy.
func TestRateLimitAndClientIP(t *testing.T) {
	l := &fixedLimiter{n: 2, seen: map[string]int{}}
	e := newEdge(t, Config{Limiter: l, TrustedProxies: []string{"10.0.0.0/8"}}, nil)
	send := func(remote, xff string) *httptest.ResponseRecorder {
		req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/v1/stock/A", nil)
		req.RemoteAddr = remote + ":1234"
		if xff != "" {
			req.Header.Set("X-Forwarded-For", xff)
		}
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, req)
		return rec
	}
	for i := range 2 {
		if rec := send("192.0.2.1", ""); rec.Code != 200 || rec.Header().Get("RateLimit") == "" || rec.Header().Get("RateLimit-Policy") == "" {
			t.Fatalf("request %d within the limit = %d, RateLimit %q; want 200 with the headers", i, rec.Code, rec.Header().Get("RateLimit"))
		}
	}
	rec := send("192.0.2.1", "")
	if rec.Code != 429 || rec.Header().Get("Retry-After") != "2" || !strings.Contains(rec.Body.String(), "rate-limited") {
		t.Fatalf("request over the limit = %d Retry-After %q %s; want 429 rate-limited, Retry-After 2", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	// An untrusted client cannot pick its IP with X-Forwarded-For.
	send("192.0.2.7", "198.51.100.1")
	if l.seen["ip:192.0.2.7"] != 1 || l.seen["ip:198.51.100.1"] != 0 {
		t.Fatalf("keys seen %v; want the RemoteAddr of an untrusted hop", l.seen)
	}
	// Through a trusted proxy, the first untrusted address from the right.
	send("10.1.2.3", "203.0.113.9, 198.51.100.2")
	if l.seen["ip:198.51.100.2"] != 1 {
		t.Fatalf("keys seen %v; want the client behind the trusted proxy", l.seen)
	}
	// Admin routes and probes are not limited.
	for range 5 {
		if rec := send("192.0.2.1", ""); rec.Code != 429 {
			t.Fatalf("limited client = %d", rec.Code)
		}
	}
	if rec := e.do("GET", "/healthz", ""); rec.Code != 200 {
		t.Fatalf("/healthz = %d; want it never limited", rec.Code)
	}
}

// The per-buyer limit keys on the token's buyer, after authentication, on
// the order routes only.
func TestRateLimitPerBuyer(t *testing.T) {
	l := &fixedLimiter{n: 2, seen: map[string]int{}}
	e := newEdge(t, Config{BuyerLimiter: l}, nil)
	order := func(buyer string) int {
		return e.do("POST", "/v1/orders", `{"sku":"A","quantity":1}`, "Idempotency-Key", "k", "Authorization", "Bearer tok:"+buyer).Code
	}
	for i := range 2 {
		if c := order("u1"); c != 201 {
			t.Fatalf("u1 order %d within the limit = %d", i, c)
		}
	}
	if rec := e.do("POST", "/v1/orders", `{"sku":"A","quantity":1}`, "Idempotency-Key", "k", "Authorization", "Bearer tok:u1"); rec.Code != 429 ||
		!strings.Contains(rec.Body.String(), "rate-limited") || !strings.Contains(rec.Header().Get("RateLimit"), `"ip"`) {
		t.Fatalf("u1 over its limit = %d %s %q; want 429 rate-limited", rec.Code, rec.Body, rec.Header().Get("RateLimit"))
	}
	if c := order("u2"); c != 201 {
		t.Fatalf("another buyer = %d; want its own budget", c)
	}
	if c := e.do("POST", "/v1/orders", `{"sku":"A","quantity":1}`, "Idempotency-Key", "k", "Authorization", "Bearer nope").Code; c != 401 {
		t.Fatalf("bad token = %d; want 401 before any limit", c)
	}
	if l.seen["buyer:u1"] != 3 || l.seen["buyer:u2"] != 1 || len(l.seen) != 2 {
		t.Fatalf("limiter keys %v; want buyer:u1 x3, buyer:u2 x1", l.seen)
	}
}

// /metrics and /debug are not on the public listener unless ServeMetrics
// (STOCK_METRICS_PUBLIC) says so: STOCK_METRICS_ADDR and STOCK_PPROF_ADDR
// serve them on listeners of their own.
func TestMetricsAndDebugOffThePublicListener(t *testing.T) {
	e := newEdge(t, Config{}, nil)
	for _, path := range []string{"/metrics", "/debug/pprof/", "/debug/pprof/heap"} {
		if rec := e.do("GET", path, ""); rec.Code != 404 || strings.Contains(rec.Body.String(), "stock_http_requests_total") {
			t.Errorf("GET %s on the public listener = %d %q; want 404", path, rec.Code, rec.Body.String()[:min(80, rec.Body.Len())])
		}
	}
	if rec := newEdge(t, Config{ServeMetrics: true}, nil).do("GET", "/metrics", ""); rec.Code != 200 {
		t.Errorf("GET /metrics with ServeMetrics = %d; want 200", rec.Code)
	}
}
