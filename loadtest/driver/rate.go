package driver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill/stock/client"
)

// RateConfig is a closed-loop rate measurement of one kind of request: a
// fixed number of workers send it back to back, round-robin over the URLs,
// for Duration after Warmup. It is the ceiling the strategies' orders/s are
// compared with (GET /healthz, GET /v1/stock), and the sold-out flood.
type RateConfig struct {
	Name string
	URLs []string
	// Method and Path name the request Send sends, for the report.
	Method string // default GET
	Path   string
	// Send sends the i-th request through c (the client of one of the
	// URLs, without a token) and returns the status its 2xx answer has; a
	// *client.Problem counts as its status, any other error as a
	// transport error.
	Send func(ctx context.Context, c *client.Client, i int64) (int, error)
	// ClientIP, if set, is the address the i-th request claims to come
	// from (X-Forwarded-For).
	ClientIP    func(i int64) string
	Want        int           // the status that counts as answered (default 200)
	Concurrency int           // default 240
	Duration    time.Duration // measured, default 5s
	Warmup      time.Duration // before measuring, default 1s
	MySQLDSN    string        // if set, MySQL statements per request are counted
	Timeout     time.Duration // per request, default 10s
}

// RateResult is what a rate measurement saw in its measured window.
type RateResult struct {
	Name        string           `json:"name"`
	Method      string           `json:"method"`
	Path        string           `json:"path"`
	Concurrency int              `json:"concurrency"`
	Seconds     float64          `json:"seconds"`
	Requests    int64            `json:"requests"`
	Answered    int64            `json:"answered"` // with the wanted status
	PerSec      float64          `json:"per_sec"`  // answered per second
	Statuses    map[string]int64 `json:"statuses"`
	Errors      int64            `json:"errors"` // transport errors
	Latency     Latency          `json:"latency"`
	// MySQLPerRequest is MySQL's statement count (Questions) over the
	// window per request; -1 when not measured. The server counts every
	// client's statements, so it is exact only when nothing else runs.
	MySQLPerRequest float64 `json:"mysql_statements_per_request"`
}

// MeasureRate runs cfg and reports the measured window.
func MeasureRate(ctx context.Context, cfg RateConfig) (RateResult, error) {
	if len(cfg.URLs) == 0 || cfg.Path == "" || cfg.Send == nil {
		return RateResult{}, errors.New("driver: rate: URLs, Path and Send are required")
	}
	cfg = cfg.withDefaults()
	tr := newTransport(cfg.Concurrency)
	defer tr.CloseIdleConnections()
	apis, err := newClients(cfg.URLs, tr, cfg.Timeout)
	if err != nil {
		return RateResult{}, fmt.Errorf("driver: rate: %w", err)
	}
	var db *sql.DB
	if cfg.MySQLDSN != "" {
		if db, err = sql.Open("mysql", cfg.MySQLDSN); err != nil {
			return RateResult{}, err
		}
		defer func() { _ = db.Close() }()
		db.SetMaxOpenConns(1)
	}

	t := &rateTally{statuses: map[string]int64{}}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for w := range cfg.Concurrency {
		wg.Go(func() { t.work(wctx, apis, cfg, w) })
	}
	res := RateResult{Name: cfg.Name, Method: cfg.Method, Path: cfg.Path, Concurrency: cfg.Concurrency, MySQLPerRequest: -1}
	elapsed, q, err := t.window(ctx, db, cfg)
	cancel()
	wg.Wait()
	if err != nil {
		return res, err
	}
	t.summarize(&res, elapsed, q, cfg.Want)
	return res, nil
}

// withDefaults is cfg with every unset field at its default.
func (cfg RateConfig) withDefaults() RateConfig {
	if cfg.Method == "" {
		cfg.Method = http.MethodGet
	}
	if cfg.Want == 0 {
		cfg.Want = http.StatusOK
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 240
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 5 * time.Second
	}
	if cfg.Warmup < 0 {
		cfg.Warmup = 0
	} else if cfg.Warmup == 0 {
		cfg.Warmup = time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	return cfg
}

// rateTally is what MeasureRate's workers count inside the window.
type rateTally struct {
	next      atomic.Int64
	measuring atomic.Bool
	mu        sync.Mutex
	lat       []time.Duration
	statuses  map[string]int64
	errs      int64
}

// work is worker w: it sends cfg's requests until ctx ends, counting the
// answers and latencies of those sent and answered inside the window.
func (t *rateTally) work(ctx context.Context, apis []*client.Client, cfg RateConfig, w int) {
	var mine []time.Duration
	st := map[int]int64{}
	var e int64
	for ctx.Err() == nil {
		i := t.next.Add(1) - 1
		rctx := ctx
		if cfg.ClientIP != nil {
			rctx = withClientIP(ctx, cfg.ClientIP(i))
		}
		on := t.measuring.Load()
		t0 := time.Now()
		a, answered := answerOf(cfg.Send(rctx, apis[(int(i)+w)%len(apis)], i))
		switch {
		case !on || !t.measuring.Load(): // warm-up, or the window closed meanwhile
		case !answered:
			if ctx.Err() == nil {
				e++
			}
		default:
			st[a.status]++
			mine = append(mine, time.Since(t0))
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lat = append(t.lat, mine...)
	for k, v := range st {
		t.statuses[strconv.Itoa(k)] += v
	}
	t.errs += e
}

// window waits out the warm-up, then opens the measured window for
// cfg.Duration. It returns the window's length and MySQL's statements in
// it (-1: not measured), or ctx's error.
func (t *rateTally) window(ctx context.Context, db *sql.DB, cfg RateConfig) (time.Duration, int64, error) {
	sleep := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	if !sleep(cfg.Warmup) {
		return 0, -1, ctx.Err()
	}
	q0, qerr := questions(ctx, db)
	t.measuring.Store(true)
	start := time.Now()
	ok := sleep(cfg.Duration)
	t.measuring.Store(false)
	elapsed := time.Since(start)
	q1, qerr1 := questions(ctx, db)
	if !ok {
		return 0, -1, ctx.Err()
	}
	q := int64(-1) // not measured: no DSN, or a count not read
	if db != nil && qerr == nil && qerr1 == nil {
		q = q1 - q0 - 1 // less our own SHOW
	}
	return elapsed, q, nil
}

// summarize fills res from the tally of a window of elapsed with q MySQL
// statements (-1: not measured); want is the status counted as answered.
func (t *rateTally) summarize(res *RateResult, elapsed time.Duration, q int64, want int) {
	res.Seconds = elapsed.Seconds()
	res.Statuses = t.statuses
	res.Errors = t.errs
	for _, n := range t.statuses {
		res.Requests += n
	}
	res.Answered = t.statuses[strconv.Itoa(want)]
	res.PerSec = float64(res.Answered) / res.Seconds
	if q >= 0 && res.Requests > 0 {
		res.MySQLPerRequest = float64(q) / float64(res.Requests)
	}
	lat := t.lat
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) > 0 {
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		var sum time.Duration
		for _, d := range lat {
			sum += d
		}
		res.Latency = Latency{P50: ms(quantile(lat, .50)), P95: ms(quantile(lat, .95)), P99: ms(quantile(lat, .99)),
			Max: ms(lat[len(lat)-1]), Mean: ms(sum / time.Duration(len(lat)))}
	}
}

// questions is MySQL's count of statements from every client.
func questions(ctx context.Context, db *sql.DB) (int64, error) {
	if db == nil {
		return 0, nil
	}
	var name string
	var n int64
	err := db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &n)
	return n, err
}

// String is the rate's line in a table.
func (r RateResult) String() string {
	mysql := "-"
	if r.MySQLPerRequest >= 0 {
		mysql = fmt.Sprintf("%.3f", r.MySQLPerRequest)
	}
	return fmt.Sprintf("%-28s %9.0f/s  p50 %6.1f ms  p99 %6.1f ms  %d requests %v, %d errors, MySQL statements/request %s",
		r.Name, r.PerSec, r.Latency.P50, r.Latency.P99, r.Requests, r.Statuses, r.Errors, mysql)
}
