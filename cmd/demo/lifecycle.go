package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"strings"
	"time"

	"github.com/seckill/stock/loadtest/driver"
	"github.com/seckill/stock/loadtest/fleet"
	"github.com/seckill/stock/loadtest/report"
)

// lifecycleOpts sizes the lifecycle phase.
type lifecycleOpts struct {
	stock       int64
	window      int
	rate        float64
	duration    time.Duration
	concurrency int
}

// lifecycleRun is one run of the phase: a strategy, and whether every
// winner confirms at once (the control that prices the returns).
type lifecycleRun struct {
	strategy   string
	allConfirm bool
}

// runLifecycle runs the lifecycle scenario for every strategy on fresh
// instances, then lock+version again with every winner paying at once (no
// returns), and prints the table.
func runLifecycle(ctx context.Context, o options, runID, token string, stdout io.Writer) ([]*driver.LifecycleResult, string, error) {
	lo := o.lifecycle
	var runs []lifecycleRun
	for _, s := range o.strategies {
		runs = append(runs, lifecycleRun{strategy: s})
		if s == "lock+version" {
			runs = append(runs, lifecycleRun{strategy: s, allConfirm: true})
		}
	}
	var out []*driver.LifecycleResult
	for _, r := range runs {
		res, err := lifecycleOnce(ctx, o, r, runID, token)
		if err != nil {
			return nil, "", fmt.Errorf("lifecycle, %s: %w", r.strategy, err)
		}
		out = append(out, res)
	}
	note := fmt.Sprintf("%d units under a payment window of %d s, buyers arriving at %.0f/s for %v (%d in flight at most), one unit each, "+
		"a per-buyer limit of 1, on %d instances. Of the winners every third never pays, every tenth cancels within half the window, "+
		"and the rest confirm at a random moment up to a quarter of the window past their deadline (those answered 409 order-expired: late confirms). "+
		"Every instance sweeps every second. Checked from MySQL at the end: every unit in exactly one of available, reserved or confirmed, "+
		"confirmed units <= stocked, one return row per cancelled or expired order, no buyer over the limit, and every answer agreeing with the rows; "+
		"none and counter (plain writes, nothing serializing them) must be caught; lock, which writes absolute values under its lock, may lose returns made outside it (reported, not required). The `+ all pay` row is lock+version with every winner confirming at once: no returns, the control for what they cost.",
		lo.stock, lo.window, lo.rate, lo.duration, lo.concurrency, o.instances)
	_, _ = fmt.Fprintf(stdout, "\nLifecycle: %s\n", note)
	head, rows := report.LifecycleRows(out)
	_, _ = fmt.Fprintln(stdout, "  "+strings.Join(head, " | "))
	for _, r := range rows {
		_, _ = fmt.Fprintln(stdout, "  "+strings.Join(r, " | "))
	}
	return out, note, nil
}

// lifecycleOnce is one run on fresh instances and a fresh database.
func lifecycleOnce(ctx context.Context, o options, r lifecycleRun, runID, token string) (*driver.LifecycleResult, error) {
	name := "life_" + dbSafe(r.strategy)
	if r.allConfirm {
		name += "_allpay"
	}
	dsn, drop, err := freshDB(ctx, o, "stock_demo_"+name+"_"+runID)
	if err != nil {
		return nil, err
	}
	defer drop()
	env := maps.Clone(unlimitedEnv())
	env["STOCK_PAYMENT_TOKEN"] = token + "-pay"
	f, err := fleet.Start(ctx, fleet.Config{Bin: o.bin, N: o.instances, DSN: dsn, RedisAddr: o.redis, AdminToken: token,
		Strategy: r.strategy, LogDir: filepath.Join(o.out, "logs"), Name: name, Env: env})
	if err != nil {
		return nil, err
	}
	defer f.Stop()
	label := r.strategy
	if r.allConfirm {
		label += " + all pay"
	}
	lo := o.lifecycle
	res, err := driver.RunLifecycle(ctx, driver.LifecycleConfig{
		URLs: f.URLs(), AdminToken: token, PaymentToken: token + "-pay", JWTSecret: fleet.JWTSecret,
		Stock: lo.stock, PerBuyerLimit: 1, Window: lo.window, Rate: lo.rate, Duration: lo.duration, Concurrency: lo.concurrency,
		AllConfirm: r.allConfirm, MySQLDSN: dsn, ExpectOversell: plainUnguarded(r.strategy), Reported: reportedOnly(r.strategy), Label: label,
		Log: func(format string, args ...any) { _, _ = fmt.Fprintf(o.logw, "demo: "+format+"\n", args...) },
	})
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, f.Logs())
	}
	for i, in := range f.Stop() {
		if !in.ExitOK {
			res.Checks = append(res.Checks, driver.Check{Name: fmt.Sprintf("instance %d exited 0 after SIGTERM", i), Liveness: true})
			res.Passed = false
		}
	}
	return res, nil
}
