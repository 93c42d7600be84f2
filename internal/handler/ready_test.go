package handler

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Concurrent /readyz callers share one round of the checks, and a later
// caller within ReadyMaxAge gets that round's answer without a new ping.
func TestReadyzSharesOneRound(t *testing.T) {
	var calls atomic.Int64
	release := make(chan struct{})
	mysql := Check{Name: "mysql", Required: true, Fn: func(ctx context.Context) error {
		calls.Add(1)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	e := newEdge(t, Config{Checks: []Check{mysql}, ReadyMaxAge: time.Hour}, nil)
	const n = 30
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { codes[i] = e.do("GET", "/readyz", "").Code })
	}
	for deadline := time.Now().Add(5 * time.Second); calls.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	for i := range 3 {
		if rec := e.do("GET", "/readyz", ""); rec.Code != http.StatusOK {
			t.Errorf("GET /readyz after the round, call %d: %d %s; want 200", i, rec.Code, rec.Body)
		}
	}
	for i, c := range codes {
		if c != http.StatusOK {
			t.Errorf("concurrent GET /readyz %d: %d; want 200", i, c)
		}
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("%d concurrent and 3 later GET /readyz (max age 1h) pinged MySQL %d times; want 1", n, got)
	}
}

// Past ReadyMaxAge a caller gets a fresh round: a check that went down is
// seen (503), and one that came back (200).
func TestReadyzFollowsTheChecks(t *testing.T) {
	var down atomic.Bool
	mysql := Check{Name: "mysql", Required: true, Fn: func(context.Context) error {
		if down.Load() {
			return errors.New("mysql: down")
		}
		return nil
	}}
	e := newEdge(t, Config{Checks: []Check{mysql}, ReadyMaxAge: 10 * time.Millisecond}, nil)
	for _, c := range []struct {
		down bool
		want int
	}{{false, 200}, {true, 503}, {false, 200}} {
		down.Store(c.down)
		got := 0
		for deadline := time.Now().Add(5 * time.Second); got != c.want && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			got = e.do("GET", "/readyz", "").Code
		}
		if got != c.want {
			t.Errorf("GET /readyz with MySQL down=%v: %d; want %d within 5s (max age 10ms)", c.down, got, c.want)
		}
	}
}
