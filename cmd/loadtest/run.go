package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/seckill/stock/loadtest/driver"
	"github.com/seckill/stock/loadtest/report"
)

// errFailed is returned when the run completed but did not pass.
var errFailed = errors.New("the run failed its checks")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		urls     = fs.String("urls", "http://127.0.0.1:8080", "comma list of base URLs (loopback only); buyers are spread over them")
		cfg      driver.Config
		jsonPath = fs.String("json", "", "write the result as JSON to this file")
		htmlPath = fs.String("html", "", "write an HTML report with charts to this file")
		quiet    = fs.Bool("q", false, "no progress lines on stderr")
	)
	fs.StringVar(&cfg.SKU, "sku", "", "SKU to sell (default: a fresh seckill-<run id>)")
	fs.Int64Var(&cfg.Stock, "stock", 1000, "units to set through the admin API before the run")
	fs.IntVar(&cfg.Buyers, "buyers", 5000, "buyers, one order each")
	fs.IntVar(&cfg.Concurrency, "concurrency", 200, "concurrent buyers")
	fs.IntVar(&cfg.Quantity, "quantity", 1, "units per order")
	fs.StringVar(&cfg.AdminToken, "admin-token", "", "bearer token of the admin API (required)")
	fs.StringVar(&cfg.JWTSecret, "jwt-secret", os.Getenv("STOCK_JWT_SECRET"), "the instances' STOCK_JWT_SECRET, to sign each buyer's token (default $STOCK_JWT_SECRET)")
	fs.Int64Var(&cfg.PerBuyerLimit, "limit", 0, "the SKU's per-buyer limit in units (0: none)")
	fs.IntVar(&cfg.Greedy, "greedy", 0, "every Nth buyer orders as one of -greedy-buyers shared identities (0: none)")
	fs.IntVar(&cfg.GreedyBuyers, "greedy-buyers", 20, "greedy identities")
	fs.DurationVar(&cfg.Duration, "duration", 2*time.Minute, "cap on the buying phase")
	fs.StringVar(&cfg.MySQLDSN, "mysql-dsn", "", "also verify in MySQL directly: DSN of the service's database")
	fs.StringVar(&cfg.RedisAddr, "redis", "", "Redis address, only to report its version")
	fs.IntVar(&cfg.Retries, "retries", 3, "retries of one order, same key, on 429/502/503/504/no response")
	fs.BoolVar(&cfg.ExpectOversell, "expect-oversell", false, "pass only if an oversell is detected (for the unsafe strategy)")
	fs.StringVar(&cfg.Label, "label", "", "name of the run in the report (e.g. the strategy)")
	fs.DurationVar(&cfg.RequestTimeout, "request-timeout", 10*time.Second, "timeout of one HTTP request")
	fs.DurationVar(&cfg.ReadyTimeout, "ready-timeout", 30*time.Second, "how long to wait for every /readyz")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, u := range strings.Split(*urls, ",") {
		if u = strings.TrimSpace(u); u != "" {
			cfg.URLs = append(cfg.URLs, u)
		}
	}
	if !*quiet {
		cfg.Log = stderr
	}

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := driver.Run(ctx, cfg)
	if err != nil {
		return err
	}
	report.WriteSummary(stdout, res)
	rep := report.NewReport("seckill: "+res.Label, report.Section{Title: res.Label, Runs: []*driver.Result{res}})
	if *jsonPath != "" {
		if err := report.WriteFile(*jsonPath, func(w io.Writer) error { return report.WriteJSON(w, rep) }); err != nil {
			return err
		}
	}
	if *htmlPath != "" {
		if err := report.WriteFile(*htmlPath, func(w io.Writer) error { return report.WriteHTML(w, rep) }); err != nil {
			return err
		}
	}
	if !res.Passed {
		return errFailed
	}
	return nil
}
