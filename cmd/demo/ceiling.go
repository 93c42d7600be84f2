package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/seckill/stock/client"
	"github.com/seckill/stock/internal/api"
	"github.com/seckill/stock/internal/auth"
	"github.com/seckill/stock/loadtest/driver"
	"github.com/seckill/stock/loadtest/fleet"
)

// The ceiling phase's measurements, by name.
const (
	ceilingHealthz = "GET /healthz"
	ceilingStock   = "GET /v1/stock/{sku}"
	ceilingSoldOut = "POST /v1/orders, sold out"
	// The same flood with the demo's per-IP rate limit on: one Redis call
	// per request on top.
	ceilingSoldOutLimited = "POST /v1/orders, sold out, rate limit on"
)

// ceilingBuyers is how many buyer tokens the sold-out flood cycles through.
const ceilingBuyers = 1000

// measureCeiling starts o.instances lock+version instances without a rate
// limit and measures, on the same instances one after the other: GET
// /healthz (what an instance answers without touching MySQL or Redis), GET
// /v1/stock/{sku} (one MySQL read), and a flood of orders with fresh keys
// for a sold-out SKU (the sold-out fast path: one MySQL read per order, of
// its key and the stock row, and no line, lock or write). Then the same flood on instances with the demo's per-IP rate
// limit (demoEnv), as the strategies run. Every /v1 request carries its
// own client address.
func measureCeiling(ctx context.Context, o options, runID, token string) ([]driver.RateResult, error) {
	dsn, drop, err := freshDB(ctx, o, "stock_demo_ceiling_"+runID)
	if err != nil {
		return nil, err
	}
	defer drop()
	f, err := ceilingFleet(ctx, o, dsn, token, "ceiling", unlimitedEnv())
	if err != nil {
		return nil, err
	}
	defer func() { f.Stop() }() // the fleet running at the end
	sku, soldOut := "ceiling-"+runID, "soldout-"+runID
	if err := putStock(ctx, f.URLs()[0], token, sku, 1000); err != nil {
		return nil, err
	}
	if err := putStock(ctx, f.URLs()[0], token, soldOut, 0); err != nil {
		return nil, err
	}
	kinds, err := ceilingKinds(runID, sku, soldOut)
	if err != nil {
		return nil, err
	}
	var out []driver.RateResult
	for _, cfg := range kinds {
		if cfg.Name == ceilingSoldOutLimited {
			f.Stop()
			if f, err = ceilingFleet(ctx, o, dsn, token, "ceiling-limited", demoEnv); err != nil {
				return nil, err
			}
		}
		cfg.URLs, cfg.Concurrency, cfg.Duration, cfg.MySQLDSN = f.URLs(), o.ceiling.concurrency, o.ceiling.duration, dsn
		_, _ = fmt.Fprintf(o.logw, "demo: ceiling: %s\n", cfg.Name)
		r, err := driver.MeasureRate(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: %w\n%s", cfg.Name, err, f.Logs())
		}
		out = append(out, r)
	}
	return out, nil
}

// ceilingFleet starts the ceiling's lock+version instances, named name,
// with env.
func ceilingFleet(ctx context.Context, o options, dsn, token, name string, env map[string]string) (*fleet.Fleet, error) {
	return fleet.Start(ctx, fleet.Config{
		Bin: o.bin, N: o.instances, DSN: dsn, RedisAddr: o.redis, AdminToken: token, Strategy: "lock+version",
		LogDir: filepath.Join(o.out, "logs"), Name: name, Env: env,
	})
}

// ceilingKinds is the ceiling's measurements, without their URLs and
// bounds: GET /healthz, GET the stock of sku, and the two floods of
// orders for soldOut (each order with a key of its own, the buyers'
// tokens taken in turn); every /v1 request claims its own client address.
func ceilingKinds(runID, sku, soldOut string) ([]driver.RateConfig, error) {
	tokens := make([]string, ceilingBuyers)
	for i := range tokens {
		var err error
		if tokens[i], err = auth.Mint([]byte(fleet.JWTSecret), fmt.Sprintf("ceiling-%s-%d", runID, i), time.Hour, "", ""); err != nil {
			return nil, err
		}
	}
	clientIP := func(i int64) string { return demoClientIP(int(i % (1 << 24))) }
	flood := func(name, prefix string) driver.RateConfig {
		return driver.RateConfig{Name: name, Method: http.MethodPost, Path: api.Orders, Want: http.StatusConflict, ClientIP: clientIP,
			Send: func(ctx context.Context, c *client.Client, i int64) (int, error) {
				p, err := c.As(tokens[i%ceilingBuyers]).Place(ctx, fmt.Sprintf("%s%s-%d", prefix, runID, i), soldOut, 1)
				return driver.PlacedStatus(p), err
			}}
	}
	return []driver.RateConfig{
		{Name: ceilingHealthz, Path: api.Healthz, Send: func(ctx context.Context, c *client.Client, _ int64) (int, error) {
			return http.StatusOK, c.Healthz(ctx)
		}},
		{Name: ceilingStock, Path: api.Path(api.Stock, sku), ClientIP: clientIP, Send: func(ctx context.Context, c *client.Client, _ int64) (int, error) {
			_, err := c.Stock(ctx, sku)
			return http.StatusOK, err
		}},
		flood(ceilingSoldOut, "c"),
		flood(ceilingSoldOutLimited, "l"), // on a fleet of its own: see measureCeiling
	}, nil
}

// putStock sets sku's stock to n through the instance at url.
func putStock(ctx context.Context, url, token, sku string, n int64) error {
	c, err := client.New(url, client.WithToken(token))
	if err != nil {
		return err
	}
	if _, err := c.SetStock(ctx, sku, client.StockSetting{Available: n}); err != nil {
		return fmt.Errorf("set stock of %s: %w", sku, err)
	}
	return nil
}

// rateOf is the per-second rate of the named measurement, 0 if absent.
func rateOf(rs []driver.RateResult, name string) float64 {
	if r := ceilingRow(rs, name); r != nil {
		return r.PerSec
	}
	return 0
}

// ceilingRow is the ceiling measurement called name, or nil.
func ceilingRow(rs []driver.RateResult, name string) *driver.RateResult {
	for i := range rs {
		if rs[i].Name == name {
			return &rs[i]
		}
	}
	return nil
}

// ceilingGoals states the sold-out goal: 409s at >= 0.5x the /healthz
// rate, with at most one MySQL statement per order (the pre-check read).
func ceilingGoals(rs []driver.RateResult) []string {
	h := rateOf(rs, ceilingHealthz)
	if h == 0 {
		return nil
	}
	var out []string
	for _, r := range rs {
		if r.Name != ceilingSoldOut && r.Name != ceilingSoldOutLimited {
			continue
		}
		verdict := "NOT MET"
		if r.PerSec >= 0.5*h && r.MySQLPerRequest >= 0 && r.MySQLPerRequest < 1.05 {
			verdict = "MET"
		}
		out = append(out, fmt.Sprintf("goal %s: 409s >= 0.5x the /healthz ceiling with one MySQL read per order: %.0f vs %.0f/s = %.2fx, %.3f MySQL statements per order, %s.",
			r.Name, r.PerSec, h, r.PerSec/h, r.MySQLPerRequest, verdict))
	}
	return out
}
