package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seckill/stock/internal/testserver"
	"github.com/seckill/stock/loadtest/driver"
	"github.com/seckill/stock/loadtest/fleet"
	"github.com/seckill/stock/loadtest/report"
)

// TestProof is the short version of `make demo`: the real binary, three
// instances on one database, 400 buyers for 100 units. lock+version must sell
// exactly the stock with every invariant proven from the audit and MySQL;
// none must oversell and the driver must catch it.
func TestProof(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bin, err := fleet.Build(ctx, "go", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		strategy       string
		quantity       int
		expectOversell bool
	}{
		{"lock+version", 1, false},
		{"lock+version", 3, false}, // 33 whole orders of 3: 99 sold, 1 left
		{"counter+conditional", 1, false},
		{"none", 1, true},
	} {
		name := tc.strategy
		if tc.quantity > 1 {
			name += fmt.Sprintf("_q%d", tc.quantity)
		}
		// One after the other: three instances per run already use up to
		// ~50 MySQL connections, and the shared MariaDB allows 151 in all.
		t.Run(name, func(t *testing.T) {
			dsn := testserver.Database(t) // t_<test>_<nanos>, dropped at the end
			if err := fleet.Migrate(ctx, bin, dsn); err != nil {
				t.Fatal(err)
			}
			token := fleet.Secret()
			f, err := fleet.Start(ctx, fleet.Config{
				Bin: bin, N: 3, DSN: dsn, RedisAddr: testserver.SharedRedis, AdminToken: token,
				Strategy: tc.strategy, LogDir: t.TempDir(), Name: dbSafe(tc.strategy), Env: demoEnv,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Stop() })

			cfg := driver.Config{
				URLs: f.URLs(), Stock: 100, Buyers: 400, Concurrency: 50, Quantity: tc.quantity, AdminToken: token,
				JWTSecret: fleet.JWTSecret, Retries: 3, Duration: 40 * time.Second, MySQLDSN: dsn, ExpectOversell: tc.expectOversell,
				Label: tc.strategy, ClientIP: demoClientIP,
				// Greedy buyers: 40 orders of 5 identities, each allowed 2 orders' worth.
				Greedy: demoGreedyEvery, GreedyBuyers: 5, PerBuyerLimit: int64(2 * tc.quantity),
			}
			res, err := driver.Run(ctx, cfg)
			if err != nil {
				t.Fatalf("driver.Run(%s) = %v\n%s", tc.strategy, err, f.Logs())
			}
			for i, in := range f.Stop() {
				if !in.ExitOK {
					t.Errorf("instance %d (%s) did not exit 0 after SIGTERM\n%s", i, in.URL, f.Logs())
				}
				if in.PeakRSSBytes <= 0 {
					t.Errorf("instance %d: peak RSS %d; want > 0", i, in.PeakRSSBytes)
				}
			}
			var out strings.Builder
			report.WriteSummary(&out, res)
			t.Log(out.String())
			if !res.Passed {
				t.Fatalf("strategy %s: run failed: %+v", tc.strategy, res.Failed())
			}
			if res.MySQL == nil {
				t.Fatalf("strategy %s: no MySQL verification", tc.strategy)
			}
			if tc.expectOversell {
				if !res.OversellDetected || res.Oversold == 0 && res.LostUpdates == 0 {
					t.Fatalf("strategy none: oversold %d, lost updates %d; want an oversell detected", res.Oversold, res.LostUpdates)
				}
				return
			}
			orders := int64(100 / tc.quantity)
			sold := orders * int64(tc.quantity)
			if res.Sold != sold || res.Oversold != 0 || int64(res.Created) != orders || res.MySQL.Units != sold || res.Audit.Available != 100-sold {
				t.Fatalf("strategy %s, quantity %d: sold %d, oversold %d, 201s %d, MySQL units %d, available %d; want %d, 0, %d, %d, %d",
					tc.strategy, tc.quantity, res.Sold, res.Oversold, res.Created, res.MySQL.Units, res.Audit.Available, sold, orders, sold, 100-sold)
			}
		})
	}
}

// TestCeiling is the short ceiling phase: the same instances answer
// /healthz, GET /v1/stock and a sold-out flood; every flood answer is a 409
// (the fast path never answers anything else for a sold-out SKU).
func TestCeiling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bin, err := fleet.Build(ctx, "go", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	o := options{bin: bin, instances: 2, mysqlBase: "root@tcp(127.0.0.1:3306)/", redis: testserver.SharedRedis,
		out: t.TempDir(), logw: testWriter{t}, ceiling: &ceilingOpts{concurrency: 20, duration: 300 * time.Millisecond}}
	rs, err := measureCeiling(ctx, o, driver.NewRunID(), fleet.Secret())
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 4 {
		t.Fatalf("%d measurements; want 4", len(rs))
	}
	for _, r := range rs {
		t.Log(r.String())
		if r.Answered == 0 || r.Answered != r.Requests || r.Errors != 0 {
			t.Errorf("%s: %d of %d answered as wanted (%v), %d errors; want all, none", r.Name, r.Answered, r.Requests, r.Statuses, r.Errors)
		}
	}
	for _, line := range ceilingGoals(rs) {
		t.Log(line)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestLifecycleProof is the short version of `make demo`'s lifecycle phase:
// the real binary, three instances, buyers arriving for 30 units sold under
// a one-second payment window, winners paying, cancelling or never paying;
// MySQL's rows must account for every unit and agree with every answer.
func TestLifecycleProof(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bin, err := fleet.Build(ctx, "go", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dsn := testserver.Database(t)
	if err := fleet.Migrate(ctx, bin, dsn); err != nil {
		t.Fatal(err)
	}
	token := fleet.Secret()
	env := unlimitedEnv()
	env["STOCK_PAYMENT_TOKEN"] = token + "-pay"
	f, err := fleet.Start(ctx, fleet.Config{Bin: bin, N: 3, DSN: dsn, RedisAddr: testserver.SharedRedis, AdminToken: token,
		Strategy: "lock+version", LogDir: t.TempDir(), Name: "life", Env: env})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Stop() })
	res, err := driver.RunLifecycle(ctx, driver.LifecycleConfig{
		URLs: f.URLs(), AdminToken: token, PaymentToken: token + "-pay", JWTSecret: fleet.JWTSecret,
		Stock: 30, PerBuyerLimit: 1, Window: 1, Rate: 50, Duration: 3 * time.Second, Concurrency: 40,
		MySQLDSN: dsn, Label: "lock+version",
	})
	if err != nil {
		t.Fatalf("RunLifecycle = %v\n%s", err, f.Logs())
	}
	t.Logf("%+v", *res)
	if !res.Passed {
		t.Fatalf("lifecycle run failed: %+v", res.Checks)
	}
	if res.UnitsReturned == 0 || res.Confirms == 0 {
		t.Fatalf("lifecycle run returned %d units and confirmed %d orders; want both", res.UnitsReturned, res.Confirms)
	}
}
