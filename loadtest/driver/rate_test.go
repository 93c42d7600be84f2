package driver

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// MeasureRate counts only the measured window's answers, by status, and
// gives every request its own index.
func TestMeasureRate(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]bool{}
	dup := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		k := r.Header.Get("X-I")
		if seen[k] {
			dup++
		}
		seen[k] = true
		mu.Unlock()
		if r.URL.Path != "/conflict" || r.Method != http.MethodPost {
			w.WriteHeader(http.StatusTeapot)
			return
		}
		w.WriteHeader(http.StatusConflict)
	}))
	defer srv.Close()
	res, err := MeasureRate(context.Background(), RateConfig{
		Name: "x", URLs: []string{srv.URL, srv.URL}, Method: http.MethodPost, Path: "/conflict", Want: http.StatusConflict,
		Body:        func(int64) []byte { return []byte("{}") },
		Header:      func(i int64, h http.Header) { h.Set("X-I", strconv.FormatInt(i, 10)) },
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
	if dup != 0 {
		t.Fatalf("%d requests shared an index", dup)
	}
	if res.PerSec <= 0 || res.Latency.P99 <= 0 || res.MySQLPerRequest != -1 {
		t.Fatalf("rate %v, p99 %v, MySQL %v; want > 0, > 0, -1 (not measured)", res.PerSec, res.Latency.P99, res.MySQLPerRequest)
	}
}
