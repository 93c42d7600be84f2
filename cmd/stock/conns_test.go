package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// capped serves h on a loopback listener capped at limit connections, the
// way serve does.
func capped(t *testing.T, limit int, h http.Handler) string {
	t.Helper()
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, IdleTimeout: time.Minute, ReadHeaderTimeout: 5 * time.Second}
	capLn := limitConns(srv, ln, limit)
	go func() { _ = srv.Serve(capLn) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// Past STOCK_MAX_CONNS no connection is taken on: the rest wait in the
// kernel's queue and are all served as slots free up.
func TestConnectionCapHolds(t *testing.T) {
	const limit, clients = 3, 10
	var now, peak atomic.Int64
	release := make(chan struct{})
	url := capped(t, limit, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := now.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		<-release
		now.Add(-1)
	}))
	var wg sync.WaitGroup
	codes := make(chan int, clients)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
			if err != nil {
				t.Error(err)
				return
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			_ = resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for now.Load() < limit && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // room for a fourth to be taken on, if the cap leaked
	if got := now.Load(); got != limit {
		t.Errorf("%d requests in the handler with %d clients and a cap of %d connections; want %d", got, clients, limit, limit)
	}
	close(release)
	wg.Wait()
	close(codes)
	n := 0
	for c := range codes {
		if c != http.StatusOK {
			t.Errorf("status %d; want 200", c)
		}
		n++
	}
	if n != clients || peak.Load() > limit {
		t.Errorf("%d of %d clients answered, at most %d at once; want all, at most %d", n, clients, peak.Load(), limit)
	}
}

// Idle keep-alive connections do not hold the slots: at the cap the server
// closes them, so a new client is served at once instead of waiting for the
// idle timeout (a minute here).
func TestConnectionCapShedsIdleKeepAlives(t *testing.T) {
	const limit = 2
	url := capped(t, limit, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	for range limit { // limit clients, each leaves its connection open and idle
		c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatalf("a new client with %d idle keep-alive connections at the cap: %v; want it served", limit, err)
	}
	_ = resp.Body.Close()
}
