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
// invariants. Every request goes through the typed client (package client).
//
// The files follow the jobs: the load (driver.go's Run, buy.go,
// lifecycle.go, rate.go's MeasureRate), the verification from the audit
// and MySQL (verify.go, lifecycle_verify.go), and the figures (summary.go,
// metrics.go, result.go). Package loadtest/report prints, saves and
// charts the results.
//
// The driver only talks to loopback addresses, and every run is bounded in
// buyers, concurrency and time.
package driver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/seckill/stock/client"
)

// ack is an order a buyer was told about (201, or 200 for a replay).
type ack struct {
	buyer  int
	status int
	order  client.Order
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
	cfg   Config
	apis  []*client.Client // one per URL, without a token
	admin *client.Client   // the first URL's, with the admin token
	runID string
	sku   string
	start time.Time
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
	tr := newTransport(cfg.Concurrency)
	defer tr.CloseIdleConnections()
	r, err := newRunner(cfg, tr)
	if err != nil {
		return nil, err
	}
	res := r.newResult(ctx)
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
	r.logf("%s: sku=%s stock=%d buyers=%d x %d concurrency=%d over %d instance(s); expect sold=%d",
		res.Label, r.sku, cfg.Stock, cfg.Buyers, cfg.Quantity, cfg.Concurrency, len(cfg.URLs), res.ExpectedSold)
	buyers := r.load(ctx, res, db)
	if err := r.check(ctx, res, before, db, buyers); err != nil {
		return nil, err
	}
	r.logf("%s: sold %d (want %d), oversold %d, lost updates %d, %.0f orders/s, p50 %.1fms p99 %.1fms, passed=%v",
		res.Label, res.Sold, res.ExpectedSold, res.Oversold, res.LostUpdates, res.OrdersPerSec, res.Latency.P50, res.Latency.P99, res.Passed)
	return res, nil
}

// newRunner is a run of cfg over tr, with a fresh run id and (unless cfg
// names one) a fresh SKU.
func newRunner(cfg Config, tr http.RoundTripper) (*runner, error) {
	apis, err := newClients(cfg.URLs, tr, cfg.RequestTimeout)
	if err != nil {
		return nil, fmt.Errorf("driver: %w", err)
	}
	r := &runner{cfg: cfg, apis: apis, admin: apis[0].As(cfg.AdminToken), runID: NewRunID(), sku: cfg.SKU}
	if r.sku == "" {
		r.sku = "seckill-" + r.runID
	}
	return r, nil
}

// newResult is the run's result before anything ran: its config, what it
// expects and the machine.
func (r *runner) newResult(ctx context.Context) *Result {
	cfg := r.cfg
	res := &Result{
		Label: cfg.Label, SKU: r.sku, RunID: r.runID, URLs: cfg.URLs,
		Stock: cfg.Stock, Buyers: cfg.Buyers, Concurrency: cfg.Concurrency, Quantity: cfg.Quantity,
		Retries: cfg.Retries, CapSeconds: cfg.Duration.Seconds(), ExpectOversell: cfg.ExpectOversell,
		MySQLPerRequest: -1,
	}
	if res.Label == "" {
		res.Label = r.sku
	}
	res.ExpectedOrders, res.ExpectedSold = cfg.Expected()
	res.Machine = machine(ctx, cfg.MySQLDSN, cfg.RedisAddr)
	return res
}

// load runs the buying phase and summarises it in res, with the
// instances' metrics and MySQL's statements around it (db nil: not
// counted). It returns each buyer's outcome.
func (r *runner) load(ctx context.Context, res *Result, db *mysqlCheck) []buyer {
	var q0, q1 int64
	if db != nil {
		q0, _ = questions(ctx, db.db)
	}
	m0 := r.scrapeAll(ctx)
	buyers, attempts := r.buy(ctx, res)
	if db != nil {
		q1, _ = questions(ctx, db.db)
	}
	m1 := r.scrapeAll(ctx)
	res.Metrics = diffMetrics(r.cfg.URLs, m0, m1)
	summarise(res, r.cfg, buyers, attempts)
	if q0 > 0 && q1 > q0 && res.Requests > 0 {
		res.MySQLPerRequest = float64(q1-q0) / float64(res.Requests)
	}
	return buyers
}

// check verifies the run from the audit after it (against before's), the
// buyers' answers and, with db, MySQL's rows, and decides the result.
func (r *runner) check(ctx context.Context, res *Result, before Audit, db *mysqlCheck, buyers []buyer) error {
	after, err := r.audit(ctx)
	if err != nil {
		return fmt.Errorf("driver: audit after the run: %w", err)
	}
	res.Audit = &after
	var acks []ack
	for _, b := range buyers {
		if b.ack != nil {
			acks = append(acks, *b.ack)
		}
	}
	verify(res, r.cfg, before, after, acks)
	if db != nil {
		st, err := db.verify(ctx, res, r.cfg, r.runID, acks, buyers)
		if err != nil {
			return err
		}
		res.MySQL = st
	}
	decide(res)
	return nil
}

// waitReady polls every instance's /readyz until it answers 200, for at
// most ReadyTimeout each.
func (r *runner) waitReady(ctx context.Context) error {
	for _, c := range r.apis {
		if err := waitReady(ctx, c, r.cfg.ReadyTimeout); err != nil {
			return err
		}
	}
	return nil
}

// waitReady polls c's /readyz until it answers 200, for at most timeout.
func waitReady(ctx context.Context, c *client.Client, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := c.Readyz(ctx)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("driver: %s/readyz not ready after %v: %w", c.BaseURL(), timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// setup waits for every instance, sets the stock, reads it back through
// every instance and returns the audit before the run (its baseline: a
// reused SKU keeps its old sales).
func (r *runner) setup(ctx context.Context) (Audit, error) {
	if err := r.waitReady(ctx); err != nil {
		return Audit{}, err
	}
	set := client.StockSetting{Available: r.cfg.Stock, PerBuyerLimit: r.cfg.PerBuyerLimit}
	if _, err := r.admin.SetStock(ctx, r.sku, set); err != nil {
		return Audit{}, fmt.Errorf("driver: set the stock of %s: %w", r.sku, err)
	}
	if err := r.readBack(ctx); err != nil {
		return Audit{}, err
	}
	a, err := r.audit(ctx)
	if err != nil {
		return Audit{}, err
	}
	if !a.Consistent {
		return Audit{}, fmt.Errorf("driver: audit of %s inconsistent before the run: %v", r.sku, a.Problems)
	}
	return a, nil
}

// readBack reads the stock through every instance: each must show the
// stock set, and the same sold and version.
func (r *runner) readBack(ctx context.Context) error {
	var first *client.Stock
	for _, c := range r.apis {
		s, err := c.Stock(ctx, r.sku)
		if err != nil {
			return fmt.Errorf("driver: stock of %s at %s: %w", r.sku, c.BaseURL(), err)
		}
		if s.Available != r.cfg.Stock {
			return fmt.Errorf("driver: stock of %s at %s: available %d, want %d", r.sku, c.BaseURL(), s.Available, r.cfg.Stock)
		}
		if first == nil {
			first = &s
		} else if s.Sold != first.Sold || s.Version != first.Version {
			return fmt.Errorf("driver: stock of %s at %s: sold/version %d/%d, %s says %d/%d",
				r.sku, c.BaseURL(), s.Sold, s.Version, r.cfg.URLs[0], first.Sold, first.Version)
		}
	}
	return nil
}

// audit is the SKU's audit, from the first instance.
func (r *runner) audit(ctx context.Context) (Audit, error) {
	a, err := r.admin.Audit(ctx, r.sku)
	if err != nil {
		return Audit{}, fmt.Errorf("driver: audit of %s at %s: %w", r.sku, r.admin.BaseURL(), err)
	}
	return a, nil
}
