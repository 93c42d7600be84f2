package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

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
	unlimited := unlimitedEnv()
	f, err := fleet.Start(ctx, fleet.Config{
		Bin: o.bin, N: o.instances, DSN: dsn, RedisAddr: o.redis, AdminToken: token, Strategy: "lock+version",
		LogDir: filepath.Join(o.out, "logs"), Name: "ceiling", Env: unlimited,
	})
	if err != nil {
		return nil, err
	}
	defer f.Stop()
	urls := f.URLs()
	sku, soldOut := "ceiling-"+runID, "soldout-"+runID
	for _, st := range []struct {
		sku string
		n   int
	}{{sku, 1000}, {soldOut, 0}} {
		if err := putStock(ctx, urls[0], token, st.sku, st.n); err != nil {
			return nil, err
		}
	}
	tokens := make([]string, ceilingBuyers)
	for i := range tokens {
		if tokens[i], err = auth.Mint([]byte(fleet.JWTSecret), fmt.Sprintf("ceiling-%s-%d", runID, i), time.Hour, "", ""); err != nil {
			return nil, err
		}
	}
	clientIP := func(i int64, h http.Header) { h.Set("X-Forwarded-For", demoClientIP(int(i%(1<<24)))) }
	body := []byte(fmt.Sprintf(`{"sku":%q,"quantity":1}`, soldOut))
	base := driver.RateConfig{URLs: urls, Concurrency: o.ceiling.concurrency, Duration: o.ceiling.duration, MySQLDSN: dsn}
	// flood is orders of the sold-out SKU, each with a key of its own.
	flood := func(name, prefix string) driver.RateConfig {
		return driver.RateConfig{Name: name, Method: http.MethodPost, Path: "/v1/orders", Want: http.StatusConflict,
			Body: func(int64) []byte { return body },
			Header: func(i int64, h http.Header) {
				clientIP(i, h)
				h.Set("Authorization", "Bearer "+tokens[i%ceilingBuyers])
				h.Set("Content-Type", "application/json")
				h.Set("Idempotency-Key", fmt.Sprintf("%s%s-%d", prefix, runID, i))
			}}
	}
	kinds := []driver.RateConfig{
		{Name: ceilingHealthz, Path: "/healthz"},
		{Name: ceilingStock, Path: "/v1/stock/" + sku, Header: clientIP},
		flood(ceilingSoldOut, "c"),
		flood(ceilingSoldOutLimited, "l"), // on the second fleet: see the loop
	}
	var out []driver.RateResult
	for _, k := range kinds {
		if k.Name == ceilingSoldOutLimited {
			f.Stop()
			if f, err = fleet.Start(ctx, fleet.Config{
				Bin: o.bin, N: o.instances, DSN: dsn, RedisAddr: o.redis, AdminToken: token, Strategy: "lock+version",
				LogDir: filepath.Join(o.out, "logs"), Name: "ceiling-limited", Env: demoEnv,
			}); err != nil {
				return nil, err
			}
			defer f.Stop()
			base.URLs = f.URLs()
		}
		cfg := base
		cfg.Name, cfg.Method, cfg.Path, cfg.Want, cfg.Body, cfg.Header = k.Name, k.Method, k.Path, k.Want, k.Body, k.Header
		_, _ = fmt.Fprintf(o.logw, "demo: ceiling: %s\n", k.Name)
		r, err := driver.MeasureRate(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: %w\n%s", k.Name, err, f.Logs())
		}
		out = append(out, r)
	}
	return out, nil
}

func putStock(ctx context.Context, url, token, sku string, n int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url+"/v1/admin/stock/"+sku, bytes.NewReader([]byte(fmt.Sprintf(`{"available":%d}`, n))))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("set stock of %s: %s", sku, resp.Status)
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
