package driver

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestExpected(t *testing.T) {
	for _, tc := range []struct {
		stock          int64
		buyers, q      int
		orders, units  int64
		sellableOrders int64
	}{
		{1000, 5000, 1, 1000, 1000, 1000},
		{1000, 300, 1, 300, 300, 1000},
		{10, 100, 3, 3, 9, 3}, // floor(10/3) whole orders: one unit stays
		{10, 2, 3, 2, 6, 3},
		{0, 10, 1, 0, 0, 0},
	} {
		c := Config{Stock: tc.stock, Buyers: tc.buyers, Quantity: tc.q}
		o, u := c.Expected()
		if o != tc.orders || u != tc.units || c.Sellable() != tc.sellableOrders {
			t.Errorf("Expected(stock %d, buyers %d, q %d) = %d orders, %d units, sellable %d; want %d, %d, %d",
				tc.stock, tc.buyers, tc.q, o, u, c.Sellable(), tc.orders, tc.units, tc.sellableOrders)
		}
	}
}

func TestValidateLoopbackOnly(t *testing.T) {
	base := Config{Stock: 1, Buyers: 1, Concurrency: 1, Quantity: 1, AdminToken: "x"}
	for _, u := range []string{"http://127.0.0.1:8080", "http://localhost:1/", "http://[::1]:8080", "http://127.0.0.2:80"} {
		c := base
		c.URLs = []string{u}
		if err := c.Validate(); err != nil {
			t.Errorf("Validate(%q) = %v; want nil", u, err)
		}
	}
	for _, u := range []string{"http://10.0.0.1:8080", "http://example.com", "ftp://127.0.0.1", "http://127.0.0.1:8080/v1", "127.0.0.1:8080"} {
		c := base
		c.URLs = []string{u}
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%q) = nil; want an error", u)
		}
	}
	c := base
	c.URLs = []string{"http://127.0.0.1:1"}
	c.Buyers = MaxBuyers + 1
	if err := c.Validate(); err == nil {
		t.Errorf("Validate(buyers %d) = nil; want an error", c.Buyers)
	}
}

func TestBackoff(t *testing.T) {
	for i := 0; i < 100; i++ {
		if d := backoff(time.Second, 0); d < 500*time.Millisecond || d > 1500*time.Millisecond {
			t.Fatalf("backoff(Retry-After 1) = %v; want 0.5s..1.5s", d)
		}
		if d := backoff(0, 2); d < 100*time.Millisecond || d > 300*time.Millisecond {
			t.Fatalf("backoff(none, try 2) = %v; want 0.1s..0.3s", d)
		}
		if d := backoff(time.Hour, 0); d > 7500*time.Millisecond {
			t.Fatalf("backoff(Retry-After 3600) = %v; want at most 7.5s", d)
		}
	}
}

const exposition = `# HELP stock_orders_total Order requests by result.
# TYPE stock_orders_total counter
stock_orders_total{result="created"} 100
stock_orders_total{result="sold_out"} 300
stock_backstop_conflicts_total{strategy="lock+version"} 2
stock_lock_wait_seconds_bucket{result="acquired",le="0.001"} 50
stock_lock_wait_seconds_bucket{result="acquired",le="0.01"} 90
stock_lock_wait_seconds_bucket{result="acquired",le="0.1"} 100
stock_lock_wait_seconds_bucket{result="acquired",le="+Inf"} 100
stock_lock_wait_seconds_sum{result="acquired"} 0.5
stock_lock_wait_seconds_count{result="acquired"} 100
stock_http_requests_total{method="GET",route="/v1/stock/:sku",status="200"} 7
weird{a="x \"quoted\", y",b="z"} 1.5e3
process_resident_memory_bytes 3.145728e+07
`

func TestParseMetrics(t *testing.T) {
	s, err := parseMetrics(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	m := instanceMetrics("u", s)
	if m.Orders["created"] != 100 || m.Orders["sold_out"] != 300 || m.Conflicts != 2 || m.LockWaits != 100 || m.RSSBytes != 31457280 {
		t.Fatalf("instanceMetrics = %+v; want created 100, sold_out 300, conflicts 2, waits 100, rss 30 MiB", m)
	}
	if got := s.sum("weird", map[string]string{"a": `x "quoted", y`, "b": "z"}); got != 1500 {
		t.Fatalf(`sum(weird{a="x \"quoted\", y"}) = %v; want 1500`, got)
	}
	zero := instanceMetrics("u", nil)
	d := delta(m, zero)
	if p := d.LockWaitP99 * 1000; math.Abs(p-91) > 0.01 {
		t.Fatalf("lock wait p99 = %vms; want 91ms (interpolated in the 10-100ms bucket)", p)
	}
	if got := d.LockWaitMean(); got != 0.005 {
		t.Fatalf("lock wait mean = %v; want 0.005", got)
	}
	if _, err := parseMetrics(strings.NewReader("bad{a=\"x} 1\n")); err == nil {
		t.Fatal("parseMetrics(unterminated label) = nil error; want an error")
	}
}

func TestDecide(t *testing.T) {
	mk := func(expect bool, checks ...Check) *Result {
		return &Result{ExpectOversell: expect, Checks: checks}
	}
	ok := Check{Name: "acks", OK: true}
	over := Check{Name: "oversold == 0", OK: false, Oversell: true}
	lost := Check{Name: "acks", OK: false}

	r := mk(false, ok)
	decide(r)
	if !r.Passed {
		t.Errorf("safe run, all checks ok: Passed = false; want true")
	}
	r = mk(false, ok, over)
	decide(r)
	if r.Passed {
		t.Errorf("safe run with an oversell: Passed = true; want false")
	}
	r = mk(true, ok, over)
	r.Oversold = 5
	decide(r)
	if !r.Passed || !r.OversellDetected {
		t.Errorf("unsafe run, oversell seen: Passed %v, detected %v; want true, true", r.Passed, r.OversellDetected)
	}
	r = mk(true, ok)
	decide(r)
	if r.Passed {
		t.Errorf("unsafe run, no oversell seen: Passed = true; want false")
	}
	r = mk(true, lost, over)
	r.LostUpdates = 3
	decide(r)
	if r.Passed || r.Safe {
		t.Errorf("unsafe run, oversell seen but an acknowledged order lost: Passed %v, Safe %v; want false, false", r.Passed, r.Safe)
	}
	r = mk(false, ok, Check{Name: "sold == min(stock, demand)", OK: false, Liveness: true})
	decide(r)
	if r.Passed || !r.Safe || r.Verdict() != "SHORT" {
		t.Errorf("safe run whose buyers gave up: Passed %v, Safe %v, Verdict %s; want false, true, SHORT", r.Passed, r.Safe, r.Verdict())
	}
}

func TestQuantile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	if q := quantile(d, .5); q != 50*time.Millisecond {
		t.Errorf("p50 of 1..100ms = %v; want 50ms", q)
	}
	if q := quantile(d, .99); q != 99*time.Millisecond {
		t.Errorf("p99 of 1..100ms = %v; want 99ms", q)
	}
}

// Greedy identities are capped by the per-buyer limit in the expected demand.
func TestGreedyDemand(t *testing.T) {
	c := Config{Stock: 1000, Buyers: 100, Quantity: 1, Greedy: 10, GreedyBuyers: 3, PerBuyerLimit: 2}
	// Buyers 0, 10, ..., 90 are greedy: identities g0 (4 orders), g1 and g2
	// (3 each), each allowed 2; the other 90 buyers one order each.
	if o, _ := c.Expected(); o != 96 {
		t.Fatalf("Expected() orders = %d; want 90 + 3 x 2 = 96", o)
	}
	if id := c.BuyerID("r", 40); id != "r-g1" {
		t.Fatalf("BuyerID(40) = %q; want r-g1", id)
	}
	if id := c.BuyerID("r", 41); id != "r-b41" {
		t.Fatalf("BuyerID(41) = %q; want r-b41", id)
	}
	c.PerBuyerLimit = 0
	if o, _ := c.Expected(); o != 100 {
		t.Fatalf("Expected() without a limit = %d; want 100", o)
	}
}
