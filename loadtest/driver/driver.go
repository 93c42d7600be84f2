// Package driver runs the "seckill" load scenario against one or more
// instances of the stock service and proves the result from the server's
// own state: N buyers race for one SKU, each placing one order under its own
// Idempotency-Key, and afterwards the audit endpoint and (optionally) MySQL
// itself must show that exactly min(stock, demand) was sold, nothing was
// oversold and every order a buyer was told about exists exactly once.
//
// It mirrors loadtest/k6/seckill.js: the same setup (set the stock through
// the admin API, read it back through every instance), the same buyers
// (round-robin over the base URLs, retried with the SAME key on 429, 502,
// 503, 504 and no response, backing off per Retry-After) and the same
// invariants. Run is the whole scenario; WriteJSON, WriteTable and WriteHTML
// report one or more results.
//
// The driver only talks to loopback addresses, and every run is bounded in
// buyers, concurrency and time.
package driver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill/stock/internal/auth"
	"github.com/seckill/stock/internal/service"
)

// Bounds on one run, so a typo cannot turn a load test into a flood.
const (
	MaxBuyers      = 1_000_000
	MaxConcurrency = 2_000
	MaxRetries     = 10
	MaxDuration    = 30 * time.Minute
	MaxQuantity    = 100
	MaxStock       = 1_000_000_000
)

// BucketWidth is the width of one bucket of Result.Timeline.
const BucketWidth = 100 * time.Millisecond

// Config is one run of the scenario.
type Config struct {
	URLs        []string // base URLs of the instances, loopback only; buyers are spread over them
	SKU         string   // empty: "seckill-<run id>", a fresh SKU per run
	Stock       int64    // units set through the admin API before the run
	Buyers      int      // buyers, one order each (with Crowds: 0, the sum of theirs)
	Concurrency int      // concurrent buyers (connections) (with Crowds: 0, the sum of theirs)
	Quantity    int      // units per order
	AdminToken  string   // bearer token of the admin API (required)
	// JWTSecret signs each buyer's bearer token (HS256, sub "<run id>-b<n>"):
	// the instances' STOCK_JWT_SECRET. Empty: orders carry no token.
	JWTSecret string
	// PerBuyerLimit is the SKU's per-buyer limit, set with the stock (0: none).
	PerBuyerLimit int64
	// Greedy, if > 0, makes every Greedy-th buyer (buyer i with i%Greedy == 0)
	// order as one of GreedyBuyers shared identities, so each of those fires
	// many concurrent orders, with distinct keys, at every instance; the run
	// then checks from the audit that no buyer holds more than PerBuyerLimit.
	Greedy       int
	GreedyBuyers int
	Retries      int // retries of one order with the same key on 429/502/503/504/no response
	// Duration caps the buying phase (default 2m); buyers not started by then
	// are not run, and the run fails its sell-out check.
	Duration       time.Duration
	MySQLDSN       string        // optional: verify in MySQL directly too (go-sql-driver DSN of the service's database)
	RedisAddr      string        // optional: only to report the Redis version
	ExpectOversell bool          // the run passes only if an oversell (or lost update) is detected
	RequestTimeout time.Duration // per HTTP request (default 10s)
	ReadyTimeout   time.Duration // how long to wait for every /readyz (default 30s)
	Label          string        // names the run in reports (e.g. the strategy); default the SKU
	Log            io.Writer     // progress lines; nil: none
	// Failover sends a buyer's retry to the next URL when its try got no
	// answer or 502/503/504 (what a load balancer does when an instance
	// dies); default: every try of a buyer goes to the same instance.
	Failover bool
	// Observe, if set, is called after every order request, from the
	// buyers' goroutines (so it must be safe for concurrent use and quick).
	// Fault tests use it to time recoveries.
	Observe func(Event)
	// ClientIP, if set, is buyer i's client IP address: every request of its
	// order carries "X-Forwarded-For: <ClientIP(i)>" (none when it returns
	// ""), so instances that trust the driver as a proxy
	// (STOCK_TRUSTED_PROXIES=127.0.0.1) see each buyer as a client of its
	// own, for their per-IP rate limit. Buyers may share an address (one
	// person placing several orders). Default: no header, every buyer is
	// the driver's own address.
	ClientIP func(buyer int) string
	// Crowds, if set, splits the buyers into groups with their own workers,
	// retries and pace (ordinary buyers and bots in one run, on one SKU):
	// crowd k's buyers are the next Crowds[k].Buyers indices after those of
	// crowds 0..k-1. Buyers, Concurrency and Retries must then be 0:
	// Validate sets them to the sums of the crowds (Retries to the most of
	// any crowd). Result.Crowds reports each crowd on its own.
	Crowds []Crowd
}

// Crowd is one group of the buyers of a run (Config.Crowds).
type Crowd struct {
	Name        string // names it in the result; default "crowd<k>"
	Buyers      int    // its buyers, one order (one key) each
	Concurrency int    // its workers: at most this many of its orders in flight
	Retries     int    // retries of one of its orders, same key, on 429/502/503/504/no response
	// Rate, if > 0, paces the crowd: its j-th order (j counted from 0 within
	// the crowd) is not sent before j/Rate seconds into the buying phase,
	// so the crowd starts Rate orders per second while its workers keep
	// up. 0: every worker sends its next order as soon as the last one ended.
	Rate float64
}

// MaxCrowdRate bounds Crowd.Rate (orders per second).
const MaxCrowdRate = 100_000

// Event is one order request, as Config.Observe sees it.
type Event struct {
	Buyer  int
	Try    int
	URL    string    // the instance's base URL
	Sent   time.Time // when the request was sent
	At     time.Time // when the answer (or the error) came
	Status string    // "201", "503", "no-response", ...
	// Problem is the kind of a problem details answer: the last segment of
	// its type URI ("rate-limited", "busy", "sold-out", ...); "" for none.
	// A 429 is "rate-limited" (the per-IP limit) or "busy" (the SKU's line).
	Problem string
}

var tokenRE = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// Validate checks the bounds and that every URL is a loopback http URL.
func (c *Config) Validate() error {
	if len(c.URLs) == 0 {
		return errors.New("driver: no base URL")
	}
	for i, raw := range c.URLs {
		u, err := url.Parse(strings.TrimRight(strings.TrimSpace(raw), "/"))
		if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.Path != "" || u.RawQuery != "" {
			return fmt.Errorf("driver: base URL %q: want http://HOST:PORT", raw)
		}
		if !loopback(u.Hostname()) {
			return fmt.Errorf("driver: base URL %q: load tests target loopback addresses only (127.0.0.1, ::1, localhost)", raw)
		}
		c.URLs[i] = u.String()
	}
	if err := c.validateCrowds(); err != nil {
		return err
	}
	switch {
	case c.SKU != "" && !tokenRE.MatchString(c.SKU):
		return fmt.Errorf("driver: sku %q: want 1-64 chars of [A-Za-z0-9._:-]", c.SKU)
	case c.Stock < 0 || c.Stock > MaxStock:
		return fmt.Errorf("driver: stock %d: want 0..%d", c.Stock, MaxStock)
	case c.Buyers < 1 || c.Buyers > MaxBuyers:
		return fmt.Errorf("driver: buyers %d: want 1..%d", c.Buyers, MaxBuyers)
	case c.Concurrency < 1 || c.Concurrency > MaxConcurrency:
		return fmt.Errorf("driver: concurrency %d: want 1..%d", c.Concurrency, MaxConcurrency)
	case c.Quantity < 1 || c.Quantity > MaxQuantity:
		return fmt.Errorf("driver: quantity %d: want 1..%d", c.Quantity, MaxQuantity)
	case c.Retries < 0 || c.Retries > MaxRetries:
		return fmt.Errorf("driver: retries %d: want 0..%d", c.Retries, MaxRetries)
	case c.Duration < 0 || c.Duration > MaxDuration:
		return fmt.Errorf("driver: duration %v: want at most %v", c.Duration, MaxDuration)
	case c.AdminToken == "":
		return errors.New("driver: an admin token is required: setup sets the stock through the admin API")
	}
	if c.Duration == 0 {
		c.Duration = 2 * time.Minute
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 10 * time.Second
	}
	if c.ReadyTimeout <= 0 {
		c.ReadyTimeout = 30 * time.Second
	}
	return nil
}

// validateCrowds checks the crowds and sets Buyers, Concurrency and Retries
// from them.
func (c *Config) validateCrowds() error {
	if len(c.Crowds) == 0 {
		return nil
	}
	names := map[string]bool{}
	buyers, conc, retries := 0, 0, 0
	for k := range c.Crowds {
		cr := &c.Crowds[k]
		if cr.Name == "" {
			cr.Name = "crowd" + strconv.Itoa(k)
		}
		switch {
		case names[cr.Name]:
			return fmt.Errorf("driver: crowd %q twice", cr.Name)
		case cr.Buyers < 1 || cr.Buyers > MaxBuyers:
			return fmt.Errorf("driver: crowd %s: buyers %d: want 1..%d", cr.Name, cr.Buyers, MaxBuyers)
		case cr.Concurrency < 1 || cr.Concurrency > MaxConcurrency:
			return fmt.Errorf("driver: crowd %s: concurrency %d: want 1..%d", cr.Name, cr.Concurrency, MaxConcurrency)
		case cr.Retries < 0 || cr.Retries > MaxRetries:
			return fmt.Errorf("driver: crowd %s: retries %d: want 0..%d", cr.Name, cr.Retries, MaxRetries)
		case !(cr.Rate >= 0 && cr.Rate <= MaxCrowdRate):
			return fmt.Errorf("driver: crowd %s: rate %v: want 0..%d orders/s", cr.Name, cr.Rate, MaxCrowdRate)
		}
		names[cr.Name] = true
		buyers += cr.Buyers
		conc += cr.Concurrency
		retries = max(retries, cr.Retries)
	}
	// 0, or what an earlier Validate set.
	if c.Buyers != 0 && c.Buyers != buyers || c.Concurrency != 0 && c.Concurrency != conc || c.Retries != 0 && c.Retries != retries {
		return errors.New("driver: with crowds, buyers, concurrency and retries are per crowd: leave them 0")
	}
	c.Buyers, c.Concurrency, c.Retries = buyers, conc, retries
	return nil
}

// crowds returns the crowds of the run: Config.Crowds, or one crowd of every
// buyer at full speed.
func (c *Config) crowds() []Crowd {
	if len(c.Crowds) > 0 {
		return c.Crowds
	}
	return []Crowd{{Buyers: c.Buyers, Concurrency: c.Concurrency, Retries: c.Retries}}
}

func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Expected returns the orders and units a correct server sells:
// min(floor(stock/quantity), demand) whole orders, where a greedy identity's
// demand is capped by the per-buyer limit.
func (c Config) Expected() (orders, units int64) {
	orders = min(c.Stock/int64(c.Quantity), c.demand())
	return orders, orders * int64(c.Quantity)
}

// demand is the orders the buyers may place: one each, but a greedy
// identity at most its allowance.
func (c Config) demand() int64 {
	if c.Greedy <= 0 {
		return int64(c.Buyers)
	}
	greedy := int64((c.Buyers + c.Greedy - 1) / c.Greedy)
	allowed := greedy
	if c.PerBuyerLimit > 0 {
		allowed = 0
		g := int64(max(c.GreedyBuyers, 1))
		for k := range g {
			orders := max(0, (greedy-k+g-1)/g)
			allowed += min(orders, c.PerBuyerLimit/int64(c.Quantity))
		}
	}
	return int64(c.Buyers) - greedy + allowed
}

// BuyerID is the buyer (the token's sub) of buyer i's order.
func (c Config) BuyerID(runID string, i int) string {
	if c.Greedy > 0 && i%c.Greedy == 0 {
		return runID + "-g" + strconv.Itoa((i/c.Greedy)%max(c.GreedyBuyers, 1))
	}
	return runID + "-b" + strconv.Itoa(i)
}

// Sellable is the most orders the stock can fill.
func (c Config) Sellable() int64 { return c.Stock / int64(c.Quantity) }

// Result is everything one run measured and proved. The JSON field names are
// the report format.
type Result struct {
	Label   string    `json:"label"`
	SKU     string    `json:"sku"`
	RunID   string    `json:"run_id"`
	Started time.Time `json:"started"`

	URLs        []string `json:"urls"`
	Stock       int64    `json:"stock"`
	Buyers      int      `json:"buyers"`
	Concurrency int      `json:"concurrency"`
	Quantity    int      `json:"quantity"`
	Retries     int      `json:"retries"`
	CapSeconds  float64  `json:"cap_seconds"`

	ExpectedOrders int64 `json:"expected_orders"`
	ExpectedSold   int64 `json:"expected_sold"`

	Seconds          float64        `json:"seconds"`            // the buying phase, first request to last answer
	LastOrderSeconds float64        `json:"last_order_seconds"` // when the last 201 arrived (the sell-out moment)
	Aborted          bool           `json:"aborted"`            // the duration cap ended the run early
	BuyersRun        int            `json:"buyers_run"`
	Requests         int            `json:"requests"`
	Statuses         map[string]int `json:"statuses"` // per request: "201", "409", "429", "no-response", ...
	Outcomes         map[string]int `json:"outcomes"` // per buyer, its last answer
	// RateLimited and Busy split Statuses["429"] by problem type: refused by
	// the per-client-IP rate limit, or busy (the SKU's line is full; any
	// other 429 counts here too).
	RateLimited int `json:"rate_limited"`
	Busy        int `json:"busy"`
	// RateLimitedBuyers is buyers whose last answer was 429 rate-limited:
	// refused by policy, so not counted in the demand the sell-out check
	// expects to be served.
	RateLimitedBuyers int `json:"rate_limited_buyers"`
	// Problems counts problem details answers by kind ("sold-out", "busy",
	// "rate-limited", ...).
	Problems       map[string]int `json:"problems,omitempty"`
	Created        int            `json:"created"`  // 201s
	Replayed       int            `json:"replayed"` // 200s (a retry of an order that had been committed)
	BadEchoes      int            `json:"bad_echoes"`
	OrdersPerSec   float64        `json:"orders_per_sec"` // 201s per second of the buying phase
	RequestsPerSec float64        `json:"requests_per_sec"`
	Latency        Latency        `json:"latency"` // every order request, retries included
	Timeline       Timeline       `json:"timeline"`
	// Crowds is each crowd on its own (only with Config.Crowds).
	Crowds []CrowdResult `json:"crowds,omitempty"`

	Metrics   Metrics    `json:"metrics"`
	Instances []Instance `json:"instances,omitempty"` // filled by whoever started the instances
	Machine   Machine    `json:"machine"`

	Audit    *Audit      `json:"audit,omitempty"`
	MySQL    *MySQLState `json:"mysql,omitempty"`
	Sold     int64       `json:"sold"`     // units sold this run, per the stock row
	Orders   int64       `json:"orders"`   // orders placed this run (audit)
	Units    int64       `json:"units"`    // units in those orders
	Oversold int64       `json:"oversold"` // units ordered beyond the stock
	// LostUpdates is units in orders that the stock row does not account for
	// (units - sold): the read-check-write race of the unsafe strategy.
	LostUpdates int64 `json:"lost_updates"`
	// BuyersOverLimit is the buyers holding more than the per-buyer limit,
	// from the audit (an unsafe strategy is caught here too).
	BuyersOverLimit int64 `json:"buyers_over_limit"`

	Checks           []Check `json:"checks"`
	ExpectOversell   bool    `json:"expect_oversell"`
	OversellDetected bool    `json:"oversell_detected"`
	// Safe: every safety check held (with ExpectOversell: the oversell was
	// caught and nothing else broke). Passed: Safe, and every buyer who could
	// have bought did (no liveness check failed).
	Safe   bool `json:"safe"`
	Passed bool `json:"passed"`
}

// Latency summarises request latencies, in milliseconds.
type Latency struct {
	P50  float64 `json:"p50_ms"`
	P95  float64 `json:"p95_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
	Mean float64 `json:"mean_ms"`
}

// CrowdResult is what one crowd of the run saw: the same counts as the run's,
// over its buyers' requests only.
type CrowdResult struct {
	Name        string  `json:"name"`
	FirstBuyer  int     `json:"first_buyer"` // its buyers are FirstBuyer .. FirstBuyer+Buyers-1
	Buyers      int     `json:"buyers"`
	Concurrency int     `json:"concurrency"`
	Retries     int     `json:"retries"`
	Rate        float64 `json:"rate"`

	BuyersRun         int            `json:"buyers_run"`
	Requests          int            `json:"requests"`
	Statuses          map[string]int `json:"statuses"`
	Outcomes          map[string]int `json:"outcomes"`
	RateLimited       int            `json:"rate_limited"`
	Busy              int            `json:"busy"`
	RateLimitedBuyers int            `json:"rate_limited_buyers"`
	Created           int            `json:"created"`
	Replayed          int            `json:"replayed"`
	Latency           Latency        `json:"latency"`
	// FirstSent and LastAnswer bound its requests, in seconds since the
	// start of the buying phase (0 and 0 when it sent none).
	FirstSent  float64 `json:"first_sent_seconds"`
	LastAnswer float64 `json:"last_answer_seconds"`
}

// Timeline counts answers per BucketWidth of the buying phase.
type Timeline struct {
	BucketMS int   `json:"bucket_ms"`
	Created  []int `json:"created"`  // 201s
	Requests []int `json:"requests"` // every answer
}

// Instance is one server process, as seen by whoever started it.
type Instance struct {
	URL          string `json:"url"`
	PID          int    `json:"pid,omitempty"`
	PeakRSSBytes int64  `json:"peak_rss_bytes,omitempty"` // VmHWM just before stopping
	ExitOK       bool   `json:"exit_ok"`                  // exited 0 after SIGTERM
}

// Check is one verified invariant.
type Check struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Oversell marks the checks an oversell (or a lost update) breaks; with
	// ExpectOversell the others must still hold.
	Oversell bool `json:"oversell"`
	// Liveness marks the checks that fail when buyers gave up (their
	// retries ran out, or the duration cap hit) while nothing unsafe happened.
	Liveness bool   `json:"liveness,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

// Audit is the body of GET /v1/admin/stock/{sku}/audit: the service's own
// type, so the two cannot drift apart.
type Audit = service.Audit

type stockBody struct {
	SKU       string `json:"sku"`
	Available int64  `json:"available"`
	Sold      int64  `json:"sold"`
	Version   int64  `json:"version"`
}

type orderBody struct {
	ID       int64  `json:"id"`
	Key      string `json:"idempotency_key"`
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

// ack is an order a buyer was told about (201, or 200 for a replay).
type ack struct {
	buyer  int
	status int
	order  orderBody
}

// attempt is one order request.
type attempt struct {
	buyer   int
	at      time.Duration // answer, since the start of the buying phase
	latency time.Duration
	status  string
	problem string // kind of a problem details answer, "" for none
}

// buyer is the outcome of one buyer.
type buyer struct {
	last     string // status of the last try
	limited  bool   // the last try was answered 429 rate-limited
	answered bool   // the last try got an HTTP answer
	ack      *ack
}

type runner struct {
	cfg    Config
	client *http.Client
	runID  string
	sku    string
	start  time.Time
}

func (r *runner) logf(format string, args ...any) {
	if r.cfg.Log != nil {
		_, _ = fmt.Fprintf(r.cfg.Log, "loadtest: "+format+"\n", args...) // progress lines: a failed write stops nothing
	}
}

// NewRunID returns a short id, unique per run: a timestamp and random bits,
// so parallel runs never share a SKU or a key.
func NewRunID() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return strconv.FormatInt(time.Now().UnixMilli(), 36) + hex.EncodeToString(b[:])
}

// Run runs the scenario: setup, the buyers, then the verification. It
// returns an error only when the scenario could not be run at all (bad
// config, an instance not ready, setup refused); broken invariants are in
// Result.Checks and make Result.Passed false.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, runID: NewRunID()}
	r.sku = cfg.SKU
	if r.sku == "" {
		r.sku = "seckill-" + r.runID
	}
	tr := &http.Transport{
		Proxy:               nil, // never through a proxy: loopback only
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        2 * cfg.Concurrency,
		MaxIdleConnsPerHost: cfg.Concurrency,
		IdleConnTimeout:     60 * time.Second,
		DisableCompression:  true,
	}
	defer tr.CloseIdleConnections()
	r.client = &http.Client{Transport: tr, Timeout: cfg.RequestTimeout}

	res := &Result{
		Label: cfg.Label, SKU: r.sku, RunID: r.runID, URLs: cfg.URLs,
		Stock: cfg.Stock, Buyers: cfg.Buyers, Concurrency: cfg.Concurrency, Quantity: cfg.Quantity,
		Retries: cfg.Retries, CapSeconds: cfg.Duration.Seconds(), ExpectOversell: cfg.ExpectOversell,
	}
	if res.Label == "" {
		res.Label = r.sku
	}
	res.ExpectedOrders, res.ExpectedSold = cfg.Expected()
	res.Machine = machine(ctx, cfg.MySQLDSN, cfg.RedisAddr)

	for _, base := range cfg.URLs {
		if err := r.waitReady(ctx, base); err != nil {
			return nil, err
		}
	}
	before, err := r.setup(ctx)
	if err != nil {
		return nil, err
	}
	var db *mysqlCheck
	if cfg.MySQLDSN != "" {
		if db, err = openMySQL(ctx, cfg.MySQLDSN); err != nil {
			return nil, err
		}
		defer db.close()
		if err := db.baseline(ctx, r.sku); err != nil {
			return nil, err
		}
	}
	m0 := r.scrapeAll(ctx)
	r.logf("%s: sku=%s stock=%d buyers=%d x %d concurrency=%d over %d instance(s); expect sold=%d",
		res.Label, r.sku, cfg.Stock, cfg.Buyers, cfg.Quantity, cfg.Concurrency, len(cfg.URLs), res.ExpectedSold)

	buyers, attempts := r.buy(ctx, res)

	m1 := r.scrapeAll(ctx)
	res.Metrics = diffMetrics(cfg.URLs, m0, m1)
	summarise(res, cfg, buyers, attempts)

	after, err := r.audit(ctx, cfg.URLs[0])
	if err != nil {
		return nil, fmt.Errorf("driver: audit after the run: %w", err)
	}
	res.Audit = &after
	var acks []ack
	for _, b := range buyers {
		if b.ack != nil {
			acks = append(acks, *b.ack)
		}
	}
	verify(res, cfg, before, after, acks)
	if db != nil {
		st, err := db.verify(ctx, res, cfg, r.runID, acks, buyers)
		if err != nil {
			return nil, err
		}
		res.MySQL = st
	}
	decide(res)
	r.logf("%s: sold %d (want %d), oversold %d, lost updates %d, %.0f orders/s, p50 %.1fms p99 %.1fms, passed=%v",
		res.Label, res.Sold, res.ExpectedSold, res.Oversold, res.LostUpdates, res.OrdersPerSec, res.Latency.P50, res.Latency.P99, res.Passed)
	return res, nil
}

// waitReady polls base/readyz until it answers 200, for at most ReadyTimeout.
func (r *runner) waitReady(ctx context.Context, base string) error {
	deadline := time.Now().Add(r.cfg.ReadyTimeout)
	for {
		status, _, err := r.do(ctx, http.MethodGet, base+"/readyz", nil, nil)
		if err == nil && status == http.StatusOK {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("driver: %s/readyz not ready after %v: %w", base, r.cfg.ReadyTimeout, err)
			}
			return fmt.Errorf("driver: %s/readyz not ready after %v: status %d", base, r.cfg.ReadyTimeout, status)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// setup sets the stock, reads it back through every instance and returns the
// audit before the run (its baseline: a reused SKU keeps its old sales).
func (r *runner) setup(ctx context.Context) (Audit, error) {
	path := "/v1/admin/stock/" + url.PathEscape(r.sku)
	body, _ := json.Marshal(map[string]int64{"available": r.cfg.Stock, "per_buyer_limit": r.cfg.PerBuyerLimit})
	status, out, err := r.do(ctx, http.MethodPut, r.cfg.URLs[0]+path, body, r.adminHeaders())
	if err != nil {
		return Audit{}, fmt.Errorf("driver: PUT %s: %w", path, err)
	}
	if status != http.StatusOK {
		return Audit{}, fmt.Errorf("driver: PUT %s: status %d, want 200: %s", path, status, clip(out))
	}
	var first *stockBody
	for _, base := range r.cfg.URLs {
		var s stockBody
		status, out, err := r.do(ctx, http.MethodGet, base+"/v1/stock/"+url.PathEscape(r.sku), nil, nil)
		if err == nil && status == http.StatusOK {
			err = json.Unmarshal(out, &s)
		}
		if err != nil {
			return Audit{}, fmt.Errorf("driver: GET %s/v1/stock/%s: %w", base, r.sku, err)
		}
		if status != http.StatusOK {
			return Audit{}, fmt.Errorf("driver: GET %s/v1/stock/%s: status %d: %s", base, r.sku, status, clip(out))
		}
		if s.Available != r.cfg.Stock {
			return Audit{}, fmt.Errorf("driver: GET %s/v1/stock/%s: available %d, want %d", base, r.sku, s.Available, r.cfg.Stock)
		}
		if first == nil {
			first = &s
		} else if s.Sold != first.Sold || s.Version != first.Version {
			return Audit{}, fmt.Errorf("driver: GET %s/v1/stock/%s: sold/version %d/%d, %s says %d/%d",
				base, r.sku, s.Sold, s.Version, r.cfg.URLs[0], first.Sold, first.Version)
		}
	}
	a, err := r.audit(ctx, r.cfg.URLs[0])
	if err != nil {
		return Audit{}, err
	}
	if !a.Consistent {
		return Audit{}, fmt.Errorf("driver: audit of %s inconsistent before the run: %v", r.sku, a.Problems)
	}
	return a, nil
}

func (r *runner) audit(ctx context.Context, base string) (Audit, error) {
	var a Audit
	status, out, err := r.do(ctx, http.MethodGet, base+"/v1/admin/stock/"+url.PathEscape(r.sku)+"/audit", nil, r.adminHeaders())
	if err == nil && status == http.StatusOK {
		err = json.Unmarshal(out, &a)
	}
	if err != nil {
		return Audit{}, fmt.Errorf("driver: audit of %s at %s: %w", r.sku, base, err)
	}
	if status != http.StatusOK {
		return Audit{}, fmt.Errorf("driver: audit of %s at %s: status %d: %s", r.sku, base, status, clip(out))
	}
	return a, nil
}

func (r *runner) adminHeaders() http.Header {
	return http.Header{"Authorization": {"Bearer " + r.cfg.AdminToken}}
}

// do sends one request and reads the whole answer.
func (r *runner) do(ctx context.Context, method, u string, body []byte, h http.Header) (int, []byte, error) {
	resp, _, err := r.send(ctx, method, u, body, h)
	if err != nil {
		return 0, nil, err
	}
	return resp.status, resp.body, nil
}

type answer struct {
	status     int
	body       []byte
	retryAfter string
}

// problem is the kind of a problem details answer (the last segment of its
// type URI), or "".
func (a answer) problem() string {
	if a.status < 400 || len(a.body) == 0 || a.body[0] != '{' {
		return ""
	}
	var p struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(a.body, &p) != nil || p.Type == "" {
		return ""
	}
	return p.Type[strings.LastIndexByte(p.Type, '/')+1:]
}

func (r *runner) send(ctx context.Context, method, u string, body []byte, h http.Header) (answer, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return answer{}, 0, err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	t0 := time.Now()
	resp, err := r.client.Do(req)
	if err != nil {
		return answer{}, time.Since(t0), err
	}
	defer func() { _ = resp.Body.Close() }()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	d := time.Since(t0)
	if err != nil {
		return answer{}, d, err
	}
	return answer{status: resp.StatusCode, body: out, retryAfter: resp.Header.Get("Retry-After")}, d, nil
}

// buy runs every buyer, each crowd with its own workers, and returns each
// buyer's outcome and every request.
func (r *runner) buy(ctx context.Context, res *Result) ([]buyer, []attempt) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Duration)
	defer cancel()
	payload, _ := json.Marshal(map[string]any{"sku": r.sku, "quantity": r.cfg.Quantity})
	buyers := make([]buyer, r.cfg.Buyers)
	perWorker := make([][]attempt, r.cfg.Concurrency)
	crowds := r.cfg.crowds()
	nexts := make([]atomic.Int64, len(crowds))
	var wg sync.WaitGroup
	r.start = time.Now()
	res.Started = r.start
	w, first := 0, 0
	for k, cr := range crowds {
		lo := first // the crowd's first buyer
		for range cr.Concurrency {
			log := &perWorker[w]
			w++
			wg.Go(func() {
				for {
					j := int(nexts[k].Add(1) - 1)
					if j >= cr.Buyers || ctx.Err() != nil {
						return
					}
					if cr.Rate > 0 && !r.sleepUntil(ctx, time.Duration(float64(j)/cr.Rate*float64(time.Second))) {
						return // the cap came first: not started
					}
					i := lo + j
					buyers[i].last = "aborted" // started; replaced by its outcome
					if ctx.Err() != nil {
						return
					}
					buyers[i] = r.buyer(ctx, i, cr.Retries, payload, log)
				}
			})
		}
		first += cr.Buyers
	}
	wg.Wait()
	res.Seconds = time.Since(r.start).Seconds()
	res.Aborted = ctx.Err() != nil
	var all []attempt
	for _, a := range perWorker {
		all = append(all, a...)
	}
	return buyers, all
}

// sleepUntil waits until offset into the buying phase; false if ctx ended first.
func (r *runner) sleepUntil(ctx context.Context, offset time.Duration) bool {
	d := time.Until(r.start.Add(offset))
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// buyer places one order under one key, retrying (at most retries times)
// with that key while the answer is "not now" (429, 502, 503, 504 or none).
func (r *runner) buyer(ctx context.Context, i, retries int, payload []byte, log *[]attempt) buyer {
	u := i % len(r.cfg.URLs)
	key := keyOf(r.runID, i)
	h := http.Header{"Idempotency-Key": {key}}
	if r.cfg.JWTSecret != "" {
		tok, err := auth.Mint([]byte(r.cfg.JWTSecret), r.cfg.BuyerID(r.runID, i), time.Hour, "", "")
		if err != nil {
			return buyer{last: "token: " + err.Error()}
		}
		h.Set("Authorization", "Bearer "+tok)
	}
	if r.cfg.ClientIP != nil {
		if ip := r.cfg.ClientIP(i); ip != "" {
			h.Set("X-Forwarded-For", ip)
		}
	}
	var b buyer
	for try := 0; ; try++ {
		base := r.cfg.URLs[u]
		sent := time.Now()
		ans, d, err := r.send(ctx, http.MethodPost, base+"/v1/orders", payload, h)
		if err != nil && ctx.Err() != nil {
			// The duration cap, not the server: neither an answer nor a latency.
			b.last, b.answered, b.limited = "aborted", false, false
			return b
		}
		status, problem := "no-response", ""
		if err == nil {
			status, problem = strconv.Itoa(ans.status), ans.problem()
		}
		*log = append(*log, attempt{buyer: i, at: time.Since(r.start), latency: d, status: status, problem: problem})
		if r.cfg.Observe != nil {
			r.cfg.Observe(Event{Buyer: i, Try: try, URL: base, Sent: sent, At: sent.Add(d), Status: status, Problem: problem})
		}
		if r.cfg.Failover && (err != nil || ans.status == http.StatusBadGateway ||
			ans.status == http.StatusServiceUnavailable || ans.status == http.StatusGatewayTimeout) {
			u = (u + 1) % len(r.cfg.URLs)
		}
		b.last, b.answered = status, err == nil
		b.limited = err == nil && rateLimited(ans.status, problem)
		switch {
		case err != nil:
		case ans.status == http.StatusCreated || ans.status == http.StatusOK:
			var o orderBody
			_ = json.Unmarshal(ans.body, &o)
			b.ack = &ack{buyer: i, status: ans.status, order: o}
			return b
		case ans.status == http.StatusTooManyRequests, ans.status == http.StatusBadGateway,
			ans.status == http.StatusServiceUnavailable, ans.status == http.StatusGatewayTimeout:
		default: // 409 sold out, or a 4xx that will not change
			return b
		}
		if try >= retries {
			return b
		}
		t := time.NewTimer(backoff(ans.retryAfter, try))
		select {
		case <-ctx.Done():
			t.Stop()
			return b
		case <-t.C:
		}
	}
}

// ProblemRateLimited is the problem kind of a 429 from the per-client-IP
// rate limit; any other 429 (the SKU's line is full: "busy") counts as busy.
const ProblemRateLimited = "rate-limited"

func rateLimited(status int, problem string) bool {
	return status == http.StatusTooManyRequests && problem == ProblemRateLimited
}

// backoff is the pause before retry number try+1: Retry-After when it is
// given in seconds, else 50ms doubling, capped at 5s, with +-50% jitter.
func backoff(retryAfter string, try int) time.Duration {
	base := 0.05 * math.Pow(2, float64(try))
	if s, err := strconv.ParseFloat(retryAfter, 64); err == nil && s >= 0 {
		base = s
	}
	return time.Duration(min(base, 5) * (0.5 + mrand.Float64()) * float64(time.Second)) //nolint:gosec // G404: jitter, not a secret
}

// summarise fills the counts, rates, latencies and timeline, of the run
// and of each crowd.
func summarise(res *Result, cfg Config, buyers []buyer, attempts []attempt) {
	res.Statuses = map[string]int{}
	res.Outcomes = map[string]int{}
	res.Problems = map[string]int{}
	res.Requests = len(attempts)
	var last time.Duration
	n := int(math.Ceil(res.Seconds*float64(time.Second)/float64(BucketWidth))) + 1
	res.Timeline = Timeline{BucketMS: int(BucketWidth / time.Millisecond), Created: make([]int, n), Requests: make([]int, n)}
	for _, a := range attempts {
		if a.problem != "" {
			res.Problems[a.problem]++
		}
		bi := min(int(a.at/BucketWidth), n-1)
		res.Timeline.Requests[bi]++
		if a.status == "201" {
			res.Timeline.Created[bi]++
			last = max(last, a.at)
		}
	}
	all := tallyOf(attempts, buyers, func(int) bool { return true })
	res.BuyersRun = all.buyersRun
	res.Statuses, res.Outcomes, res.RateLimited, res.Busy = all.statuses, all.outcomes, all.rateLimited, all.busy
	res.RateLimitedBuyers, res.Created, res.Replayed, res.Latency = all.limitedBuyers, all.created, all.replayed, all.latency
	res.LastOrderSeconds = last.Seconds()
	if res.Seconds > 0 {
		res.OrdersPerSec = float64(res.Created) / res.Seconds
		res.RequestsPerSec = float64(res.Requests) / res.Seconds
	}
	if len(cfg.Crowds) == 0 {
		return
	}
	first := 0
	for _, cr := range cfg.Crowds {
		lo, hi := first, first+cr.Buyers
		first = hi
		t := tallyOf(attempts, buyers[lo:hi], func(i int) bool { return i >= lo && i < hi })
		res.Crowds = append(res.Crowds, CrowdResult{
			Name: cr.Name, FirstBuyer: lo, Buyers: cr.Buyers, Concurrency: cr.Concurrency, Retries: cr.Retries, Rate: cr.Rate,
			BuyersRun: t.buyersRun, Requests: t.requests, Statuses: t.statuses, Outcomes: t.outcomes,
			RateLimited: t.rateLimited, Busy: t.busy, RateLimitedBuyers: t.limitedBuyers,
			Created: t.created, Replayed: t.replayed, Latency: t.latency,
			FirstSent: t.firstSent.Seconds(), LastAnswer: t.lastAnswer.Seconds(),
		})
	}
}

// tally is the counts of some buyers and their requests.
type tally struct {
	requests, rateLimited, busy int
	buyersRun, limitedBuyers    int
	created, replayed           int
	statuses, outcomes          map[string]int
	latency                     Latency
	firstSent, lastAnswer       time.Duration
}

// tallyOf counts the attempts of the buyers that in selects, and those
// buyers that started (a buyer the duration cap kept from starting has no
// last status).
func tallyOf(attempts []attempt, buyers []buyer, in func(buyer int) bool) tally {
	t := tally{statuses: map[string]int{}, outcomes: map[string]int{}}
	lat := make([]time.Duration, 0, len(attempts))
	var sum time.Duration
	t.firstSent = -1
	for _, a := range attempts {
		if !in(a.buyer) {
			continue
		}
		t.requests++
		t.statuses[a.status]++
		if a.status == "429" {
			if a.problem == ProblemRateLimited {
				t.rateLimited++
			} else {
				t.busy++
			}
		}
		lat = append(lat, a.latency)
		sum += a.latency
		if sent := a.at - a.latency; t.firstSent < 0 || sent < t.firstSent {
			t.firstSent = sent
		}
		t.lastAnswer = max(t.lastAnswer, a.at)
	}
	t.firstSent = max(t.firstSent, 0)
	for i := range buyers {
		b := &buyers[i]
		if b.last == "" {
			continue
		}
		t.buyersRun++
		t.outcomes[b.last]++
		if b.limited {
			t.limitedBuyers++
		}
		if b.ack != nil {
			if b.ack.status == http.StatusCreated {
				t.created++
			} else {
				t.replayed++
			}
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	if len(lat) > 0 {
		t.latency = Latency{
			P50: ms(quantile(lat, .50)), P95: ms(quantile(lat, .95)), P99: ms(quantile(lat, .99)),
			Max: ms(lat[len(lat)-1]), Mean: ms(sum / time.Duration(len(lat))),
		}
	}
	return t
}

// quantile is the nearest-rank quantile of sorted durations.
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func clip(b []byte) string {
	if len(b) > 200 {
		b = b[:200]
	}
	return strings.TrimSpace(string(b))
}
