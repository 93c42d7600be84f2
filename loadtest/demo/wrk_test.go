package main

import (
	"maps"
	"strings"
	"testing"
	"time"
)

// A real wrk --latency output, with the script's status line and socket
// errors added as wrk prints them.
const wrkSample = `Running 10s test @ http://127.0.0.1:18081
  1 threads and 67 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    40.03ms   10.15ms  83.41ms   69.65%
    Req/Sec     1.65k   320.89     2.62k    68.00%
  Latency Distribution
     50%   40.40ms
     75%   46.49ms
     90%   52.12ms
     99%    1.02s
  16508 requests in 10.07s, 5.51MB read
  Socket errors: connect 0, read 0, write 0, timeout 3
  Non-2xx or 3xx responses: 7
Requests/sec:   1640.02
Transfer/sec:    561.01KB
STATUSES 201=16501 409=7
`

func TestParseWrk(t *testing.T) {
	r, err := parseWrk([]byte(wrkSample))
	if err != nil {
		t.Fatal(err)
	}
	if r.perSec != 1640.02 || r.p50 != 40.4 || r.p99 != 1020 {
		t.Fatalf("rate %v, p50 %v ms, p99 %v ms; want 1640.02, 40.4, 1020", r.perSec, r.p50, r.p99)
	}
	if want := map[int]int64{201: 16501, 409: 7}; !maps.Equal(r.statuses, want) {
		t.Fatalf("statuses %v; want %v", r.statuses, want)
	}
	if !strings.Contains(r.errors, "timeout 3") || !strings.Contains(r.errors, "non-2xx: 7") {
		t.Fatalf("errors %q; want the socket errors and the non-2xx count", r.errors)
	}
	if _, err := parseWrk([]byte("unable to connect to 127.0.0.1:1 Connection refused")); err == nil {
		t.Fatal("parseWrk of a failed run: no error")
	}
}

// The sale's check fails on an oversell, an inconsistent audit, a 201 that
// MySQL does not hold, or more orders than 201s and those in flight.
func TestWrkGoals(t *testing.T) {
	good := func() wrkResult {
		return wrkResult{
			instances: 3, conns: 10, duration: time.Second,
			healthz: wrkRun{perSec: 400, p99: 20},
			// wrk's rate counts every answer; the goal counts 201s only
			orders:     wrkRun{perSec: 900, p99: 40, statuses: map[int]int64{201: 100, 429: 800}},
			warmOrders: 20, dbOrders: 125,
			audit: map[string]any{"consistent": true, "oversold": 0.0, "sold": 125.0},
		}
	}
	lines, ok := good().goals()
	if !ok || !strings.HasPrefix(lines[0], "PASS") || !strings.Contains(strings.Join(lines, "\n"), "0.250x, MET") {
		t.Fatalf("a good run: %v, %q", ok, lines)
	}
	for name, spoil := range map[string]func(r *wrkResult){
		"oversold":             func(r *wrkResult) { r.audit["oversold"] = 1.0 },
		"inconsistent":         func(r *wrkResult) { r.audit["consistent"] = false },
		"a 201 not in MySQL":   func(r *wrkResult) { r.dbOrders, r.audit["sold"] = 119, 119.0 },
		"orders beyond flight": func(r *wrkResult) { r.dbOrders, r.audit["sold"] = 141, 141.0 },
		"sold != orders":       func(r *wrkResult) { r.audit["sold"] = 124.0 },
		"no 201 at all":        func(r *wrkResult) { r.orders.statuses, r.warmOrders, r.dbOrders, r.audit["sold"] = nil, 0, 0, 0.0 },
	} {
		r := good()
		spoil(&r)
		if lines, ok := r.goals(); ok || !strings.HasPrefix(lines[0], "FAIL") {
			t.Errorf("%s: passed: %q", name, lines[0])
		}
	}
}

// Rounds are merged as one run of their total length: the mean of their
// rates, the largest of their percentiles, the sum of their statuses, their
// error lines joined; the goal's line gives each round's ratio beside the
// overall one, orders placed counted from wrk's rate and the 201s' share.
func TestWrkRounds(t *testing.T) {
	const sockErr = "Socket errors: connect 0, read 0, write 0, timeout 2"
	h := []wrkRun{{perSec: 300, p50: 2, p99: 9}, {perSec: 500, p50: 3, p99: 7}}
	o := []wrkRun{
		{perSec: 60, p50: 20, p99: 45, statuses: map[int]int64{201: 60}},
		{perSec: 150, p50: 25, p99: 40, statuses: map[int]int64{201: 140, 503: 10}, errors: sockErr},
	}
	m := mergeRuns(o)
	if m.perSec != 105 || m.p50 != 25 || m.p99 != 45 || m.statuses[201] != 200 || m.statuses[503] != 10 || m.errors != sockErr {
		t.Fatalf("mergeRuns = %+v", m)
	}
	if mh := mergeRuns(h); mh.perSec != 400 || mh.p99 != 9 || mh.statuses != nil {
		t.Fatalf("mergeRuns(healthz) = %+v", mh)
	}
	if e := mergeRuns([]wrkRun{{errors: "a"}, {}, {errors: "b"}}).errors; e != "a; b" {
		t.Fatalf("errors joined = %q; want %q", e, "a; b")
	}
	r := wrkResult{
		instances: 3, conns: 10, duration: 2 * time.Second,
		hRounds: h, oRounds: o, healthz: mergeRuns(h), orders: m,
		dbOrders: 200, audit: map[string]any{"consistent": true, "oversold": 0.0, "sold": 200.0},
	}
	// Placed: 60/s and 140/s (150/s answered, 140 of 150 of them 201s), a
	// mean of 100/s against 400/s; round by round 60/300 and 140/500.
	lines, ok := r.goals()
	if all := strings.Join(lines, "\n"); !ok || !strings.Contains(all, "100 orders placed/s vs 400/s = 0.250x (round by round: 0.200x, 0.280x), MET") ||
		!strings.Contains(all, "p99 < 50 ms at 10 connections: 45.0 ms") {
		t.Fatalf("goals: %v, %q", ok, lines)
	}
	r.hRounds[1].perSec = 0 // a round without a /healthz rate keeps its place
	if lines, _ := r.goals(); !strings.Contains(strings.Join(lines, "\n"), "(round by round: 0.200x, -)") {
		t.Fatalf("goals with a round's /healthz at 0: %q", lines)
	}
}

// With rounds, wrk stops once after the warm-up and once per round: the
// orders in flight at each stop may be in MySQL without a 201.
func TestWrkInFlightPerStop(t *testing.T) {
	r := wrkResult{
		instances: 3, conns: 10, duration: 3 * time.Second,
		oRounds: make([]wrkRun, 3), hRounds: make([]wrkRun, 3),
		healthz: wrkRun{perSec: 400}, orders: wrkRun{statuses: map[int]int64{201: 100}},
		audit: map[string]any{"consistent": true, "oversold": 0.0},
	}
	for db, want := range map[int64]bool{100: true, 140: true, 141: false} {
		r.dbOrders, r.audit["sold"] = db, float64(db)
		if _, ok := r.goals(); ok != want {
			t.Errorf("%d orders in MySQL for 100 201s, 3 rounds of 10 connections: passed %v; want %v", db, ok, want)
		}
	}
}
