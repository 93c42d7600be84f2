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
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill/stock/internal/auth"
	"github.com/seckill/stock/internal/service"
)

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
	res.MySQLPerRequest = -1
	var q0 int64
	if db != nil {
		q0, _ = questions(ctx, db.db)
	}
	m0 := r.scrapeAll(ctx)
	r.logf("%s: sku=%s stock=%d buyers=%d x %d concurrency=%d over %d instance(s); expect sold=%d",
		res.Label, r.sku, cfg.Stock, cfg.Buyers, cfg.Quantity, cfg.Concurrency, len(cfg.URLs), res.ExpectedSold)

	buyers, attempts := r.buy(ctx, res)
	var q1 int64
	if db != nil {
		q1, _ = questions(ctx, db.db)
	}

	m1 := r.scrapeAll(ctx)
	res.Metrics = diffMetrics(cfg.URLs, m0, m1)
	summarise(res, cfg, buyers, attempts)
	if q0 > 0 && q1 > q0 && res.Requests > 0 {
		res.MySQLPerRequest = float64(q1-q0) / float64(res.Requests)
	}

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
