package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/seckill/stock/internal/skulock"
	"github.com/seckill/stock/loadtest/driver"
	"github.com/seckill/stock/loadtest/fleet"
	"github.com/seckill/stock/loadtest/report"
)

// gatesOpts sizes the gates phase: each lock gate (STOCK_LOCK_BACKEND)
// on the same load and the same fault.
type gatesOpts struct {
	names       []string // the gates to compare
	stock       int64    // the exact run: this many units for as many buyers
	concurrency int
	pauseStock  int64 // the pause run (lock strategy): units, twice as many buyers
	doc         string
}

// gateResult is one gate's two runs and what they cost.
type gateResult struct {
	gate       string
	exact      *driver.Result // lock+version: the backstop on
	redisPer   float64        // Redis commands per order of the exact run, every server summed
	mysqlPer   float64        // MySQL statements per order (the server's Questions: every client)
	pause      *driver.Result // lock (no backstop), its holder paused past the lease
	pausedNote string
}

// gateStores are the gates' own stores beside the instances' Redis: the
// Redlock masters and the etcd member.
type gateStores struct {
	masters []string
	etcd    string
}

// gateEnv is every instance's setting in the gates phase: no rate limit (so
// the Redis commands counted are the lock's), the gate.
func gateEnv(gate string, st gateStores) map[string]string {
	env := map[string]string{"STOCK_RATE_IP": "0", "STOCK_TRUSTED_PROXIES": "127.0.0.1", "STOCK_LOCK_BACKEND": gate}
	switch gate {
	case skulock.GateRedlock:
		env["STOCK_REDLOCK_ADDRS"] = strings.Join(st.masters, ",")
	case skulock.GateEtcd:
		env["STOCK_ETCD_ENDPOINTS"] = st.etcd
	}
	return env
}

// runGates runs, for every gate, on private redis-servers (one the
// instances' Redis, three the Redlock masters) so their commands can be
// counted: an exact run with the backstop on (lock+version, every buyer
// one unit of a stock as large as the crowd: sold must equal the stock),
// then the naive lock strategy (no backstop) with the lock holder paused
// 2.5x the 1s lease inside its transaction, to see which gate oversells.
func runGates(ctx context.Context, o options, runID, token string) ([]gateResult, error) {
	dir, err := os.MkdirTemp("", "stock-gates-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	gs, err := startGateServers(ctx, o, dir)
	defer gs.kill()
	if err != nil {
		return nil, err
	}
	var out []gateResult
	for _, b := range o.gates.names {
		gr, err := gs.exactRun(ctx, o, b, runID, token)
		if err != nil {
			return nil, err
		}
		if gr.pause, gr.pausedNote, err = pauseRun(ctx, o, b, gs.redis[0].Addr, gs.stores, runID, token); err != nil {
			return nil, fmt.Errorf("gates, %s, pause: %w", b, err)
		}
		_, _ = fmt.Fprintf(o.logw, "demo: gates: %s: %.0f orders/s exact (%s); under a pause without the backstop: oversold %d, lost updates %d\n",
			b, gr.exact.OrdersPerSec, gr.exact.Verdict(), gr.pause.Oversold, gr.pause.LostUpdates)
		out = append(out, gr)
	}
	return out, nil
}

// gateServers is the gates' private servers: redis[0] the instances'
// Redis, redis[1:] the Redlock masters, and etcd when a gate needs it.
type gateServers struct {
	redis  []*fleet.Redis
	etcd   *fleet.Etcd
	stores gateStores
}

// startGateServers starts the gates' servers under dir; kill stops
// those started, even after an error.
func startGateServers(ctx context.Context, o options, dir string) (*gateServers, error) {
	gs := &gateServers{}
	for i := range 4 {
		s, err := fleet.StartRedis(ctx, filepath.Join(dir, fmt.Sprint(i)))
		if err != nil {
			return gs, err
		}
		gs.redis = append(gs.redis, s)
	}
	for _, s := range gs.redis[1:] {
		gs.stores.masters = append(gs.stores.masters, s.Addr)
	}
	if slices.Contains(o.gates.names, skulock.GateEtcd) {
		e, err := fleet.StartEtcd(ctx, filepath.Join(dir, "etcd"))
		if err != nil {
			return gs, err
		}
		gs.etcd, gs.stores.etcd = e, e.Endpoint
	}
	return gs, nil
}

// kill stops every server started.
func (gs *gateServers) kill() {
	for _, s := range gs.redis {
		s.Kill()
	}
	if gs.etcd != nil {
		gs.etcd.Kill()
	}
}

// commands is the Redis commands all the servers ran so far.
func (gs *gateServers) commands(ctx context.Context, logw io.Writer) int64 {
	var n int64
	for _, s := range gs.redis {
		c, err := s.Commands(ctx)
		if err != nil {
			_, _ = fmt.Fprintf(logw, "demo: gates: %v\n", err)
		}
		n += c
	}
	return n
}

// exactRun is gate b's exact run, with the backstop on, and its Redis
// commands and MySQL statements per order.
func (gs *gateServers) exactRun(ctx context.Context, o options, b, runID, token string) (gateResult, error) {
	gr := gateResult{gate: b}
	dsn, drop, err := freshDB(ctx, o, "stock_demo_gate_"+b+"_"+runID)
	if err != nil {
		return gr, err
	}
	defer drop()
	f, err := fleet.Start(ctx, fleet.Config{Bin: o.bin, N: o.instances, DSN: dsn, RedisAddr: gs.redis[0].Addr, AdminToken: token,
		Strategy: "lock+version", LogDir: filepath.Join(o.out, "logs"), Name: "gates-" + b, Env: gateEnv(b, gs.stores)})
	if err != nil {
		return gr, err
	}
	mdb, err := sql.Open("mysql", dsn)
	if err != nil {
		f.Stop()
		return gr, err
	}
	g := o.gates
	r0, q0 := gs.commands(ctx, o.logw), questionsOf(ctx, mdb)
	res, err := driver.Run(ctx, driver.Config{
		URLs: f.URLs(), Stock: g.stock, Buyers: int(g.stock), Concurrency: g.concurrency, Quantity: 1,
		AdminToken: token, JWTSecret: fleet.JWTSecret, Retries: o.retries, Duration: 2 * time.Minute, MySQLDSN: dsn,
		RedisAddr: gs.redis[0].Addr, Label: b, Log: o.logw, ClientIP: demoClientIP,
	})
	r1, q1 := gs.commands(ctx, o.logw), questionsOf(ctx, mdb)
	_ = mdb.Close()
	stopped := f.Stop()
	if err != nil {
		return gr, fmt.Errorf("gates, %s: %w\n%s", b, err, f.Logs())
	}
	res.Instances = stopped
	if res.Created > 0 {
		gr.redisPer = float64(r1-r0) / float64(res.Created)
		gr.mysqlPer = float64(q1-q0) / float64(res.Created)
	}
	gr.exact = res
	return gr, nil
}

// questionsOf is MySQL's statement count (every client of the server).
func questionsOf(ctx context.Context, db *sql.DB) int64 {
	var name string
	var n int64
	_ = db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &n)
	return n
}

// pauseRun is the naive lock strategy on gate, with a 1s lease and 40ms
// in the critical section; once a tenth is sold, an instance is paused
// (SIGSTOP) while its transaction holds the stock row's lock (InnoDB shows
// the same transaction holding row locks through 200ms of the pause), for
// 2.5s, then resumed.
func pauseRun(ctx context.Context, o options, gate, redisAddr string, st gateStores, runID, token string) (*driver.Result, string, error) {
	g := o.gates
	dsn, drop, err := freshDB(ctx, o, "stock_demo_gatep_"+gate+"_"+runID)
	if err != nil {
		return nil, "", err
	}
	defer drop()
	env := gateEnv(gate, st)
	env["STOCK_LOCK_WATCHDOG"] = "1s"
	env["STOCK_TEST_CRITICAL_DELAY"] = "40ms"
	f, err := fleet.Start(ctx, fleet.Config{Bin: o.bin, N: o.instances, DSN: dsn, RedisAddr: redisAddr, AdminToken: token,
		Strategy: "lock", LogDir: filepath.Join(o.out, "logs"), Name: "gates-pause-" + gate, Env: env})
	if err != nil {
		return nil, "", err
	}
	defer f.Stop()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, "", err
	}
	defer func() { _ = db.Close() }()
	type outcome struct {
		res *driver.Result
		err error
	}
	done := make(chan outcome, 1)
	sku := "gate-pause-" + runID
	go func() {
		res, err := driver.Run(ctx, driver.Config{
			URLs: f.URLs(), SKU: sku, Stock: g.pauseStock, Buyers: int(2 * g.pauseStock), Concurrency: 20, Quantity: 1,
			AdminToken: token, JWTSecret: fleet.JWTSecret, Retries: 10, Duration: 2 * time.Minute, MySQLDSN: dsn,
			ExpectOversell: true, Failover: true, Label: "lock/" + gate, Log: io.Discard, ClientIP: demoClientIP,
		})
		done <- outcome{res, err}
	}()
	note := "no pause landed in a transaction"
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var sold int64
		if db.QueryRowContext(ctx, "SELECT sold FROM stock WHERE sku = ?", sku).Scan(&sold) == nil && sold >= g.pauseStock/10 {
			if in, ok := pauseInTrx(ctx, db, f, sku); ok {
				time.Sleep(2200 * time.Millisecond) // 2.5s in all with the 300ms of the check
				_ = in.Signal(syscall.SIGCONT)
				note = fmt.Sprintf("instance %d paused 2.5s inside its transaction", in.Index)
			}
			break
		}
	}
	out := <-done
	if out.err != nil {
		return nil, "", fmt.Errorf("%w\n%s", out.err, f.Logs())
	}
	out.res.Instances = f.Stop()
	return out.res, note, nil
}

// pauseInTrx SIGSTOPs instances at random until one is stopped inside a
// transaction that holds row locks (the same transaction id before and
// after 200ms of the pause; only the lock holder writes the row), and
// returns it stopped; nothing may be sold meanwhile (a bystander with a
// long transaction is not the holder). It gives up after 40s.
func pauseInTrx(ctx context.Context, db *sql.DB, f *fleet.Fleet, sku string) (*fleet.Instance, bool) {
	sold := func() int64 {
		var n int64 = -1
		_ = db.QueryRowContext(ctx, "SELECT sold FROM stock WHERE sku = ?", sku).Scan(&n)
		return n
	}
	trx := func() []string {
		ids, err := driver.LockingTransactions(ctx, db)
		if err != nil {
			return nil // as an unread table: no transaction seen holding
		}
		return ids
	}
	for deadline := time.Now().Add(40 * time.Second); time.Now().Before(deadline); {
		in := f.Instances[rand.IntN(len(f.Instances))] //nolint:gosec // G404: picks a victim, not a secret
		if in.Signal(syscall.SIGSTOP) != nil {
			return nil, false
		}
		time.Sleep(100 * time.Millisecond)
		x1, s1 := trx(), sold()
		time.Sleep(200 * time.Millisecond)
		x2, s2 := trx(), sold()
		if s1 == s2 && slices.ContainsFunc(x1, func(id string) bool { return slices.Contains(x2, id) }) {
			return in, true
		}
		_ = in.Signal(syscall.SIGCONT)
		time.Sleep(time.Duration(20+rand.IntN(80)) * time.Millisecond) //nolint:gosec // G404: jitter, not a secret
	}
	return nil, false
}

// gatesSections are the gates phase's runs for the report: the exact runs
// (they must pass), and the pause runs (reported, not required: they show
// what each gate does without the backstop).
func gatesSections(gs []gateResult, g *gatesOpts) (exact, pause report.Section) {
	exact = report.Section{Title: fmt.Sprintf("Gates, backstop on: lock+version on each STOCK_LOCK_BACKEND, %d units for %d buyers, %d concurrent", g.stock, g.stock, g.concurrency),
		Note: "Every run must sell exactly the stock. Redis commands per order count every server the instances use (the Redlock masters too)."}
	pause = report.Section{Title: fmt.Sprintf("Gates, backstop off: the lock strategy on each gate, the holder paused 2.5s past its 1s lease, %d units", g.pauseStock),
		Note: "No backstop: a holder resumed after its lease has expired writes a stale value. The oversell is the finding, not a failure.", SafetyOnly: true}
	for _, r := range gs {
		exact.Runs = append(exact.Runs, r.exact)
		pause.Runs = append(pause.Runs, r.pause)
	}
	return exact, pause
}

// writeGatesTable prints the comparison.
func writeGatesTable(w io.Writer, gs []gateResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "gate\texact run\tsold/stock\torders/s\tp50 ms\tp99 ms\tlock wait ms\tRedis cmds/order\tMySQL stmts/order\tno backstop, paused: oversold\tlost upd\t")
	for _, r := range gs {
		e, p := r.exact, r.pause
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%.0f\t%.1f\t%.1f\t%s\t%.2f\t%.2f\t%d\t%d\t\n", r.gate, e.Verdict(), e.Sold, e.Stock,
			e.OrdersPerSec, e.Latency.P50, e.Latency.P99, msOrDash(e.Metrics.Sum.LockWaitMean(), e.Metrics.Sum.LockWaits),
			r.redisPer, r.mysqlPer, p.Oversold, p.LostUpdates)
	}
	return tw.Flush()
}

func msOrDash(sec, n float64) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", sec*1000)
}

// writeGatesDoc writes the generated document the README's "which gate
// when" table links to: the table, the machine, the date and the commit.
func writeGatesDoc(ctx context.Context, path string, o options, gs []gateResult) error {
	var b strings.Builder
	m := gs[0].exact.Machine
	g := o.gates
	b.WriteString(report.Header("The gates side by side", o.target, report.Commit(ctx), time.Now(), m))
	b.WriteString("MySQL's statement count is the server's, so it includes other clients'.\n\n")
	fmt.Fprintf(&b, "%d instances per run on one hot SKU. **Backstop on**: `lock+version` (the versioned UPDATE), %d units for %d buyers, %d concurrent: "+
		"every run must sell exactly the stock. Redis commands are counted on every server the instances use (one Redis; for redlock also its three masters), "+
		"the rate limit off. **Backstop off**: the `lock` strategy (plain write, `STOCK_ALLOW_UNSAFE`), lease 1s, 40ms in the critical section, %d units for %d buyers; "+
		"a holder is SIGSTOPped 2.5s inside its transaction, then resumed.\n\n", o.instances, g.stock, g.stock, g.concurrency, g.pauseStock, 2*g.pauseStock)
	b.WriteString("| gate | backstop on | sold / stock | orders/s | p50 ms | p99 ms | lock wait ms | Redis cmds/order | MySQL stmts/order | backstop off, paused: oversold | lost updates | pause |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range gs {
		e, p := r.exact, r.pause
		fmt.Fprintf(&b, "| `%s` | %s | %d / %d | %.0f | %.1f | %.1f | %s | %.2f | %.2f | %d | %d | %s |\n", r.gate, e.Verdict(), e.Sold, e.Stock,
			e.OrdersPerSec, e.Latency.P50, e.Latency.P99, msOrDash(e.Metrics.Sum.LockWaitMean(), e.Metrics.Sum.LockWaits),
			r.redisPer, r.mysqlPer, p.Oversold, p.LostUpdates, r.pausedNote)
	}
	b.WriteString("\nLock wait: the mean time a batch leader waited for the SKU lock. Orders are combined per instance " +
		"(up to `STOCK_BATCH_MAX` under one lock), so commands per order are per batch divided by its size.\n")
	return os.WriteFile(path, []byte(b.String()), 0o644) //nolint:gosec // G306: a document of the repo, for people to read
}
