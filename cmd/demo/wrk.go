package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "github.com/go-sql-driver/mysql" // the database/sql driver of the order count
	"github.com/seckill/stock/client"
	"github.com/seckill/stock/internal/api"

	"github.com/seckill/stock/internal/auth"
	"github.com/seckill/stock/loadtest/driver"
	"github.com/seckill/stock/loadtest/fleet"
	"github.com/seckill/stock/loadtest/report"
)

// The wrk phase measures the ceiling and lock+version orders with wrk, a
// load generator written in C that costs far less CPU per request than the
// Go driver: on a box where the driver shares the cores with the instances,
// the driver's own cost per request lowers its /healthz ceiling more than
// its order rate, so its orders/healthz ratio is the kinder one. This is the
// check nobody here wrote, and its ratio the stricter.

// wrkOptions are the wrk phase's flags.
type wrkOptions struct {
	connections int           // in all, split over the instances
	duration    time.Duration // of each kind in all, split over the rounds
	rounds      int           // of /healthz then orders, alternated
	doc         string        // the results file
}

// wrkRun is one kind of request measured with one wrk per instance.
type wrkRun struct {
	name     string
	perSec   float64         // summed over the instances
	worstP99 float64         // ms: the largest p99 a single wrk process had
	latency  map[int64]int64 // µs -> requests: the processes' histograms summed (pct)
	statuses map[int]int64
	errors   string // wrk's socket errors line, if any
}

// wrkResult is the phase's outcome.
type wrkResult struct {
	machine          driver.Machine
	healthz, orders  wrkRun   // the rounds' together
	hRounds, oRounds []wrkRun // each round's
	soldOut          wrkRun   // the sold-out flood's rounds together
	sRounds          []wrkRun // each round's
	instances, conns int
	duration         time.Duration // of each kind, all rounds together
	dbOrders         int64         // orders in MySQL after the run
	warmOrders       int64         // 201s of the warm-up, not in orders' figures
	audit            client.Audit
	peakRSS          []int64
}

// wrkLatency is the Lua function both scripts' done calls: it prints
// wrk's latency histogram (each distinct latency in µs and its count) as
// one line, so the processes' can be merged into the percentiles of all
// their requests; wrk itself prints only each process's own. It is the
// histogram wrk's percentiles come from, so it holds wrk's correction for
// coordinated omission too: a request slower than twice the mean interval
// between a connection's requests adds samples for those it held back.
const wrkLatency = `
function writeLatency(latency)
  local parts = {}
  for i = 1, #latency do
    local v, c = latency(i)
    parts[#parts + 1] = string.format("%d:%d", v, c)
  end
  io.write("LATENCY " .. table.concat(parts, " ") .. "\n")
end
`

// healthzScript only prints the latency histogram; wrk's requests stay
// its own static ones.
const healthzScript = wrkLatency + `
function done(summary, latency, requests) writeLatency(latency) end
`

// wrkScript sends POST /v1/orders for sku, each request with a fresh
// Idempotency-Key and the next of the buyers' tokens (one per line of the
// file), and prints the status counts of all threads as one line, and the
// latency histogram.
const wrkScript = wrkLatency + `
local tokens = {}
for line in io.lines(os.getenv("WRK_TOKENS")) do tokens[#tokens + 1] = line end
local sku, prefix = os.getenv("WRK_SKU"), os.getenv("WRK_PREFIX")
local threads = {}
function setup(thread)
  thread:set("id", #threads + 1)
  table.insert(threads, thread)
end
local n = 0
statuses = {} -- a global: done reads each thread's with thread:get
function request()
  n = n + 1
  local body = '{"sku":"' .. sku .. '","quantity":1}'
  return wrk.format("POST", "` + api.Orders + `", {["Content-Type"] = "application/json",
    ["Authorization"] = "Bearer " .. tokens[(n % #tokens) + 1],
    ["Idempotency-Key"] = prefix .. "-" .. id .. "-" .. n}, body)
end
function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end
function done(summary, latency, requests)
  local out = {}
  for _, t in ipairs(threads) do
    local s = t:get("statuses")
    for code, c in pairs(s) do out[code] = (out[code] or 0) + c end
  end
  local parts = {}
  for code, c in pairs(out) do parts[#parts + 1] = code .. "=" .. c end
  io.write("STATUSES " .. table.concat(parts, " ") .. "\n")
  writeLatency(latency)
end
`

// measureWrk starts o.instances lock+version instances (no rate limit, as
// the ceiling's), then runs wrk against /healthz and against POST
// /v1/orders of one hot SKU, and checks the sale in MySQL and by the audit.
func measureWrk(ctx context.Context, o options, runID, token string) (wrkResult, error) {
	res := wrkResult{instances: o.instances, conns: o.wrk.connections, duration: o.wrk.duration}
	if _, err := exec.LookPath("wrk"); err != nil {
		return res, errors.New("wrk is not installed (Debian: apt-get install -y wrk)")
	}
	dsn, drop, err := freshDB(ctx, o, "stock_demo_wrk_"+runID)
	if err != nil {
		return res, err
	}
	defer drop()
	f, err := fleet.Start(ctx, fleet.Config{
		Bin: o.bin, N: o.instances, DSN: dsn, RedisAddr: o.redis, AdminToken: token, Strategy: "lock+version",
		LogDir: filepath.Join(o.out, "logs"), Name: "wrk", Env: unlimitedEnv(),
	})
	if err != nil {
		return res, err
	}
	defer f.Stop()
	urls := f.URLs()
	sku := "wrk-" + runID
	if err := putStock(ctx, urls[0], token, sku, 100_000_000); err != nil {
		return res, err
	}
	if err := putStock(ctx, urls[0], token, soldOutSKU(sku), 0); err != nil {
		return res, err
	}
	dir, err := os.MkdirTemp("", "stock-wrk-")
	if err != nil {
		return res, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	files, err := writeWrkFiles(dir, runID)
	if err != nil {
		return res, err
	}
	if err := runWrkRounds(ctx, o, &res, urls, files, sku, runID); err != nil {
		return res, err
	}
	res.machine = driver.DetectMachine(ctx, dsn, o.redis)
	for _, in := range f.Instances {
		res.peakRSS = append(res.peakRSS, in.PeakRSS())
	}
	if res.dbOrders, err = settledOrders(ctx, dsn, sku); err != nil {
		return res, err
	}
	if res.audit, err = getAudit(ctx, urls[0], token, sku); err != nil {
		return res, err
	}
	return res, nil
}

// wrkFiles are the files the wrk runs read: the two scripts and the
// buyers' tokens, one a line.
type wrkFiles struct{ orders, healthz, tokens string }

// writeWrkFiles writes the scripts and ceilingBuyers buyers' tokens in dir.
func writeWrkFiles(dir, runID string) (wrkFiles, error) {
	files := wrkFiles{orders: filepath.Join(dir, "orders.lua"), healthz: filepath.Join(dir, "healthz.lua"), tokens: filepath.Join(dir, "tokens")}
	var tb strings.Builder
	for i := range ceilingBuyers {
		t, err := auth.Mint([]byte(fleet.JWTSecret), fmt.Sprintf("wrk-%s-%d", runID, i), time.Hour, "", "")
		if err != nil {
			return files, err
		}
		tb.WriteString(t + "\n")
	}
	for path, text := range map[string]string{files.orders: wrkScript, files.healthz: healthzScript, files.tokens: tb.String()} {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			return files, err
		}
	}
	return files, nil
}

// runWrkRounds runs 2s of uncounted orders, then o.wrk.rounds rounds of
// /healthz and orders taking turns, into res.
func runWrkRounds(ctx context.Context, o options, res *wrkResult, urls []string, files wrkFiles, sku, runID string) error {
	per := max(1, o.wrk.connections/len(urls))
	res.conns = per * len(urls)
	env := func(prefix string) func(i int) []string {
		return func(i int) []string {
			return []string{"WRK_TOKENS=" + files.tokens, "WRK_SKU=" + sku, "WRK_PREFIX=" + prefix + runID + "-" + strconv.Itoa(i)}
		}
	}
	// 2s of orders first, not counted: the instances' pools and MySQL's
	// pages warm up (their orders are in the database count all the same).
	warm, err := runWrk(ctx, "warm-up", urls, "/", per, 2*time.Second, env("w"), []string{"-s", files.orders})
	if err != nil {
		return err
	}
	res.warmOrders = warm.statuses[http.StatusCreated]
	// The kinds take turns, round by round, so a drift in the machine's
	// load (other tenants of the host) falls on both sides of the ratio.
	rounds := max(1, o.wrk.rounds)
	d := max(time.Second, (o.wrk.duration / time.Duration(rounds)).Truncate(time.Second))
	res.duration = d * time.Duration(rounds)
	for i := range rounds {
		_, _ = fmt.Fprintf(o.logw, "demo: wrk: round %d of %d: GET /healthz, then POST /v1/orders\n", i+1, rounds)
		h, err := runWrk(ctx, "GET /healthz", urls, api.Healthz, per, d, nil, []string{"-s", files.healthz})
		if err != nil {
			return err
		}
		m, err := runWrk(ctx, "POST /v1/orders (lock+version, one hot SKU)", urls, "/", per, d,
			env(fmt.Sprintf("m%d", i)), []string{"-s", files.orders})
		if err != nil {
			return err
		}
		so, err := runWrk(ctx, "POST /v1/orders (a sold-out SKU: 409s)", urls, "/", per, d,
			soldOutEnv(env(fmt.Sprintf("s%d", i)), sku), []string{"-s", files.orders})
		if err != nil {
			return err
		}
		res.hRounds, res.oRounds, res.sRounds = append(res.hRounds, h), append(res.oRounds, m), append(res.sRounds, so)
	}
	res.healthz, res.orders, res.soldOut = mergeRuns(res.hRounds), mergeRuns(res.oRounds), mergeRuns(res.sRounds)
	return nil
}

// soldOutSKU is the sold-out flood's SKU beside the hot SKU sku: stocked
// with no units.
func soldOutSKU(sku string) string { return sku + "-soldout" }

// soldOutEnv is env with WRK_SKU naming the sold-out SKU of sku.
func soldOutEnv(env func(i int) []string, sku string) func(i int) []string {
	return func(i int) []string { return append(env(i), "WRK_SKU="+soldOutSKU(sku)) }
}

// refused is a run's 409s per second, as placed counts 201s.
func (r wrkRun) refused() float64 { return r.rateOf(http.StatusConflict) }

// settledOrders is the SKU's order count in MySQL once it has stopped
// moving (orders wrk stopped waiting for are still being placed), or after
// 10 s.
func settledOrders(ctx context.Context, dsn, sku string) (int64, error) {
	n := int64(-1)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		last := n
		var err error
		if n, err = countOrders(ctx, dsn, sku); err != nil {
			return 0, err
		}
		if n == last || time.Now().After(deadline) {
			return n, nil
		}
	}
}

// runWrk runs one wrk per URL at once, per connections each, and adds up
// their rates, statuses (where the script counts them) and latency
// histograms. env, if not nil, gives instance i's wrk its extra
// environment (NAME=value); args go to every wrk and must name a script
// that prints the latency histogram.
func runWrk(ctx context.Context, name string, urls []string, path string, per int, d time.Duration, env func(i int) []string, args []string) (wrkRun, error) {
	run := wrkRun{name: name}
	outs := make([][]byte, len(urls))
	errs := make([]error, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		a := append([]string{"-t1", "-c" + strconv.Itoa(per), "-d" + strconv.Itoa(int(d.Seconds())) + "s", "--latency"}, args...)
		cmd := exec.CommandContext(ctx, "wrk", append(a, u+path)...) //nolint:gosec // G204: wrk with arguments built here
		cmd.Env = os.Environ()
		if env != nil {
			cmd.Env = append(cmd.Env, env(i)...)
		}
		wg.Go(func() { outs[i], errs[i] = cmd.CombinedOutput() })
	}
	wg.Wait()
	for i, u := range urls {
		if errs[i] != nil {
			return run, fmt.Errorf("wrk %s: %w: %s", u, errs[i], outs[i])
		}
		r, err := parseWrk(outs[i])
		if err != nil {
			return run, fmt.Errorf("wrk %s: %w: %s", u, err, outs[i])
		}
		run.perSec += r.perSec
		run.add(r)
	}
	return run, nil
}

// mergeRuns puts rounds of equal length together: the mean of their rates,
// the percentiles of all their requests, the sum of their statuses.
func mergeRuns(rounds []wrkRun) wrkRun {
	if len(rounds) == 0 {
		return wrkRun{}
	}
	m := wrkRun{name: rounds[0].name}
	for _, r := range rounds {
		m.perSec += r.perSec / float64(len(rounds))
		m.add(r)
	}
	return m
}

// add puts o's requests into r: the latency histograms summed, the worst
// p99 the larger, the statuses summed, the error lines joined. r's rate is
// the caller's.
func (r *wrkRun) add(o wrkRun) {
	if r.latency == nil {
		r.latency = map[int64]int64{}
	}
	for v, n := range o.latency {
		r.latency[v] += n
	}
	r.worstP99 = max(r.worstP99, o.worstP99)
	if o.statuses != nil && r.statuses == nil {
		r.statuses = map[int]int64{}
	}
	for c, n := range o.statuses {
		r.statuses[c] += n
	}
	r.errors = joinErrors(r.errors, o.errors)
}

// pct is the p-th percentile in ms of all the run's requests.
func (r wrkRun) pct(p float64) float64 { return percentile(r.latency, p) }

// percentile is the p-th percentile in ms of a latency histogram in µs,
// ranked as wrk ranks its own: the smallest latency with at least
// round(p% of the requests + 0.5) requests at or below it.
func percentile(h map[int64]int64, p float64) float64 {
	var all int64
	for _, n := range h {
		all += n
	}
	if all == 0 {
		return 0
	}
	rank := int64(math.Round(p/100*float64(all) + 0.5))
	var seen int64
	values := slices.Sorted(maps.Keys(h))
	for _, v := range values {
		if seen += h[v]; seen >= rank {
			return float64(v) / 1000
		}
	}
	return float64(values[len(values)-1]) / 1000 // p = 100
}

// joinErrors adds wrk's error line e to those in s.
func joinErrors(s, e string) string {
	switch {
	case e == "":
		return s
	case s == "":
		return e
	}
	return s + "; " + e
}

// placed is a run's orders placed per second: wrk's rate of answers (over
// its own measured time) times the share of them that were 201s, not
// every answer (a fast 429 or 503 would count there).
func (r wrkRun) placed() float64 { return r.rateOf(http.StatusCreated) }

// rateOf is a run's answers of status per second: wrk's rate of answers
// times their share.
func (r wrkRun) rateOf(status int) float64 {
	var all int64
	for _, n := range r.statuses {
		all += n
	}
	if all == 0 {
		return 0
	}
	return r.perSec * float64(r.statuses[status]) / float64(all)
}

// hasRounds reports whether the result has each round's runs to show.
func (r wrkResult) hasRounds() bool {
	return len(r.oRounds) > 1 && len(r.hRounds) == len(r.oRounds) && (len(r.sRounds) == 0 || len(r.sRounds) == len(r.oRounds))
}

var (
	wrkRate    = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	wrkErrors  = regexp.MustCompile(`Socket errors:[^\n]*`)
	wrkNon2xx  = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	wrkPct     = regexp.MustCompile(`(?m)^\s+(50|99)%\s+([0-9.]+)(us|ms|s)\s*$`)
	wrkStatLin = regexp.MustCompile(`STATUSES ([0-9= ]*)`)
	wrkLatLine = regexp.MustCompile(`LATENCY ([0-9: ]*)`)
)

// parseWrk reads one wrk's output: its rate, the script's latency
// histogram (and its p50 and p99 in ms, checked against those wrk's
// --latency prints), its socket errors and the script's status counts.
func parseWrk(out []byte) (wrkRun, error) {
	var r wrkRun
	m := wrkRate.FindSubmatch(out)
	if m == nil {
		return r, errors.New("no Requests/sec line")
	}
	r.perSec, _ = strconv.ParseFloat(string(m[1]), 64)
	l := wrkLatLine.FindSubmatch(out)
	if l == nil {
		return r, errors.New("no LATENCY line (the script's done prints it)")
	}
	r.latency = map[int64]int64{}
	for _, vc := range strings.Fields(string(l[1])) {
		v, c, _ := strings.Cut(vc, ":")
		us, err1 := strconv.ParseInt(v, 10, 64)
		n, err2 := strconv.ParseInt(c, 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return r, fmt.Errorf("LATENCY %q: %w", vc, err)
		}
		r.latency[us] += n
	}
	r.worstP99 = r.pct(99)
	// The histogram must give wrk's own percentiles (printed to 3 digits).
	for _, p := range wrkPct.FindAllSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(string(p[2]), 64)
		switch string(p[3]) {
		case "us":
			v /= 1000
		case "s":
			v *= 1000
		}
		mine := r.pct(99)
		if string(p[1]) == "50" {
			mine = r.pct(50)
		}
		if math.Abs(mine-v) > 0.006*v+0.01 {
			return r, fmt.Errorf("the LATENCY line's p%s is %.3f ms, wrk printed %.3f ms", p[1], mine, v)
		}
	}
	if e := wrkErrors.Find(out); e != nil {
		r.errors = string(e)
	}
	if s := wrkStatLin.FindSubmatch(out); s != nil { // the orders' script; wrk itself counts only non-2xx
		r.statuses = map[int]int64{}
		for _, kv := range strings.Fields(string(s[1])) {
			code, n, _ := strings.Cut(kv, "=")
			c, _ := strconv.Atoi(code)
			v, _ := strconv.ParseInt(n, 10, 64)
			r.statuses[c] += v
		}
	}
	// A script that counts statuses shows the non-2xx among them; only
	// a run without one (/healthz) reports wrk's count as an error.
	if n := wrkNon2xx.FindSubmatch(out); n != nil && r.statuses == nil {
		r.errors = strings.TrimSpace(r.errors + " non-2xx: " + string(n[1]))
	}
	return r, nil
}

func countOrders(ctx context.Context, dsn, sku string) (int64, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return 0, err
	}
	defer func() { _ = db.Close() }()
	var n int64
	err = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM orders WHERE sku = ?", sku).Scan(&n)
	return n, err
}

func getAudit(ctx context.Context, url, token, sku string) (client.Audit, error) {
	c, err := client.New(url, client.WithToken(token))
	if err != nil {
		return client.Audit{}, err
	}
	return c.Audit(ctx, sku)
}

// wrkGoals checks the run: the audit consistent, no oversell, every 201
// wrk saw committed (at most the connections' in-flight orders more in
// MySQL, answered after wrk stopped reading), and states the issue's
// goals against wrk's /healthz rate.
func (r wrkResult) goals() (lines []string, passed bool) {
	created := r.orders.statuses[http.StatusCreated] + r.warmOrders
	others := int64(0)
	for c, n := range r.orders.statuses {
		if c != http.StatusCreated {
			others += n
		}
	}
	consistent, oversold, sold := r.audit.Consistent, r.audit.Oversold, r.audit.Sold
	// wrk stops once after the warm-up and once after each round of orders.
	inFlight := int64(r.conns) * int64(1+max(1, len(r.oRounds)))
	refusals, notRefused := r.soldOut.statuses[http.StatusConflict], int64(0)
	for c, n := range r.soldOut.statuses {
		if c != http.StatusConflict {
			notRefused += n
		}
	}
	flooded := len(r.sRounds) == 0 || refusals > 0 && notRefused == 0
	passed = consistent && oversold == 0 && created > 0 && created <= r.dbOrders && r.dbOrders <= created+inFlight && sold == r.dbOrders && flooded
	verdict := "PASS"
	if !passed {
		verdict = "FAIL"
	}
	lines = append(lines, fmt.Sprintf("%s: %d answers 201 (warm-up included) and %d other; MySQL holds %d orders of the SKU (201s <= orders <= 201s + %d: the connections in flight at each of wrk's stops), sold %d, audit consistent %v, oversold %d; the sold-out SKU answered %d 409s and %d other.",
		verdict, created, others, r.dbOrders, inFlight, sold, consistent, oversold, refusals, notRefused))
	met := func(ok bool) string {
		if ok {
			return "MET"
		}
		return "NOT MET"
	}
	if h := r.healthz.perSec; h > 0 {
		// Orders placed: the mean of the rounds' (as the /healthz rate is),
		// each round's ratio beside it when there are several.
		hs, ords := r.hRounds, r.oRounds
		if !r.hasRounds() {
			hs, ords = []wrkRun{r.healthz}, []wrkRun{r.orders}
		}
		var placed float64
		var each []string
		for i, o := range ords {
			placed += o.placed() / float64(len(ords))
			if hr := hs[i].perSec; hr > 0 {
				each = append(each, fmt.Sprintf("%.3fx", o.placed()/hr))
			} else {
				each = append(each, "-")
			}
		}
		ratio := placed / h
		rounds := ""
		if len(ords) > 1 {
			rounds = " (round by round: " + strings.Join(each, ", ") + ")"
		}
		lines = append(lines, fmt.Sprintf("goal lock+version >= 0.3x the /healthz rate (both by wrk): %.0f orders placed/s vs %.0f/s = %.3fx%s, %s.", placed, h, ratio, rounds, met(ratio >= 0.3)))
		if len(r.sRounds) > 0 {
			so := r.soldOut.refused()
			lines = append(lines, fmt.Sprintf("goal sold-out 409s >= 0.5x the /healthz rate (both by wrk): %.0f/s vs %.0f/s = %.3fx, %s.", so, h, so/h, met(so/h >= 0.5)))
		}
	}
	lines = append(lines, fmt.Sprintf("goal p99 < 50 ms at %d connections: %.1f ms over all the rounds' orders (the %d wrk processes' latency histograms merged; the largest p99 of one process in one round: %.1f ms; /healthz's p99: %.1f ms), %s.",
		r.conns, r.orders.pct(99), r.instances, r.orders.worstP99, r.healthz.pct(99), met(r.orders.pct(99) < 50)))
	var peak int64
	for _, p := range r.peakRSS {
		peak = max(peak, p)
	}
	if peak > 0 {
		lines = append(lines, fmt.Sprintf("goal every instance < 100 MiB RSS: peak %.1f MiB, %s.", float64(peak)/(1<<20), met(peak < 100<<20)))
	}
	return lines, passed
}

// runWrkPhase measures with wrk, prints the table and the goals, and
// writes the results file if asked. A failed check is an error.
func runWrkPhase(ctx context.Context, o options, runID, token string, stdout io.Writer) error {
	r, err := measureWrk(ctx, o, runID, token)
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintf(stdout, "\nwrk: %d instances (lock+version), %d connections, %v per kind in %d rounds\n", r.instances, r.conns, r.duration, len(r.oRounds))
	for _, run := range []wrkRun{r.healthz, r.orders, r.soldOut} {
		_, _ = fmt.Fprintf(stdout, "  %-45s %7.0f/s  p50 %6.1f ms  p99 %6.1f ms (one wrk's worst %6.1f ms)  %v %s\n", run.name, run.perSec, run.pct(50), run.pct(99), run.worstP99, run.statuses, run.errors)
	}
	lines, passed := r.goals()
	for _, l := range lines {
		_, _ = fmt.Fprintln(stdout, "  "+l)
	}
	if o.wrk.doc != "" {
		if err := writeWrkDoc(ctx, o.wrk.doc, o.target, r); err != nil {
			return err
		}
		_, _ = fmt.Fprintf(stdout, "wrk: %s\n", o.wrk.doc)
	}
	if !passed {
		return errors.New("the sale's check failed: " + lines[0])
	}
	return nil
}

// writeWrkDoc writes the wrk phase's results file.
func writeWrkDoc(ctx context.Context, path, target string, r wrkResult) error {
	var b bytes.Buffer
	b.WriteString(report.Header("lock+version measured with wrk", target, report.Commit(ctx), time.Now(), r.machine))
	n := len(r.oRounds)
	fmt.Fprintf(&b, "%d `stock serve` instances (lock+version, no rate limit, every other setting at its default: the outbox's relay on, no sinks), one `wrk -t1 -c%d` per instance (%d connections in all), on this box beside the instances, MySQL and Redis. "+
		"%v of each kind in %d rounds of %v, the kinds alternated (`/healthz`, orders, the sold-out flood, `/healthz`, ...) so a drift in the machine's load falls on all. "+
		"Orders: one hot SKU that does not sell out, a fresh Idempotency-Key per request, %d buyers' tokens in turn; the sold-out flood: the same requests for a SKU stocked with no units, each answered 409. "+
		"Before the first round, 2s of orders warm the instances up. Rates are summed over the wrk processes (a kind's overall rate: the mean of its rounds'); p50 and p99 are of all the requests of the row (the processes' latency histograms, printed by the scripts, merged); the last column is the largest p99 a single wrk process had.\n\n",
		r.instances, max(1, r.conns/r.instances), r.conns, r.duration, n, r.duration/time.Duration(max(1, n)), ceilingBuyers)
	b.WriteString("| request | req/s | p50 ms | p99 ms | statuses | errors | one wrk's worst p99 ms |\n|---|--:|--:|--:|---|---|--:|\n")
	var runs []wrkRun
	if r.hasRounds() {
		for i := range n {
			round := []wrkRun{r.hRounds[i], r.oRounds[i]}
			if len(r.sRounds) > 0 {
				round = append(round, r.sRounds[i])
			}
			for _, run := range round {
				run.name = fmt.Sprintf("round %d: %s", i+1, run.name)
				runs = append(runs, run)
			}
		}
		for _, run := range []wrkRun{r.healthz, r.orders, r.soldOut} {
			run.name = "**all rounds**: " + run.name
			runs = append(runs, run)
		}
	} else {
		runs = []wrkRun{r.healthz, r.orders, r.soldOut}
	}
	for _, run := range runs {
		var st []string
		for c, n := range run.statuses {
			st = append(st, fmt.Sprintf("%d: %d", c, n))
		}
		fmt.Fprintf(&b, "| %s | %.0f | %.1f | %.1f | %s | %s | %.1f |\n", run.name, run.perSec, run.pct(50), run.pct(99), orDash(strings.Join(st, ", ")), orDash(run.errors), run.worstP99)
	}
	lines, _ := r.goals()
	b.WriteString("\n")
	for _, l := range lines {
		b.WriteString("- " + l + "\n")
	}
	return os.WriteFile(path, b.Bytes(), 0o644) //nolint:gosec // G306: a document of the repo, for people to read
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
