package chaos

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill/stock/loadtest/driver"
)

// The per-client-IP limit of the bots scenario (STOCK_RATE_IP and
// STOCK_RATE_IP_BURST).
const (
	botsIPRate  = 5 // requests per second per IP
	botsIPBurst = 5
)

// botAllowance is the most requests of one IP the shared GCRA limiter
// (go-redis/redis_rate) lets through in a window of span: with emission
// interval T = 1/rate and tolerance burst x T, the k-th allowed request (k
// from 1, the first at t0) needs its theoretical arrival t0 + (k-1)T to be at
// most now + (burst-1)T, so by t0 + span at most burst + floor(rate x span)
// are allowed. span is measured by the driver from the bot's first request
// sent to its last answer, which contains every moment Redis stamped one of
// its requests (Redis TIME, the same host clock). The +1 is for the edges:
// Redis computes in float seconds since 2017 (a request exactly on a
// boundary may round either way) and its clock is read apart from ours.
// Every allowed request can make at most one order, so this bounds a bot's
// orders.
func botAllowance(span float64) int {
	return botsIPBurst + int(math.Floor(botsIPRate*span)) + 1
}

// botStats is one bot as its answers and MySQL show it.
type botStats struct {
	name        string
	ip          string
	requests    int
	rateLimited int     // 429 rate-limited answers
	busy        int     // other 429s
	created     int     // 201 answers, from the driver's crowd result
	seen201     int     // 201 answers, counted from the observed requests
	rows        int     // its orders in MySQL
	span        float64 // seconds from its first request sent to its last answer
	allowance   int     // botAllowance(span)
}

// TestBots is the bots scenario of the rate limit: a few clients (each its
// own IP) hammer the SKU at every instance, far above their per-IP limit,
// while ordinary buyers (each its own IP, one order every 2 s: well under
// the limit) buy the same SKU, which never sells out (so the latencies are
// the bots', not a sell-out's). It checks, from the answers and from MySQL:
// every bot got 429 rate-limited and made at most its allowance of orders
// (counted both from the 201s and from the orders table, which agree); no
// ordinary buyer was rate-limited, and each placed its orders (their order
// p99 is reported against a 100 ms goal, not asserted); nothing oversold and every 201 is one row (the driver's audit and MySQL
// checks). The short version runs in `go test ./...`; STOCK_CHAOS=full (the
// setting of make chaos) runs it longer, with more bots. With
// STOCK_CHAOS_REPORT set, a summary is written as bots.md next to that
// file; it is logged either way.
func TestBots(t *testing.T) {
	if testing.Short() {
		t.Skip("the bots scenario starts servers; skipped with -short")
	}
	began := time.Now()
	// The sizes. The load generator shares the 2 cores with three
	// instances, Redis and MariaDB, and under -race it is the biggest CPU
	// user of them all: each bot request costs the driver more than the
	// server (12 bots at 100/s saturated the box, and the buyers' p99 was
	// 600 ms with -race and 120 ms without). So the bots fire 10x their
	// limit, not more: that is what the limit is for, and what the
	// allowance check proves it holds; the latency is then the price the
	// rejected requests put on the buyers.
	var (
		people     = size(100, 200) // ordinary buyers, each its own IP
		gap        = 2              // seconds between two orders of one buyer
		ordersEach = size(2, 8)     // orders of each: the run lasts gap x this many seconds
		bots       = size(5, 10)    // each its own IP
		botRate    = 50.0           // requests per second of each bot, at all instances: 10x its limit
		botWorkers = 8              // a bot's requests in flight at once, at most
		// The buyers' order p99 goal: 100 ms in the full run (make chaos),
		// 300 ms in the short one (other packages' tests share the cores).
		// A speed goal is reported, met or missed, in the summary: it is not
		// asserted (the machine's load moves it 2-3x).
		p99Limit = size(300.0, 100.0) // ms
		seconds  = gap * ordersEach
		botKeys  = int(botRate) * seconds // a bot fires as long as the buyers buy
		nBuyers  = people * ordersEach
	)
	// Ordinary buyer j (of the crowd) is person j % people: with the crowd
	// paced at people/gap orders a second, each person orders every gap
	// seconds. Bot b's keys are the b-th block of botKeys after the buyers'.
	buyersCrowd := driver.Crowd{Name: "buyers", Buyers: nBuyers, Concurrency: min(people, 100), Retries: 3, Rate: float64(people) / float64(gap)}
	crowds := []driver.Crowd{buyersCrowd}
	for b := range bots {
		crowds = append(crowds, driver.Crowd{Name: "bot" + strconv.Itoa(b), Buyers: botKeys, Concurrency: botWorkers, Rate: botRate})
	}
	botOf := func(i int) int { return (i - nBuyers) / botKeys }
	botIP := func(b int) string { return fmt.Sprintf("10.66.0.%d", b+1) }
	clientIP := func(i int) string {
		if i < nBuyers {
			p := i % people
			return fmt.Sprintf("10.1.%d.%d", p/200, p%200+1)
		}
		return botIP(botOf(i))
	}
	total := nBuyers + bots*botKeys
	r := newRig(t, rigConfig{strategy: "lock+version", env: map[string]string{
		"STOCK_RATE_IP":         strconv.Itoa(botsIPRate),
		"STOCK_RATE_IP_BURST":   strconv.Itoa(botsIPBurst),
		"STOCK_TRUSTED_PROXIES": "127.0.0.1",
	}})
	ctx := ctxFor(t, 4*time.Minute)

	// First the same buyers alone: it warms the fresh instances (their MySQL
	// pools, the first connections), so the bots run measures the bots, and
	// it is the baseline the buyers' latency with bots is compared with.
	base := r.wait(r.load(ctx, driver.Config{Stock: int64(nBuyers), Quantity: 1, Crowds: []driver.Crowd{buyersCrowd},
		ClientIP: clientIP, Duration: 2 * time.Minute, Label: "buyers alone"}))
	r.requireSafe(base, true)
	if base.RateLimited != 0 {
		t.Errorf("buyers alone: %d x 429 rate-limited; want none", base.RateLimited)
	}
	r.mu.Lock()
	r.events = nil
	r.mu.Unlock()
	// burst x emission interval = 1s: then every buyer's IP budget is whole again.
	time.Sleep(time.Duration(botsIPBurst) * time.Second / botsIPRate)

	// Stock for every key, bots' included: no answer is ever sold-out.
	res := r.wait(r.load(ctx, driver.Config{Stock: int64(total), Quantity: 1, Crowds: crowds, ClientIP: clientIP,
		Duration: 2 * time.Minute, Label: "buyers and bots"}))
	r.requireSafe(res, true)
	if res.MySQL == nil {
		t.Fatal("the driver did not verify in MySQL")
	}
	if res.Oversold != 0 || res.MySQL.Oversold != 0 || res.Statuses["409"] != 0 {
		t.Errorf("oversold %d (MySQL %d), %d x 409; want none", res.Oversold, res.MySQL.Oversold, res.Statuses["409"])
	}
	if len(res.Crowds) != len(crowds) {
		t.Fatalf("%d crowds in the result; want %d", len(res.Crowds), len(crowds))
	}

	// Each bot from the answers the driver saw...
	events := r.eventsOf(func(driver.Event) bool { return true })
	seen201 := make([]int, bots)
	seenLimited := make([]int, bots)
	buyerLimited := 0
	for _, e := range events {
		limited := e.Status == "429" && e.Problem == driver.ProblemRateLimited
		if e.Buyer < nBuyers {
			if limited {
				buyerLimited++
			}
			continue
		}
		if e.Status == "201" {
			seen201[botOf(e.Buyer)]++
		}
		if limited {
			seenLimited[botOf(e.Buyer)]++
		}
	}
	// ... and from MySQL: this run's keys are "<run id>-<buyer index>".
	rows := make([]int, bots)
	q, err := r.db.QueryContext(ctx, "SELECT idempotency_key FROM orders WHERE sku = ? AND idempotency_key LIKE ?", r.sku, res.RunID+"-%")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = q.Close() }()
	for q.Next() {
		var key string
		if err := q.Scan(&key); err != nil {
			t.Fatal(err)
		}
		i, err := strconv.Atoi(strings.TrimPrefix(key, res.RunID+"-"))
		if err != nil || i < 0 || i >= total {
			t.Errorf("order key %q is not one of this run's", key)
			continue
		}
		if i >= nBuyers {
			rows[botOf(i)]++
		}
	}
	if err := q.Err(); err != nil {
		t.Fatal(err)
	}

	var stats []botStats
	for b := range bots {
		c := res.Crowds[1+b]
		s := botStats{name: c.Name, ip: botIP(b), requests: c.Requests, rateLimited: c.RateLimited, busy: c.Busy,
			created: c.Created, seen201: seen201[b], rows: rows[b], span: c.LastAnswer - c.FirstSent}
		s.allowance = botAllowance(s.span)
		stats = append(stats, s)
		switch {
		case s.rateLimited == 0:
			t.Errorf("%s (%s): no 429 rate-limited in %d requests; want its excess refused", s.name, s.ip, s.requests)
		case s.rateLimited != seenLimited[b]:
			t.Errorf("%s: %d rate-limited in the result, %d observed; want the same", s.name, s.rateLimited, seenLimited[b])
		}
		if s.created > s.allowance || s.rows > s.allowance {
			t.Errorf("%s (%s): %d x 201, %d orders in MySQL over %.2fs; want at most its allowance %d = %d + floor(%d x %.2f) + 1",
				s.name, s.ip, s.created, s.rows, s.span, s.allowance, botsIPBurst, botsIPRate, s.span)
		}
		if s.created != s.seen201 || s.created != s.rows {
			t.Errorf("%s: %d x 201 in the result, %d observed, %d orders in MySQL; want all three equal", s.name, s.created, s.seen201, s.rows)
		}
		// The limiter lets a fresh IP's burst through: a bot that got less
		// was refused by something else.
		if s.created < botsIPBurst {
			t.Errorf("%s: %d orders; want at least the burst %d (statuses %v)", s.name, s.created, botsIPBurst, c.Statuses)
		}
	}

	buyers := res.Crowds[0]
	if buyers.RateLimited != 0 || buyerLimited != 0 {
		t.Errorf("ordinary buyers got %d (observed %d) 429 rate-limited answers; want none at one order every %ds each", buyers.RateLimited, buyerLimited, gap)
	}
	if buyers.Created != nBuyers {
		t.Errorf("ordinary buyers placed %d of their %d orders (outcomes %v)", buyers.Created, nBuyers, buyers.Outcomes)
	}
	t.Logf("ordinary buyers' order p99 %.1fms (p50 %.1fms, max %.1fms); goal under %.0fms",
		buyers.Latency.P99, buyers.Latency.P50, buyers.Latency.Max, p99Limit)

	md := botsMarkdown(base, res, stats, people, ordersEach, gap, botRate, p99Limit, time.Since(began))
	t.Logf("\n%s", md)
	if path := os.Getenv("STOCK_CHAOS_REPORT"); path != "" {
		out := filepath.Join(filepath.Dir(path), "bots.md")
		// A report for people to read beside the others, in a path the
		// operator chose (make chaos sets STOCK_CHAOS_REPORT).
		err := os.MkdirAll(filepath.Dir(out), 0o755) //nolint:gosec // G301/G703: the operator's report directory, readable like the work tree
		if err == nil {
			err = os.WriteFile(out, []byte(md), 0o644) //nolint:gosec // G306/G703: a report for people to read, at the operator's path
		}
		if err != nil {
			t.Errorf("write %s: %v", out, err)
		}
	}
}

// botsMarkdown is the scenario's summary: each bot's 429s and orders against
// its allowance, and the ordinary buyers' latencies.
func botsMarkdown(base, res *driver.Result, stats []botStats, people, ordersEach, gap int, botRate, p99Limit float64, took time.Duration) string {
	var b strings.Builder
	title := "Bots against the per-IP rate limit (short: `go test ./loadtest/chaos`)"
	if full {
		title = "Bots against the per-IP rate limit (`make chaos`)"
	}
	buyers := res.Crowds[0]
	fmt.Fprintf(&b, "%s\n\n", title)
	fmt.Fprintf(&b, "3 instances, STOCK_RATE_IP=%d, STOCK_RATE_IP_BURST=%d, X-Forwarded-For from 127.0.0.1 trusted. "+
		"%d ordinary buyers (own IPs) x %d orders, one every %ds each; %d bots (own IPs) at %.0f requests/s each over all instances; "+
		"one SKU, stock %d (never sold out). Buying phase %.1fs, whole test %.1fs.\n\n",
		botsIPRate, botsIPBurst, people, ordersEach, gap, len(stats), botRate, res.Stock, res.Seconds, took.Seconds())
	b.WriteString("| bot | IP | requests | 429 rate-limited | 429 busy | 201s | orders in MySQL | window s | allowance | verdict |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range stats {
		verdict := "ok"
		if s.rateLimited == 0 || s.created > s.allowance || s.rows > s.allowance || s.created != s.rows {
			verdict = "FAIL"
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %d | %.2f | %d | %s |\n",
			s.name, s.ip, s.requests, s.rateLimited, s.busy, s.created, s.rows, s.span, s.allowance, verdict)
	}
	fmt.Fprintf(&b, "\nAllowance = burst + floor(rate x window) + 1 (GCRA, the window from the bot's first request to its last answer; +1 for float rounding at the edges).\n\n")
	fmt.Fprintf(&b, "Ordinary buyers: %d orders placed of %d, %d requests, %d x 429 rate-limited, %d x 429 busy; "+
		"order latency p50 %.1f ms, p95 %.1f ms, p99 %.1f ms (goal %.0f ms: %s), max %.1f ms.\n\n",
		buyers.Created, buyers.Buyers, buyers.Requests, buyers.RateLimited, buyers.Busy,
		buyers.Latency.P50, buyers.Latency.P95, buyers.Latency.P99, p99Limit, map[bool]string{true: "met", false: "missed"}[buyers.Latency.P99 < p99Limit],
		buyers.Latency.Max)
	bl := base.Crowds[0].Latency
	fmt.Fprintf(&b, "The same buyers alone just before (the warm-up and baseline): p50 %.1f ms, p95 %.1f ms, p99 %.1f ms, max %.1f ms.\n\n",
		bl.P50, bl.P95, bl.P99, bl.Max)
	fmt.Fprintf(&b, "Audit: sold %d (want %d), oversold %d, MySQL oversold %d; result %s.\n",
		res.Sold, res.ExpectedSold, res.Oversold, res.MySQL.Oversold, res.Verdict())
	return b.String()
}
