package driver

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/seckill/stock/client"
)

// MeasureRate counts only the measured window's answers, by status, and
// gives every request its own index.
func TestMeasureRate(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]bool{}
	dup, noIP := 0, 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		k := r.Header.Get("Idempotency-Key")
		if seen[k] {
			dup++
		}
		seen[k] = true
		if r.Header.Get("X-Forwarded-For") != "10.0.0."+k {
			noIP++
		}
		mu.Unlock()
		if r.URL.Path != "/v1/orders" || r.Method != http.MethodPost {
			w.WriteHeader(http.StatusTeapot)
			return
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"type":"https://stock.example/problems/sold-out","status":409}`))
	}))
	defer srv.Close()
	res, err := MeasureRate(context.Background(), RateConfig{
		Name: "x", URLs: []string{srv.URL, srv.URL}, Method: http.MethodPost, Path: "/v1/orders", Want: http.StatusConflict,
		Send: func(ctx context.Context, c *client.Client, i int64) (int, error) {
			p, err := c.Place(ctx, strconv.FormatInt(i, 10), "s", 1)
			return PlacedStatus(p), err
		},
		ClientIP:    func(i int64) string { return "10.0.0." + strconv.FormatInt(i, 10) },
		Concurrency: 4, Duration: 200 * time.Millisecond, Warmup: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	total := len(seen)
	mu.Unlock()
	if res.Answered == 0 || res.Answered != res.Requests || len(res.Statuses) != 1 || res.Errors != 0 {
		t.Fatalf("result %+v; want every measured request answered 409", res)
	}
	if res.Requests >= int64(total) {
		t.Fatalf("%d requests counted of %d served; want the warm-up left out", res.Requests, total)
	}
	if dup != 0 || noIP != 0 {
		t.Fatalf("%d requests shared an index, %d without their own X-Forwarded-For", dup, noIP)
	}
	if res.PerSec <= 0 || res.Latency.P99 <= 0 || res.MySQLPerRequest != -1 {
		t.Fatalf("rate %v, p99 %v, MySQL %v; want > 0, > 0, -1 (not measured)", res.PerSec, res.Latency.P99, res.MySQLPerRequest)
	}
}
