package driver

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// RateConfig is a closed-loop rate measurement of one kind of request: a
// fixed number of workers send it back to back, round-robin over the URLs,
// for Duration after Warmup. It is the ceiling the strategies' orders/s are
// compared with (GET /healthz, GET /v1/stock), and the sold-out flood.
type RateConfig struct {
	Name        string
	URLs        []string
	Method      string // default GET
	Path        string
	Body        func(i int64) []byte         // the i-th request's body; nil: none
	Header      func(i int64, h http.Header) // sets the i-th request's headers; nil: none
	Want        int                          // the status that counts as answered (default 200)
	Concurrency int                          // default 240
	Duration    time.Duration                // measured, default 5s
	Warmup      time.Duration                // before measuring, default 1s
	MySQLDSN    string                       // if set, MySQL statements per request are counted
	Timeout     time.Duration                // per request, default 10s
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
	if len(cfg.URLs) == 0 || cfg.Path == "" {
		return RateResult{}, errors.New("driver: rate: URLs and Path are required")
	}
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
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        2 * cfg.Concurrency,
		MaxIdleConnsPerHost: cfg.Concurrency,
		IdleConnTimeout:     60 * time.Second,
		DisableCompression:  true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: cfg.Timeout}

	var db *sql.DB
	if cfg.MySQLDSN != "" {
		var err error
		if db, err = sql.Open("mysql", cfg.MySQLDSN); err != nil {
			return RateResult{}, err
		}
		defer func() { _ = db.Close() }()
		db.SetMaxOpenConns(1)
	}

	var (
		next      atomic.Int64
		measuring atomic.Bool
		mu        sync.Mutex
		lat       []time.Duration
		statuses  = map[string]int64{}
		errs      int64
	)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for w := range cfg.Concurrency {
		wg.Go(func() {
			var mine []time.Duration
			st := map[int]int64{}
			var e int64
			for wctx.Err() == nil {
				i := next.Add(1) - 1
				url := cfg.URLs[(int(i)+w)%len(cfg.URLs)] + cfg.Path
				var body io.Reader
				if cfg.Body != nil {
					body = bytes.NewReader(cfg.Body(i))
				}
				req, err := http.NewRequestWithContext(wctx, cfg.Method, url, body)
				if err != nil {
					e++
					continue
				}
				if cfg.Header != nil {
					cfg.Header(i, req.Header)
				}
				on := measuring.Load()
				t0 := time.Now()
				resp, err := client.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
				if !on || !measuring.Load() {
					continue // warm-up, or the window closed meanwhile
				}
				if err != nil {
					if wctx.Err() == nil {
						e++
					}
					continue
				}
				st[resp.StatusCode]++
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			for k, v := range st {
				statuses[strconv.Itoa(k)] += v
			}
			errs += e
			mu.Unlock()
		})
	}

	res := RateResult{Name: cfg.Name, Method: cfg.Method, Path: cfg.Path, Concurrency: cfg.Concurrency, MySQLPerRequest: -1}
	sleep := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	if !sleep(cfg.Warmup) {
		cancel()
		wg.Wait()
		return res, ctx.Err()
	}
	q0, qerr := questions(ctx, db)
	measuring.Store(true)
	start := time.Now()
	ok := sleep(cfg.Duration)
	measuring.Store(false)
	elapsed := time.Since(start)
	q1, qerr1 := questions(ctx, db)
	cancel()
	wg.Wait()
	if !ok {
		return res, ctx.Err()
	}

	res.Seconds = elapsed.Seconds()
	res.Statuses = statuses
	res.Errors = errs
	for _, n := range statuses {
		res.Requests += n
	}
	res.Answered = statuses[strconv.Itoa(cfg.Want)]
	res.PerSec = float64(res.Answered) / res.Seconds
	if db != nil && qerr == nil && qerr1 == nil && res.Requests > 0 {
		res.MySQLPerRequest = float64(q1-q0-1) / float64(res.Requests) // less our own SHOW
	}
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
	return res, nil
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
