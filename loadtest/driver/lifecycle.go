package driver

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/seckill/stock/client"
	"github.com/seckill/stock/internal/auth"
)

// The lifecycle scenario: buyers keep arriving for one SKU sold under a
// payment window; of the winners, every third never pays (its reservation
// expires), every tenth cancels, and the rest confirm, early or late (some
// after their deadline, racing it). Returned units are sold again to later
// buyers. Afterwards MySQL's rows must account for every unit, and every
// answer a client got must agree with them.

// LifecycleConfig is one run of the lifecycle scenario.
type LifecycleConfig struct {
	URLs          []string // base URLs of the instances, loopback only
	AdminToken    string
	PaymentToken  string // confirms are sent with it
	JWTSecret     string
	Stock         int64
	PerBuyerLimit int64
	Window        int           // the SKU's payment window, seconds (>= 1)
	Rate          float64       // buyers arriving per second
	Duration      time.Duration // how long buyers keep arriving
	Concurrency   int           // orders in flight at most
	// AllConfirm makes every winner confirm at once: no returns (the
	// control run that prices the returns).
	AllConfirm     bool
	MySQLDSN       string // required: the proof reads MySQL's rows
	ExpectOversell bool   // the run passes only if the checks catch an oversell
	// Reported marks an unsafe control run whose broken checks are the
	// finding: they are reported and do not fail the report.
	Reported bool
	Label    string
	Log      func(format string, args ...any) // progress lines; nil: none
	// Observe, if set, sees every answer (op "order", "confirm" or
	// "cancel"), from the buyers' goroutines: fault runs time recoveries
	// with it.
	Observe func(op string, code int, at time.Time)
}

// LifecycleResult is what one lifecycle run measured and proved.
type LifecycleResult struct {
	Label          string           `json:"label"`
	SKU            string           `json:"sku"`
	Stock          int64            `json:"stock"`
	Window         int              `json:"window_seconds"`
	Seconds        float64          `json:"seconds"` // the arrival phase
	Buyers         int              `json:"buyers"`
	Orders         int              `json:"orders"`   // 201s
	Confirms       int              `json:"confirms"` // confirms answered 200
	Cancels        int              `json:"cancels"`  // cancels answered 200
	LateConfirms   int              `json:"late_confirms"`
	OrdersPerSec   float64          `json:"orders_per_sec"`
	ConfirmsPerSec float64          `json:"confirms_per_sec"`
	OrderP50       float64          `json:"order_p50_ms"` // of the 201s
	OrderP99       float64          `json:"order_p99_ms"`
	UnitsReturned  int64            `json:"units_returned"`
	AvailableEnd   int64            `json:"available_end"`
	ByStatus       map[string]int64 `json:"by_status"`
	MaxSweepLag    float64          `json:"max_sweep_lag_seconds"` // oldest overdue reservation seen, polled
	ExpectOversell bool             `json:"expect_oversell"`
	Reported       bool             `json:"reported,omitempty"`
	Checks         []Check          `json:"checks"`
	Passed         bool             `json:"passed"`
}

// lifeAnswer is one answer about an order: its op, status and problem kind
// or the order's status in a 200.
type lifeAnswer struct {
	op, kind string
	code     int
}

type lifeRun struct {
	cfg     LifecycleConfig
	r       *runner
	sku     string
	mu      sync.Mutex
	answers map[int64][]lifeAnswer // by order id
	res     *LifecycleResult
	lat     []time.Duration // of the 201s
}

// RunLifecycle runs the lifecycle scenario. It returns an error only when
// it could not run (an instance not ready, setup refused, MySQL
// unreachable); broken invariants are failed checks.
func RunLifecycle(ctx context.Context, cfg LifecycleConfig) (*LifecycleResult, error) {
	if cfg.Window < 1 || cfg.Rate <= 0 || cfg.Concurrency < 1 || cfg.MySQLDSN == "" || len(cfg.URLs) == 0 {
		return nil, fmt.Errorf("driver: lifecycle: window, rate, concurrency, MySQL DSN and URLs are required")
	}
	for _, raw := range cfg.URLs {
		if u, err := url.Parse(raw); err != nil || !loopback(u.Hostname()) {
			return nil, fmt.Errorf("driver: lifecycle: %q is not a loopback URL", raw)
		}
	}
	tr := newTransport(2 * cfg.Concurrency)
	defer tr.CloseIdleConnections()
	r, err := newRunner(Config{URLs: cfg.URLs, AdminToken: cfg.AdminToken, ReadyTimeout: 30 * time.Second, RequestTimeout: 10 * time.Second}, tr)
	if err != nil {
		return nil, err
	}
	run := &lifeRun{cfg: cfg, answers: map[int64][]lifeAnswer{}, r: r}
	run.sku = "life-" + r.runID
	r.sku = run.sku
	run.res = &LifecycleResult{Label: cfg.Label, SKU: run.sku, Stock: cfg.Stock, Window: cfg.Window, ExpectOversell: cfg.ExpectOversell,
		Reported: cfg.Reported}
	if err := run.setup(ctx); err != nil {
		return nil, err
	}
	db, err := openMySQL(ctx, cfg.MySQLDSN)
	if err != nil {
		return nil, err
	}
	defer db.close()
	run.arrive(ctx, db)
	if err := run.verify(ctx, db); err != nil {
		return nil, err
	}
	return run.res, nil
}

func (l *lifeRun) logf(format string, args ...any) {
	if l.cfg.Log != nil {
		l.cfg.Log(format, args...)
	}
}

// setup waits for every instance and sets the stock, limit and window.
func (l *lifeRun) setup(ctx context.Context) error {
	if err := l.r.waitReady(ctx); err != nil {
		return err
	}
	set := client.StockSetting{Available: l.cfg.Stock, PerBuyerLimit: l.cfg.PerBuyerLimit, PaymentWindowSeconds: int64(l.cfg.Window)}
	if _, err := l.r.admin.SetStock(ctx, l.sku, set); err != nil {
		return fmt.Errorf("driver: lifecycle: set the stock: %w", err)
	}
	return nil
}

// arrive runs the buyers for the duration, paced at the rate, and waits
// for their confirms and cancels, and for the sweepers to end every
// reservation; it polls the sweepers' lag meanwhile.
func (l *lifeRun) arrive(ctx context.Context, db *mysqlCheck) {
	start := time.Now()
	end := start.Add(l.cfg.Duration)
	pollCtx, stopPoll := context.WithCancel(ctx)
	polled := make(chan struct{})
	go func() { defer close(polled); l.pollLag(pollCtx, db) }()
	slots := make(chan struct{}, l.cfg.Concurrency)
	var buyers, fates sync.WaitGroup
	for j := 0; ; j++ {
		at := start.Add(time.Duration(float64(j) / l.cfg.Rate * float64(time.Second)))
		if at.After(end) || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Until(at))
		slots <- struct{}{}
		buyers.Go(func() {
			defer func() { <-slots }()
			l.buyer(ctx, j, &fates)
		})
	}
	buyers.Wait()
	l.res.Seconds = time.Since(start).Seconds()
	fates.Wait()
	l.waitSwept(ctx, db)
	stopPoll()
	<-polled
}

// buyer places buyer j's order and, if it got one, sends its fate.
func (l *lifeRun) buyer(ctx context.Context, j int, fates *sync.WaitGroup) {
	tok, _ := auth.Mint([]byte(l.cfg.JWTSecret), l.r.runID+"-b"+strconv.Itoa(j), time.Hour, "", "")
	key := l.r.runID + "-" + strconv.Itoa(j)
	l.mu.Lock()
	l.res.Buyers++
	l.mu.Unlock()
	for try := range 6 {
		t0 := time.Now()
		o, err := l.r.apis[(j+try)%len(l.cfg.URLs)].As(tok).Place(ctx, key, l.sku, 1)
		d := time.Since(t0)
		a, answered := answerOf(PlacedStatus(o), err)
		if err == nil {
			l.record(o.ID, "order", a.status, o.Status, d)
			if o.Status == client.StatusReserved {
				fates.Go(func() { l.fate(ctx, j, o.ID, tok) })
			}
			return
		}
		if answered && a.status != http.StatusTooManyRequests && a.status != http.StatusServiceUnavailable {
			return // sold out, or refused: this buyer is done
		}
		time.Sleep(backoff(a.retryAfter, try))
	}
}

// fate is what winner j does: never pay (every third), cancel (every
// tenth), or confirm, early or up to a quarter of the window late.
func (l *lifeRun) fate(ctx context.Context, j int, id int64, buyerToken string) {
	w := time.Duration(l.cfg.Window) * time.Second
	op, wait := "confirm", time.Duration(mrand.Int64N(int64(w*5/4))) //nolint:gosec // G404: a buyer's whim, not a secret
	switch {
	case l.cfg.AllConfirm:
		wait = 0
	case j%3 == 0:
		return
	case j%10 == 1:
		op, wait = "cancel", time.Duration(mrand.Int64N(int64(w/2))) //nolint:gosec // G404: a buyer's whim, not a secret
	}
	time.Sleep(wait)
	c := l.r.apis[j%len(l.cfg.URLs)]
	send := func() (client.Order, error) { return c.As(l.cfg.PaymentToken).Confirm(ctx, id, "") }
	if op == "cancel" {
		send = func() (client.Order, error) { return c.As(buyerToken).Cancel(ctx, id) }
	}
	for try := range 6 {
		t0 := time.Now()
		o, err := send()
		d := time.Since(t0)
		a, answered := answerOf(http.StatusOK, err)
		if answered && a.status != http.StatusTooManyRequests && a.status != http.StatusServiceUnavailable {
			l.record(id, op, a.status, o.Status+a.problem, d)
			return
		}
		time.Sleep(backoff(a.retryAfter, try))
	}
}

// record notes one answer about order id.
func (l *lifeRun) record(id int64, op string, code int, kind string, d time.Duration) {
	if l.cfg.Observe != nil {
		l.cfg.Observe(op, code, time.Now())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.answers[id] = append(l.answers[id], lifeAnswer{op: op, code: code, kind: kind})
	switch {
	case op == "order" && code == http.StatusCreated:
		l.res.Orders++
		l.lat = append(l.lat, d)
	case op == "confirm" && code == http.StatusOK:
		l.res.Confirms++
	case op == "cancel" && code == http.StatusOK:
		l.res.Cancels++
	case op == "confirm" && kind == "order-expired":
		l.res.LateConfirms++
	}
}

// pollLag records the oldest overdue reservation MySQL shows, every 200ms.
func (l *lifeRun) pollLag(ctx context.Context, db *mysqlCheck) {
	for ctx.Err() == nil {
		var us *int64
		if err := db.db.QueryRowContext(ctx, "SELECT TIMESTAMPDIFF(MICROSECOND, MIN(expires_at), UTC_TIMESTAMP(6)) FROM orders "+
			"WHERE sku = ? AND status = 'reserved' AND expires_at <= UTC_TIMESTAMP(6)", l.sku).Scan(&us); err == nil && us != nil {
			l.mu.Lock()
			l.res.MaxSweepLag = max(l.res.MaxSweepLag, float64(*us)/1e6)
			l.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitSwept waits until no order of the SKU is reserved, for at most the
// window and 30 s.
func (l *lifeRun) waitSwept(ctx context.Context, db *mysqlCheck) {
	end := time.Now().Add(time.Duration(l.cfg.Window)*time.Second + 30*time.Second)
	for time.Now().Before(end) && ctx.Err() == nil {
		var n int
		if err := db.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM orders WHERE sku = ? AND status = 'reserved'", l.sku).Scan(&n); err == nil && n == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// latencyMs is the q-quantile of ds in milliseconds.
func latencyMs(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[min(len(s)-1, int(q*float64(len(s))))].Microseconds()) / 1000
}
