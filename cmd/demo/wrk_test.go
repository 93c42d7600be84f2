package main

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/stock/client"
)

// A real wrk --latency output, with the script's status and latency lines
// and socket errors added as wrk prints them.
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
LATENCY 30000:40 40400:50 52120:9 1020000:1
`

func TestParseWrk(t *testing.T) {
	r, err := parseWrk([]byte(wrkSample))
	if err != nil {
		t.Fatal(err)
	}
	if r.perSec != 1640.02 || r.pct(50) != 40.4 || r.pct(99) != 1020 {
		t.Fatalf("rate %v, p50 %v ms, p99 %v ms; want 1640.02, 40.4, 1020", r.perSec, r.pct(50), r.pct(99))
	}
	if want := map[int]int64{201: 16501, 409: 7}; !maps.Equal(r.statuses, want) {
		t.Fatalf("statuses %v; want %v", r.statuses, want)
	}
	if r.errors != "Socket errors: connect 0, read 0, write 0, timeout 3" {
		t.Fatalf("errors %q; want the socket errors only (the 409s are among the statuses)", r.errors)
	}
	statusless := strings.Replace(wrkSample, "STATUSES", "STATE", 1) // a /healthz run's output
	if r, err := parseWrk([]byte(statusless)); err != nil || !strings.Contains(r.errors, "non-2xx: 7") {
		t.Fatalf("a run without statuses: errors %q, %v; want wrk's non-2xx count among them", r.errors, err)
	}
	if r.worstP99 != r.pct(99) || len(r.latency) != 4 || r.latency[52120] != 9 {
		t.Fatalf("worst p99 %v, histogram %v; want the p99 and the LATENCY line's 4 values", r.worstP99, r.latency)
	}
	if _, err := parseWrk([]byte("unable to connect to 127.0.0.1:1 Connection refused")); err == nil {
		t.Fatal("parseWrk of a failed run: no error")
	}
	if _, err := parseWrk([]byte(strings.Replace(wrkSample, "LATENCY", "LATE", 1))); err == nil {
		t.Fatal("parseWrk without the script's LATENCY line: no error")
	}
	if _, err := parseWrk([]byte(strings.Replace(wrkSample, "1020000:1", "1100000:1", 1))); err == nil {
		t.Fatal("parseWrk of a LATENCY line whose p99 is not wrk's: no error")
	}
}

// The percentiles are ranked as wrk ranks its own: the smallest latency
// with at least round(p% of the requests + 0.5) at or below it.
func TestPercentile(t *testing.T) {
	h := map[int64]int64{1000: 98, 2000: 1, 9000: 1} // µs -> requests; p98: the 99th
	for p, want := range map[float64]float64{50: 1, 97: 1, 98: 2, 99: 9, 100: 9} {
		if got := percentile(h, p); got != want {
			t.Errorf("p%v = %v ms; want %v", p, got, want)
		}
	}
	if got := percentile(nil, 99); got != 0 {
		t.Errorf("p99 of no requests = %v; want 0", got)
	}
}

// timed gives r the latency histogram h as parseWrk does, its p99 the
// worst of one process.
func timed(r wrkRun, h map[int64]int64) wrkRun {
	r.latency = h
	r.worstP99 = r.pct(99)
	return r
}

// The sale's check fails on an oversell, an inconsistent audit, a 201 that
// MySQL does not hold, more orders than 201s and those in flight, or a
// sold-out flood answered anything but 409.
func TestWrkGoals(t *testing.T) {
	good := func() wrkResult {
		soldOut := timed(wrkRun{perSec: 150, statuses: map[int]int64{409: 150}}, map[int64]int64{10000: 1})
		return wrkResult{
			instances: 3, conns: 10, duration: time.Second,
			healthz: timed(wrkRun{perSec: 250}, map[int64]int64{20000: 1}),
			// wrk's rate counts every answer; the goal counts 201s only
			orders:     timed(wrkRun{perSec: 900, statuses: map[int]int64{201: 100, 429: 800}}, map[int64]int64{40000: 1}),
			soldOut:    soldOut,
			sRounds:    []wrkRun{soldOut},
			warmOrders: 20, dbOrders: 125,
			audit: client.Audit{Consistent: true, Sold: 125},
		}
	}
	lines, ok := good().goals()
	all := strings.Join(lines, "\n")
	if !ok || !strings.HasPrefix(lines[0], "PASS") || !strings.Contains(all, "100 orders placed/s vs 250/s = 0.400x, MET") ||
		!strings.Contains(all, "sold-out 409s >= 0.5x the /healthz rate (both by wrk): 150/s vs 250/s = 0.600x, MET") {
		t.Fatalf("a good run: %v, %q", ok, lines)
	}
	for name, spoil := range map[string]func(r *wrkResult){
		"oversold":             func(r *wrkResult) { r.audit.Oversold = 1 },
		"inconsistent":         func(r *wrkResult) { r.audit.Consistent = false },
		"a 201 not in MySQL":   func(r *wrkResult) { r.dbOrders, r.audit.Sold = 119, 119 },
		"orders beyond flight": func(r *wrkResult) { r.dbOrders, r.audit.Sold = 141, 141 },
		"sold != orders":       func(r *wrkResult) { r.audit.Sold = 124 },
		"no 201 at all":        func(r *wrkResult) { r.orders.statuses, r.warmOrders, r.dbOrders, r.audit.Sold = nil, 0, 0, 0 },
		"a sold-out 201":       func(r *wrkResult) { r.soldOut.statuses[201] = 1 },
		"no sold-out 409":      func(r *wrkResult) { r.soldOut.statuses = map[int]int64{503: 150} },
	} {
		r := good()
		spoil(&r)
		if lines, ok := r.goals(); ok || !strings.HasPrefix(lines[0], "FAIL") {
			t.Errorf("%s: passed: %q", name, lines[0])
		}
	}
}

// Rounds are merged as one run of their total length: the mean of their
// rates, the percentiles of all their requests (their latency histograms
// summed) beside the worst p99 of one, the sum of their statuses, their
// error lines joined; the goal's line gives each round's ratio beside the
// overall one, orders placed counted from wrk's rate and the 201s' share.
func TestWrkRounds(t *testing.T) {
	const sockErr = "Socket errors: connect 0, read 0, write 0, timeout 2"
	h := []wrkRun{
		timed(wrkRun{perSec: 300}, map[int64]int64{2000: 60, 9000: 1}),
		timed(wrkRun{perSec: 500}, map[int64]int64{3000: 100, 7000: 1}),
	}
	// Round 1's p99 is its one slow order (80 ms); the p99 of the 210
	// answers of both rounds (wrk's rank: the 208th) is at 40 ms.
	o := []wrkRun{
		timed(wrkRun{perSec: 60, statuses: map[int]int64{201: 60}}, map[int64]int64{20000: 59, 80000: 1}),
		timed(wrkRun{perSec: 150, statuses: map[int]int64{201: 140, 503: 10}, errors: sockErr}, map[int64]int64{25000: 100, 40000: 50}),
	}
	m := mergeRuns(o)
	if m.perSec != 105 || m.pct(50) != 25 || m.pct(99) != 40 || m.worstP99 != 80 || m.statuses[201] != 200 || m.statuses[503] != 10 || m.errors != sockErr {
		t.Fatalf("mergeRuns = %+v", m)
	}
	if mh := mergeRuns(h); mh.perSec != 400 || mh.pct(99) != 7 || mh.worstP99 != 9 || mh.statuses != nil {
		t.Fatalf("mergeRuns(healthz) = %+v", mh)
	}
	if e := mergeRuns([]wrkRun{{errors: "a"}, {}, {errors: "b"}}).errors; e != "a; b" {
		t.Fatalf("errors joined = %q; want %q", e, "a; b")
	}
	r := wrkResult{
		instances: 3, conns: 10, duration: 2 * time.Second,
		hRounds: h, oRounds: o, healthz: mergeRuns(h), orders: m,
		dbOrders: 200, audit: client.Audit{Consistent: true, Sold: 200},
	}
	// Placed: 60/s and 140/s (150/s answered, 140 of 150 of them 201s), a
	// mean of 100/s against 400/s; round by round 60/300 and 140/500.
	lines, ok := r.goals()
	if all := strings.Join(lines, "\n"); !ok || !strings.Contains(all, "100 orders placed/s vs 400/s = 0.250x (round by round: 0.200x, 0.280x), NOT MET") ||
		!strings.Contains(all, "p99 < 50 ms at 10 connections: 40.0 ms over all the rounds' orders") ||
		!strings.Contains(all, "the largest p99 of one process in one round: 80.0 ms; /healthz's p99: 7.0 ms), MET") {
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
		audit: client.Audit{Consistent: true},
	}
	for db, want := range map[int64]bool{100: true, 140: true, 141: false} {
		r.dbOrders, r.audit.Sold = db, db
		if _, ok := r.goals(); ok != want {
			t.Errorf("%d orders in MySQL for 100 201s, 3 rounds of 10 connections: passed %v; want %v", db, ok, want)
		}
	}
}

// The scripts run in the real wrk (skipped where it is not installed):
// every answer the orders' script counts by status is in its latency
// histogram (with wrk's samples for coordinated omission, maybe more),
// the /healthz script prints one too, and each gives wrk's own printed
// p50 and p99 (parseWrk fails otherwise).
func TestWrkScripts(t *testing.T) {
	if _, err := exec.LookPath("wrk"); err != nil {
		t.Skip("wrk is not installed (Debian: apt-get install -y wrk)")
	}
	var orders atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/orders" && r.Header.Get("Idempotency-Key") != "" {
			if orders.Add(1)%10 == 0 {
				w.WriteHeader(http.StatusConflict)
				return
			}
			w.WriteHeader(http.StatusCreated)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	dir := t.TempDir()
	script, hscript, tokens := filepath.Join(dir, "orders.lua"), filepath.Join(dir, "healthz.lua"), filepath.Join(dir, "tokens")
	for f, body := range map[string]string{script: wrkScript, hscript: healthzScript, tokens: "t1\nt2\n"} {
		if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := func(int) []string { return []string{"WRK_TOKENS=" + tokens, "WRK_SKU=s", "WRK_PREFIX=p"} }
	o, err := runWrk(t.Context(), "orders", []string{srv.URL}, "/", 4, time.Second, env, []string{"-s", script})
	if err != nil {
		t.Fatal(err)
	}
	var answered, timed int64
	for _, n := range o.statuses {
		answered += n
	}
	for _, n := range o.latency {
		timed += n
	}
	if answered == 0 || timed < answered || o.statuses[http.StatusConflict] == 0 || o.pct(99) <= 0 || o.pct(99) != o.worstP99 {
		t.Fatalf("orders: statuses %v (%d), %d in the histogram, p99 %v ms, worst %v ms; want at least as many timed, 409s among them, one p99",
			o.statuses, answered, timed, o.pct(99), o.worstP99)
	}
	h, err := runWrk(t.Context(), "healthz", []string{srv.URL}, "/healthz", 4, time.Second, nil, []string{"-s", hscript})
	if err != nil {
		t.Fatal(err)
	}
	if h.statuses != nil || len(h.latency) == 0 || h.pct(99) <= 0 {
		t.Fatalf("healthz: statuses %v, %d latencies, p99 %v ms; want no statuses, a histogram", h.statuses, len(h.latency), h.pct(99))
	}
}
