package chaos

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seckill/stock/internal/testserver"
	"github.com/seckill/stock/loadtest/driver"
	"github.com/seckill/stock/loadtest/fleet"
)

// The lifecycle's fault rows: buyers keep arriving for a SKU sold under a
// payment window (driver.RunLifecycle: winners pay, cancel, or never pay),
// and a fault lands while the sweepers expire reservations. Each row must
// end with MySQL's rows exact: every unit in one of available, reserved or
// confirmed, one return row per cancelled or expired order, every answer
// agreeing with the rows.

const lifeWindow = 2 // seconds

// lifeRig is a rig whose instances sweep every 100ms, each sweep holding
// its orders locked for sweepDelay, with a payment token.
func lifeRig(t *testing.T, rc rigConfig, sweepDelay time.Duration) *rig {
	rc.strategy = "lock+version"
	env := map[string]string{"STOCK_EXPIRY_INTERVAL": "100ms", "STOCK_PAYMENT_TOKEN": "chaos-pay"}
	if sweepDelay > 0 {
		env["STOCK_TEST_SWEEP_DELAY"] = sweepDelay.String()
	}
	for k, v := range rc.env {
		env[k] = v
	}
	rc.env = env
	return newRig(t, rc)
}

type lifeOutcome struct {
	res *driver.LifecycleResult
	err error
}

// lifeAnswer is one answer the lifecycle load saw.
type lifeAnswer struct {
	op   string
	code int
	at   time.Time
}

// lifeLoad runs the lifecycle scenario on r's instances for d; receive its
// result from the channel. Every answer is recorded in *seen.
func (r *rig) lifeLoad(ctx context.Context, stock int64, d time.Duration, seen *[]lifeAnswer, mu *sync.Mutex) <-chan lifeOutcome {
	out := make(chan lifeOutcome, 1)
	go func() {
		res, err := driver.RunLifecycle(ctx, driver.LifecycleConfig{
			URLs: r.fleet.URLs(), AdminToken: r.token, PaymentToken: "chaos-pay", JWTSecret: fleet.JWTSecret,
			Stock: stock, PerBuyerLimit: 1, Window: lifeWindow, Rate: 60, Duration: d, Concurrency: 40,
			MySQLDSN: r.dsn, Label: r.t.Name(),
			Observe: func(op string, code int, at time.Time) {
				mu.Lock()
				*seen = append(*seen, lifeAnswer{op, code, at})
				mu.Unlock()
			},
		})
		out <- lifeOutcome{res, err}
	}()
	return out
}

// lifeWait receives the run's result and fails the test unless every
// check held.
func (r *rig) lifeWait(out <-chan lifeOutcome, row *Row) *driver.LifecycleResult {
	r.t.Helper()
	o := <-out
	if o.err != nil {
		r.t.Fatalf("driver.RunLifecycle = %v\n%s", o.err, r.fleet.Logs())
	}
	res := o.res
	row.Stock, row.Sold = res.Stock, res.ByStatus["confirmed"]
	row.Statuses = map[string]int{"201": res.Orders}
	for _, c := range res.Checks {
		if !c.OK {
			r.t.Errorf("%s: %s: %s\n%s", r.t.Name(), c.Name, c.Detail, r.fleet.Logs())
			if c.Oversell {
				row.Oversold++
			}
		}
	}
	return res
}

// lifeNote is what every lifecycle row reports.
func lifeNote(res *driver.LifecycleResult) string {
	return fmt.Sprintf("%d orders: %d confirmed, %d cancelled, %d expired; %d units returned, %d late confirms refused; "+
		"max sweeper lag %.2fs.", res.Orders, res.ByStatus["confirmed"], res.ByStatus["cancelled"], res.ByStatus["expired"],
		res.UnitsReturned, res.LateConfirms, res.MaxSweepLag)
}

// openSweeps counts the sweep transactions holding orders locked right
// now, open for at least olderThan (a sweep holds its rows for the rig's
// sweep delay: one open longer belongs to a stopped process).
func (r *rig) openSweeps(ctx context.Context, olderThan time.Duration) int {
	var n int
	_ = r.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.innodb_trx
		WHERE trx_rows_locked > 0 AND trx_isolation_level = 'READ COMMITTED'
		AND trx_started <= NOW() - INTERVAL ? MICROSECOND`, olderThan.Microseconds()).Scan(&n)
	return n
}

// stopMidSweep SIGSTOPs victim at a moment it holds a sweep transaction
// open: it stops it, and if after twice the sweep delay no sweep has been
// open that long, resumes it and tries again (up to 20 times). It returns
// how many tries it took; the victim is left stopped.
func (r *rig) stopMidSweep(ctx context.Context, victim *fleet.Instance, sweepDelay time.Duration) int {
	for try := 1; try <= 20; try++ {
		if err := victim.Signal(syscall.SIGSTOP); err != nil {
			r.t.Fatal(err)
		}
		time.Sleep(2 * sweepDelay)
		if r.openSweeps(ctx, 3*sweepDelay/2) > 0 {
			return try
		}
		if err := victim.Signal(syscall.SIGCONT); err != nil {
			r.t.Fatal(err)
		}
		time.Sleep(time.Duration(try*37%100) * time.Millisecond)
	}
	r.t.Fatalf("%s never stopped inside a sweep in 20 tries", describe(victim))
	return 0
}

// waitOverdue waits until some reservation is past its deadline (so the
// sweepers have work), for at most the window and 10s.
func (r *rig) waitOverdue(ctx context.Context) {
	for end := time.Now().Add(lifeWindow*time.Second + 10*time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		var n int
		if err := r.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM orders WHERE status = 'reserved' AND expires_at <= UTC_TIMESTAMP(6)").
			Scan(&n); err == nil && n > 0 {
			return
		}
	}
	r.t.Fatalf("no reservation went past its deadline")
}

// 15. An instance SIGKILLed in the middle of a sweep: its transaction dies
// with it (rolled back), the orders it held stay reserved, and the other
// instances' sweepers expire them, once.
func killMidSweep(t *testing.T, row *Row) {
	ctx := ctxFor(t, 3*time.Minute)
	r := lifeRig(t, rigConfig{}, 300*time.Millisecond)
	var seen []lifeAnswer
	var mu sync.Mutex
	out := r.lifeLoad(ctx, 150, 8*time.Second, &seen, &mu)
	r.waitOverdue(ctx)
	victim := r.fleet.Instances[1]
	tries := r.stopMidSweep(ctx, victim, 300*time.Millisecond)
	victim.Kill()
	res := r.lifeWait(out, row)
	row.Note = fmt.Sprintf("%s stopped inside a sweep transaction (try %d), then SIGKILLed; ", describe(victim), tries) + lifeNote(res)
	if res.ByStatus["expired"] == 0 {
		t.Errorf("no order expired; want the sweepers to have worked")
	}
}

// 16. A sweeper SIGSTOPped past many deadlines, mid-sweep, with the orders
// it locked: the other instances skip them (SKIP LOCKED) and sweep the
// rest; after the resume its transaction commits, and nothing is returned
// twice.
func stopSweeper(t *testing.T, row *Row) {
	ctx := ctxFor(t, 3*time.Minute)
	r := lifeRig(t, rigConfig{}, 300*time.Millisecond)
	var seen []lifeAnswer
	var mu sync.Mutex
	out := r.lifeLoad(ctx, 150, 10*time.Second, &seen, &mu)
	r.waitOverdue(ctx)
	victim := r.fleet.Instances[2]
	tries := r.stopMidSweep(ctx, victim, 300*time.Millisecond)
	time.Sleep(3 * lifeWindow * time.Second)
	held := r.openSweeps(ctx, 3*lifeWindow*time.Second)
	if err := victim.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	res := r.lifeWait(out, row)
	row.Note = fmt.Sprintf("%s SIGSTOPped inside a sweep transaction (try %d) for %ds, its orders locked all along (%d such transactions "+
		"just before the resume), then resumed; ", describe(victim), tries, 3*lifeWindow, held) + lifeNote(res)
	if held == 0 {
		t.Errorf("the stopped sweeper's transaction was not open at the resume")
	}
	if res.MaxSweepLag < float64(2*lifeWindow) {
		t.Errorf("max sweeper lag %.2fs; want the stopped sweeper's locked orders overdue for most of its %ds stop", res.MaxSweepLag, 3*lifeWindow)
	}
}

// 17. MariaDB killed and restarted during the sweeps: sweeps and
// transitions fail while it is down (503, or a sweep retried at the next
// tick), and the accounting is exact after.
func mariadbMidSweep(t *testing.T, row *Row) {
	ctx := ctxFor(t, 4*time.Minute)
	m := testserver.StartMariaDB(t)
	r := lifeRig(t, rigConfig{mysqlBase: m.Base}, 100*time.Millisecond)
	var seen []lifeAnswer
	var mu sync.Mutex
	out := r.lifeLoad(ctx, 150, 10*time.Second, &seen, &mu)
	r.waitOverdue(ctx)
	m.Kill()
	t0 := time.Now()
	time.Sleep(time.Second)
	m.Start()
	res := r.lifeWait(out, row)
	mu.Lock()
	after := 0
	for _, a := range seen {
		if (a.code == http.StatusCreated || a.code == http.StatusOK) && a.at.After(t0.Add(time.Second)) {
			after++
		}
	}
	mu.Unlock()
	row.Note = fmt.Sprintf("mariadbd SIGKILLed once reservations were overdue (the sweepers at work), started again after 1s; orders, confirms and cancels "+
		"served after it came back: %d; ", after) + lifeNote(res)
	if after == 0 {
		t.Errorf("no order, confirm or cancel served after MariaDB came back")
	}
}

// 18. Redis down while units are returned: returns need no Redis (MySQL is
// the queue), so the sweeps and cancels end exact; returned units are sold
// again while it is down (the sold-out fast path reads the stock row, and an
// instance that missed the return's message is told the new restock
// sequence by its first answer); a stale sold-out answer lasts at most
// STOCK_SOLDOUT_TTL.
func redisDownReturns(t *testing.T, row *Row) {
	ctx := ctxFor(t, 3*time.Minute)
	r := lifeRig(t, rigConfig{}, 0)
	var seen []lifeAnswer
	var mu sync.Mutex
	out := r.lifeLoad(ctx, 60, 10*time.Second, &seen, &mu)
	r.waitOverdue(ctx)
	r.redis.Kill()
	t0 := time.Now()
	time.Sleep(3 * time.Second)
	r.redis.Start()
	t1 := time.Now()
	res := r.lifeWait(out, row)
	mu.Lock()
	resold := 0
	for _, a := range seen {
		if a.op == "order" && a.code == http.StatusCreated && a.at.After(t0) && a.at.Before(t1) {
			resold++
		}
	}
	mu.Unlock()
	var returnedWhileDown int
	_ = r.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM stock_ledger WHERE kind = 'return' AND created_at BETWEEN ? AND ?",
		t0.UTC(), t1.UTC()).Scan(&returnedWhileDown)
	row.Note = fmt.Sprintf("Redis down 3s: %d orders returned and %d returned units sold again while it was down; ", returnedWhileDown, resold) + lifeNote(res)
	if returnedWhileDown == 0 || resold == 0 {
		t.Errorf("Redis down 3s: %d returns, %d units sold again meanwhile; want both > 0", returnedWhileDown, resold)
	}
}
