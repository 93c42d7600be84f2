package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill/stock/client"
)

// fakeShop is a tiny in-memory stand-in for the stock service: enough of the
// API for Run, a per-X-Forwarded-For allowance, and a 429 busy on the first
// try of every tenth key (bots, 10.9.x.x, excepted).
type fakeShop struct {
	allowance int // requests per bot address (10.9.x.x) before 429 rate-limited; 0: none
	mu        sync.Mutex
	available int64
	stocked   int64
	sold      int64
	orders    map[string]int64 // key -> order id
	perIP     map[string]int
	busyOnce  map[string]bool
	noXFF     int // order requests without X-Forwarded-For
}

func (f *fakeShop) problem(w http.ResponseWriter, status int, kind string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, `{"type":"https://stock.example/problems/%s","title":"x","status":%d}`+"\n", kind, status)
}

func (f *fakeShop) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	path := r.URL.Path
	stock := func() {
		_ = json.NewEncoder(w).Encode(client.Stock{SKU: "s", Available: f.available, Sold: f.sold})
	}
	switch {
	case path == "/readyz" || path == "/metrics":
	case r.Method == http.MethodPut && strings.HasPrefix(path, "/v1/admin/stock/"):
		var b struct{ Available int64 }
		_ = json.NewDecoder(r.Body).Decode(&b)
		f.stocked += b.Available - f.available
		f.available = b.Available
		stock()
	case strings.HasSuffix(path, "/audit"):
		var q int64
		for range f.orders {
			q++
		}
		_ = json.NewEncoder(w).Encode(Audit{Available: f.available, Sold: f.sold, Stocked: f.stocked,
			Orders: int64(len(f.orders)), OrderedQuantity: q, DistinctKeys: int64(len(f.orders)), Consistent: true})
	case r.Method == http.MethodGet && strings.HasPrefix(path, "/v1/stock/"):
		stock()
	case r.Method == http.MethodPost && path == "/v1/orders":
		ip := r.Header.Get("X-Forwarded-For")
		if ip == "" {
			f.noXFF++
		}
		f.perIP[ip]++
		if f.allowance > 0 && strings.HasPrefix(ip, "10.9.") && f.perIP[ip] > f.allowance {
			f.problem(w, http.StatusTooManyRequests, "rate-limited")
			return
		}
		key := r.Header.Get("Idempotency-Key")
		if strings.HasSuffix(key, "0") && !strings.HasPrefix(ip, "10.9.") && !f.busyOnce[key] {
			f.busyOnce[key] = true
			f.problem(w, http.StatusTooManyRequests, "busy")
			return
		}
		id, ok := f.orders[key]
		status := http.StatusOK
		if !ok {
			if f.available < 1 {
				f.problem(w, http.StatusConflict, "sold-out")
				return
			}
			f.available--
			f.sold++
			id = int64(len(f.orders) + 1)
			f.orders[key] = id
			status = http.StatusCreated
		}
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(client.Order{ID: id, Key: key, SKU: "s", Quantity: 1})
	default:
		http.NotFound(w, r)
	}
}

func newFakeShop(allowance int) *fakeShop {
	return &fakeShop{allowance: allowance, orders: map[string]int64{}, perIP: map[string]int{}, busyOnce: map[string]bool{}}
}

// TestCrowdsAndClientIP runs ordinary buyers and two bots through the fake:
// each bot's address gets its allowance and then 429 rate-limited, told apart
// from the 429 busy answers, and the sell-out check leaves the refused bots
// out of the demand.
func TestCrowdsAndClientIP(t *testing.T) {
	shop := newFakeShop(3)
	srv := httptest.NewServer(shop)
	defer srv.Close()
	const people = 10
	cfg := Config{
		URLs: []string{srv.URL}, SKU: "s", Stock: 1000, Quantity: 1, AdminToken: "x", Duration: 30 * time.Second,
		Crowds: []Crowd{
			{Name: "buyers", Buyers: 2 * people, Concurrency: 4, Retries: 3, Rate: 400},
			{Name: "bot0", Buyers: 20, Concurrency: 3},
			{Name: "bot1", Buyers: 20, Concurrency: 3},
		},
		ClientIP: func(i int) string {
			switch {
			case i < 2*people:
				return fmt.Sprintf("10.0.0.%d", i%people)
			case i < 2*people+20:
				return "10.9.0.0"
			}
			return "10.9.0.1"
		},
	}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("statuses %v; outcomes %v; failed checks %v", res.Statuses, res.Outcomes, res.Failed())
	if shop.noXFF != 0 {
		t.Errorf("%d order requests without X-Forwarded-For; want every one to carry its buyer's address", shop.noXFF)
	}
	if !res.Passed || len(res.Crowds) != 3 {
		t.Fatalf("Passed %v, %d crowds; want true, 3: %+v", res.Passed, len(res.Crowds), res.Failed())
	}
	buyers, bot0, bot1 := res.Crowds[0], res.Crowds[1], res.Crowds[2]
	if buyers.FirstBuyer != 0 || bot0.FirstBuyer != 2*people || bot1.FirstBuyer != 2*people+20 {
		t.Errorf("first buyers %d, %d, %d; want 0, %d, %d", buyers.FirstBuyer, bot0.FirstBuyer, bot1.FirstBuyer, 2*people, 2*people+20)
	}
	if buyers.Created != 2*people || buyers.RateLimited != 0 || buyers.Busy != 2 {
		t.Errorf("buyers: %d created, %d rate-limited, %d busy; want %d, 0, 2 (keys ...0 and ...10 busy once)", buyers.Created, buyers.RateLimited, buyers.Busy, 2*people)
	}
	for _, c := range []CrowdResult{bot0, bot1} {
		if c.Created != 3 || c.Busy != 0 || c.RateLimited != 17 || c.RateLimitedBuyers != 17 || c.Requests != 20 {
			t.Errorf("%s: %d created, %d busy, %d rate-limited (%d buyers), %d requests; want 3, 0, 17, 17, 20",
				c.Name, c.Created, c.Busy, c.RateLimited, c.RateLimitedBuyers, c.Requests)
		}
	}
	if res.RateLimited != 34 || res.Busy != 2 || res.Statuses["429"] != 36 || res.Problems["rate-limited"] != 34 {
		t.Errorf("run: %d rate-limited + %d busy, statuses %v, problems %v; want 34 + 2 = 36 429s", res.RateLimited, res.Busy, res.Statuses, res.Problems)
	}
	if res.Buyers != 2*people+40 || res.RateLimitedBuyers != 34 || res.ExpectedOrders != int64(res.Buyers-34) {
		t.Errorf("expected orders %d (%d buyers, %d refused); want %d - 34", res.ExpectedOrders, res.Buyers, res.RateLimitedBuyers, 2*people+40)
	}
	// Paced: the buyers' 20th order at 400/s is not sent before 19/400 s
	// into the buying phase (the first may be sent late on a loaded machine,
	// so the span from the first is no bound).
	if buyers.LastAnswer < 19.0/400 {
		t.Errorf("buyers' last answer at %.3fs; want at least %.3fs into the buying phase at 400 orders/s", buyers.LastAnswer, 19.0/400)
	}
}

// TestNoClientIPNoHeader: by default the driver sends no X-Forwarded-For.
func TestNoClientIPNoHeader(t *testing.T) {
	shop := newFakeShop(0)
	srv := httptest.NewServer(shop)
	defer srv.Close()
	res, err := Run(context.Background(), Config{URLs: []string{srv.URL}, SKU: "s", Stock: 5, Buyers: 8, Concurrency: 2,
		Quantity: 1, Retries: 2, AdminToken: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if shop.noXFF != res.Requests || !res.Passed || res.Crowds != nil || res.Busy != 1 || res.RateLimited != 0 {
		t.Errorf("%d of %d requests without X-Forwarded-For, passed %v, crowds %v, busy %d, rate-limited %d; want all, true, nil, 1, 0: %+v",
			shop.noXFF, res.Requests, res.Passed, res.Crowds, res.Busy, res.RateLimited, res.Failed())
	}
}

func TestValidateCrowds(t *testing.T) {
	base := Config{URLs: []string{"http://127.0.0.1:1"}, Stock: 1, Quantity: 1, AdminToken: "x"}
	c := base
	c.Crowds = []Crowd{{Buyers: 3, Concurrency: 2, Retries: 1}, {Name: "b", Buyers: 4, Concurrency: 1, Rate: 10}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Buyers != 7 || c.Concurrency != 3 || c.Retries != 1 || c.Crowds[0].Name != "crowd0" {
		t.Errorf("after Validate: buyers %d, concurrency %d, retries %d, name %q; want 7, 3, 1, crowd0", c.Buyers, c.Concurrency, c.Retries, c.Crowds[0].Name)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate twice = %v; want nil", err)
	}
	for name, bad := range map[string][]Crowd{
		"no buyers":   {{Concurrency: 1}},
		"no workers":  {{Buyers: 1}},
		"same name":   {{Name: "a", Buyers: 1, Concurrency: 1}, {Name: "a", Buyers: 1, Concurrency: 1}},
		"rate":        {{Buyers: 1, Concurrency: 1, Rate: -1}},
		"retries":     {{Buyers: 1, Concurrency: 1, Retries: MaxRetries + 1}},
		"concurrency": {{Buyers: 1, Concurrency: MaxConcurrency}, {Buyers: 1, Concurrency: 1}},
	} {
		c := base
		c.Crowds = bad
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(crowds %s) = nil; want an error", name)
		}
	}
	c = base
	c.Buyers = 5
	c.Crowds = []Crowd{{Buyers: 1, Concurrency: 1}}
	if err := c.Validate(); err == nil {
		t.Error("Validate(buyers 5 and crowds) = nil; want an error")
	}
}

// TestAnswerOf: the driver counts a client call's outcome as the status,
// problem kind and Retry-After of its answer.
func TestAnswerOf(t *testing.T) {
	cases := []struct {
		name     string
		ok       int
		err      error
		want     answer
		answered bool
	}{
		{"created", 201, nil, answer{status: 201}, true},
		{"replayed", 200, nil, answer{status: 200}, true},
		{"rate-limited", 201, fmt.Errorf("wrapped: %w", &client.Problem{Type: "https://stock.example/problems/rate-limited", Status: 429, RetryAfter: time.Second}),
			answer{status: 429, problem: "rate-limited", retryAfter: time.Second}, true},
		{"busy", 201, &client.Problem{Type: "https://stock.example/problems/busy", Status: 429}, answer{status: 429, problem: "busy"}, true},
		{"not a problem document", 201, &client.Problem{Type: "about:blank", Status: 502}, answer{status: 502}, true},
		{"no answer", 201, errors.New("connection refused"), answer{}, false},
	}
	for _, c := range cases {
		got, answered := answerOf(c.ok, c.err)
		if got != c.want || answered != c.answered {
			t.Errorf("%s: answerOf(%d, %v) = %+v, %v; want %+v, %v", c.name, c.ok, c.err, got, answered, c.want, c.answered)
		}
	}
}
