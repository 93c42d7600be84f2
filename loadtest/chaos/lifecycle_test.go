package chaos

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

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

// chaosPayment is the payment token of the lifecycle rigs' instances.
var chaosPayment = fleet.Secret()

// lifeRig is a rig whose instances sweep every 100ms, each sweep holding
// its orders locked for sweepDelay, with a payment token.
func lifeRig(t *testing.T, rc rigConfig, sweepDelay time.Duration) *rig {
	rc.strategy = "lock+version"
	env := map[string]string{"STOCK_EXPIRY_INTERVAL": "100ms", "STOCK_PAYMENT_TOKEN": chaosPayment}
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
			URLs: r.fleet.URLs(), AdminToken: r.token, PaymentToken: chaosPayment, JWTSecret: fleet.JWTSecret,
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

// openSweeps counts in's transactions that hold orders locked under READ
// COMMITTED (the lifecycle's: a sweep, or a confirm or cancel) right now,
// found by the local ports of its MySQL connections.
func (r *rig) openSweeps(ctx context.Context, in *fleet.Instance) int {
	ports, err := mysqlPorts(in.PID(), r.dsn)
	if err != nil {
		r.t.Fatal(err)
	}
	if len(ports) == 0 {
		return 0
	}
	var n int
	err = r.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.innodb_trx t
		JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id
		WHERE t.trx_rows_locked > 0 AND t.trx_isolation_level = 'READ COMMITTED'
		AND FIND_IN_SET(SUBSTRING_INDEX(p.host, ':', -1), ?)`, strings.Join(ports, ",")).Scan(&n)
	if err != nil {
		r.t.Fatal(err)
	}
	return n
}

// mysqlPorts is the local ports of pid's TCP connections to the MySQL
// server of dsn: its socket inodes (/proc/<pid>/fd) looked up in the
// kernel's table of TCP sockets (/proc/net/tcp).
func mysqlPorts(pid int, dsn string) ([]string, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	_, port, _ := strings.Cut(cfg.Addr, ":")
	want, _ := strconv.Atoi(port)
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if ino, ok := strings.CutPrefix(link, "socket:["); ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	table, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return nil, err
	}
	var ports []string
	for _, line := range strings.Split(string(table), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 10 || !inodes[f[9]] {
			continue
		}
		local, remote := hexPort(f[1]), hexPort(f[2])
		if remote == want {
			ports = append(ports, strconv.Itoa(local))
		}
	}
	return ports, nil
}

// hexPort is the port of /proc/net/tcp's "0100007F:0CEA".
func hexPort(addr string) int {
	_, h, _ := strings.Cut(addr, ":")
	p, _ := strconv.ParseInt(h, 16, 32)
	return int(p)
}

// stopMidSweep SIGSTOPs victim at a moment it holds a lifecycle
// transaction open with orders locked (with the rig's sweep delay, almost
// always a sweep): it stops it, and unless it finds one, resumes it and
// tries again (up to 40 times). It returns how many tries it took; the
// victim is left stopped.
func (r *rig) stopMidSweep(ctx context.Context, victim *fleet.Instance, sweepDelay time.Duration) int {
	for try := 1; try <= 40; try++ {
		if err := victim.Signal(syscall.SIGSTOP); err != nil {
			r.t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // its in-flight statements reach MySQL
		if r.openSweeps(ctx, victim) > 0 {
			return try
		}
		if err := victim.Signal(syscall.SIGCONT); err != nil {
			r.t.Fatal(err)
		}
		time.Sleep(time.Duration(try*37%100)*time.Millisecond + sweepDelay/4)
	}
	r.t.Fatalf("%s never stopped inside a sweep in 40 tries", describe(victim))
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

// stoppedInSweep starts the lifecycle load on a rig sweeping 300ms a
// transaction, waits for overdue reservations and SIGSTOPs instance i
// inside a sweep transaction. It returns the rig, the load, the victim and
// the tries it took.
func stoppedInSweep(t *testing.T, i int, d time.Duration) (*rig, <-chan lifeOutcome, *fleet.Instance, int) {
	t.Helper()
	ctx := ctxFor(t, 3*time.Minute)
	r := lifeRig(t, rigConfig{}, 300*time.Millisecond)
	var seen []lifeAnswer
	var mu sync.Mutex
	out := r.lifeLoad(ctx, 150, d, &seen, &mu)
	r.waitOverdue(ctx)
	victim := r.fleet.Instances[i]
	return r, out, victim, r.stopMidSweep(ctx, victim, 300*time.Millisecond)
}

// 15. An instance SIGKILLed in the middle of a sweep: its transaction dies
// with it (rolled back), the orders it held stay reserved, and the other
// instances' sweepers expire them, once.
func killMidSweep(t *testing.T, row *Row) {
	r, out, victim, tries := stoppedInSweep(t, 1, 8*time.Second)
	victim.Kill()
	res := r.lifeWait(out, row)
	row.Note = fmt.Sprintf("%s stopped inside a lifecycle transaction holding orders (try %d), then SIGKILLed; ", describe(victim), tries) + lifeNote(res)
	if res.ByStatus["expired"] == 0 {
		t.Errorf("no order expired; want the sweepers to have worked")
	}
}

// 16. A sweeper SIGSTOPped past many deadlines, mid-sweep, with the orders
// it locked: the other instances skip them (SKIP LOCKED) and sweep the
// rest; after the resume its transaction commits, and nothing is returned
// twice.
func stopSweeper(t *testing.T, row *Row) {
	r, out, victim, tries := stoppedInSweep(t, 2, 10*time.Second)
	time.Sleep(3 * lifeWindow * time.Second)
	held := r.openSweeps(context.Background(), victim)
	if err := victim.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	res := r.lifeWait(out, row)
	row.Note = fmt.Sprintf("%s SIGSTOPped inside a lifecycle transaction (try %d) for %ds, its orders locked all along (%d of its transactions "+
		"open just before the resume), then resumed; ", describe(victim), tries, 3*lifeWindow, held) + lifeNote(res)
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
