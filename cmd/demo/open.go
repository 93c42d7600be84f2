package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seckill/stock/client"
	"github.com/seckill/stock/internal/auth"
	"github.com/seckill/stock/loadtest/driver"
	"github.com/seckill/stock/loadtest/fleet"
)

// The open phase measures a sale's opening second: buyers spread over the
// instances, each with its own HTTP connection opened (and used once, for
// GET /healthz) before the start the admin set a few seconds ahead, all
// ordering at that instant. The answers' speed comes from the buyers; the
// sale's exactness and the time to its last unit from MySQL and the audit;
// its fairness from which buyers won. Each shape of sale (one hot SKU, and
// SKUs picked by a Zipf law) runs once per STOCK_PREWARM value.

// openOpts sizes the open phase.
type openOpts struct {
	buyers   int           // buyers, one connection and one order each
	units    int64         // units on sale in each run (the Zipf run spreads them over its SKUs)
	skus     int           // SKUs of the Zipf run (0: no Zipf run)
	zipfS    float64       // the Zipf law's exponent
	lead     time.Duration // how far ahead of the stocking the start is set
	fire     time.Duration // buyers send at the start plus this
	prewarm  []string      // STOCK_PREWARM of each run of a shape; "default" leaves it unset
	only     []string      // the shapes to run, of "hot" and "zipf"
	profile  string        // if set, a directory for CPU profiles and traces of the first instance's opening
	strategy string
	retries  int    // sends again of one order, same key, on a temporary answer
	doc      string // the results file
}

// prewarmDefault is the -open-prewarm value that leaves STOCK_PREWARM unset.
const prewarmDefault = "default"

// openShape is what a run sells: its SKUs' units and each buyer's SKU.
type openShape struct {
	name  string  // "hot" or "zipf"
	units []int64 // units of SKU k
	picks []int   // SKU of buyer i
}

// shapes are the runs' shapes of oo.only: one hot SKU, then (if oo.skus >
// 0) the Zipf-picked SKUs.
func (oo openOpts) shapes() []openShape {
	var out []openShape
	if slices.Contains(oo.only, "hot") {
		out = append(out, openShape{name: "hot", units: []int64{oo.units}, picks: make([]int, oo.buyers)})
	}
	if oo.skus > 0 && slices.Contains(oo.only, "zipf") {
		out = append(out, openShape{name: "zipf", units: spreadUnits(oo.units, oo.skus), picks: zipfPicks(oo.buyers, oo.skus, oo.zipfS, 44)})
	}
	return out
}

// openRun is one run's setting and figures.
type openRun struct {
	shape   string
	prewarm string
	openFigures
}

// measureOpen runs each shape once per STOCK_PREWARM value, on fresh
// instances over a fresh database each time.
func measureOpen(ctx context.Context, o options, runID, token string) ([]openRun, driver.Machine, error) {
	oo := o.open
	var runs []openRun
	var m driver.Machine
	for _, shape := range oo.shapes() {
		for _, pw := range oo.prewarm {
			_, _ = fmt.Fprintf(o.logw, "demo: open: %s, STOCK_PREWARM %s, %d buyers\n", shape.name, pw, oo.buyers)
			fig, machine, err := openOnce(ctx, o, shape, pw, runID, token)
			if err != nil {
				return nil, m, fmt.Errorf("%s, STOCK_PREWARM %s: %w", shape.name, pw, err)
			}
			m = machine
			runs = append(runs, openRun{shape: shape.name, prewarm: pw, openFigures: fig})
		}
	}
	return runs, m, nil
}

// openEnv is the instances' settings: no rate limit, the connection,
// in-flight and per-SKU queue caps above the buyers each instance takes
// (what a shop expecting the crowd sets), and STOCK_PREWARM
// unless it is to stay at its default.
func openEnv(o options, prewarm string) map[string]string {
	env := unlimitedEnv()
	per := strconv.Itoa((o.open.buyers+o.instances-1)/o.instances + 256)
	maps.Copy(env, map[string]string{"STOCK_MAX_CONNS": per, "STOCK_MAX_INFLIGHT": per, "STOCK_QUEUE_MAX": per})
	if prewarm != prewarmDefault {
		env["STOCK_PREWARM"] = prewarm
	}
	return env
}

// openOnce is one run: a fresh database and instances, the SKUs stocked
// with their start oo.lead ahead, every buyer's connection opened, the
// orders at the start, then the audits, the instances stopped, and the
// checks from MySQL.
func openOnce(ctx context.Context, o options, shape openShape, prewarm, runID, token string) (openFigures, driver.Machine, error) {
	var fig openFigures
	tag := runID + "-" + shape.name + dbSafe(prewarm)
	dsn, drop, err := freshDB(ctx, o, "stock_demo_open_"+dbSafe(tag))
	if err != nil {
		return fig, driver.Machine{}, err
	}
	defer drop()
	prof, err := newOpenProfiler(o.open.profile)
	if err != nil {
		return fig, driver.Machine{}, err
	}
	defer prof.close()
	name := "open-" + shape.name + "-" + dbSafe(prewarm)
	f, err := fleet.Start(ctx, fleet.Config{
		Bin: o.bin, N: o.instances, DSN: dsn, RedisAddr: o.redis, AdminToken: token, Strategy: o.open.strategy,
		LogDir: filepath.Join(o.out, "logs"), Name: name, Env: openEnv(o, prewarm), InstanceEnv: prof.instanceEnv(),
	})
	if err != nil {
		return fig, driver.Machine{}, err
	}
	defer f.Stop()
	skus := make([]string, len(shape.units))
	for k := range skus {
		skus[k] = fmt.Sprintf("open-%s-%03d", tag, k)
	}
	var pids []int
	for _, in := range f.Instances {
		pids = append(pids, in.PID())
	}
	if fig, err = openSale(ctx, o, f.URLs(), pids, token, shape, skus, tag, prof.around(ctx, name)); err != nil {
		return fig, driver.Machine{}, err
	}
	if fig.audits, err = auditAll(ctx, f.URLs()[0], token, skus); err != nil {
		return fig, driver.Machine{}, err
	}
	// Stopped first, the instances' pools give their MySQL connections
	// back: the server's are shared.
	fig.exitOK = true
	for _, in := range f.Stop() {
		fig.exitOK = fig.exitOK && in.ExitOK
	}
	for _, in := range f.Instances {
		fig.logErrors(in.LogPath)
	}
	if fig.db, err = readOpenDB(ctx, dsn, skus); err != nil {
		return fig, driver.Machine{}, err
	}
	fig.fairness()
	return fig, driver.DetectMachine(ctx, dsn, o.redis), nil
}

// openSale stocks the SKUs with a start oo.lead from now, starts the
// crowd processes, which open the buyers' connections and order at the
// start, and returns the buyers' figures (the database's are the
// caller's); pids are the instances'.
func openSale(ctx context.Context, o options, urls []string, pids []int, token string, shape openShape, skus []string, tag string,
	profile func(start time.Time) (wait func() error)) (openFigures, error) {
	oo := o.open
	specs, groups, keys, err := crowdSpecs(urls, shape, skus, tag, *oo)
	if err != nil {
		return openFigures{}, err
	}
	dir, err := os.MkdirTemp("", "stock-open-")
	if err != nil {
		return openFigures{}, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	start := time.Now().Add(oo.lead).Truncate(time.Millisecond)
	if err := stockOpen(ctx, urls[0], token, skus, shape.units, start); err != nil {
		return openFigures{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, oo.lead+2*time.Minute)
	defer cancel()
	t0 := time.Now()
	procs, err := startCrowds(cctx, dir, specs, groups, start, o.logw)
	warmUp := time.Since(t0)
	if err == nil && time.Until(start) < 500*time.Millisecond {
		err = fmt.Errorf("opening %d connections took %v, too close to the start: raise -open-lead", len(keys), warmUp.Round(time.Millisecond))
	}
	if err != nil {
		cancel()
		for _, p := range procs {
			_, _ = p.wait()
		}
		return openFigures{}, err
	}
	profiled := profile(start)
	fig, err := collectSale(ctx, procs, start, keys, procGroups(pids))
	if err := errors.Join(err, profiled()); err != nil {
		return fig, err
	}
	fig.warmUp = warmUp
	fig.finish(shape, oo.units)
	return fig, nil
}

// cpuGroups name the groups of a run's CPU, in the order reported.
var cpuGroups = []string{"instances", "crowds", "MySQL", "Redis", cpuRest}

// cpuRest is the box's busy time beyond the other groups'.
const cpuRest = "rest of the box"

// procGroups are the process groups whose CPU a run reports: the
// instances (pids), MySQL and Redis (shared with whatever else runs on
// the box).
func procGroups(pids []int) []procGroup {
	return []procGroup{
		{"instances", func() []int { return pids }},
		{"MySQL", pidsNamed("mariadbd", "mysqld")},
		{"Redis", pidsNamed("redis-server")},
	}
}

// collectSale waits for the start, then for every crowd process, and
// gathers their buyers' results (keys[i] is buyer i's key) with the CPU
// the groups, the crowds and the rest of the box used meanwhile.
func collectSale(ctx context.Context, procs []*crowdProc, start time.Time, keys []string, groups []procGroup) (openFigures, error) {
	waitUntil(ctx, start)
	f := openFigures{load: loadAvg(), start: start, crowds: len(procs), keys: keys, results: make([]buyerResult, len(keys))}
	before, box := groupsCPU(groups), boxCPU()
	var crowds float64
	for _, p := range procs {
		res, err := p.wait()
		if err != nil {
			return f, err
		}
		crowds += res.CPU
		for j, i := range p.buyers {
			f.results[i] = res.Buyers[j]
		}
	}
	f.cpuWindow = time.Since(start)
	after := groupsCPU(groups)
	rest := boxCPU() - box - crowds
	f.cpu = map[string]float64{"crowds": crowds}
	for i, g := range groups {
		f.cpu[g.name] = after[i] - before[i]
		rest -= after[i] - before[i]
	}
	f.cpu[cpuRest] = max(rest, 0)
	return f, nil
}

// crowdSpecs deals the buyers of shape into crowds, buyer i ordering from
// instance i%len(urls) with a token and a key of its own: groups[k] are
// the buyers of specs[k], keys[i] is buyer i's key. Each spec's Start is
// the caller's.
func crowdSpecs(urls []string, shape openShape, skus []string, tag string, oo openOpts) (specs []crowdSpec, groups [][]int, keys []string, err error) {
	keys = make([]string, len(shape.picks))
	groups = splitCrowds(len(shape.picks), crowdMax)
	specs = make([]crowdSpec, len(groups))
	for k, g := range groups {
		specs[k] = crowdSpec{Fire: oo.fire, Retries: oo.retries, Buyers: make([]crowdBuyer, len(g))}
		for j, i := range g {
			tok, err := auth.Mint([]byte(fleet.JWTSecret), tag+"-b"+strconv.Itoa(i), time.Hour, "", "")
			if err != nil {
				return nil, nil, nil, err
			}
			keys[i] = tag + "-" + strconv.Itoa(i)
			specs[k].Buyers[j] = crowdBuyer{URL: urls[i%len(urls)], SKU: skus[shape.picks[i]], Key: keys[i], Token: tok}
		}
	}
	return specs, groups, keys, nil
}

// startCrowds starts a process per spec (groups[k] the buyers of
// specs[k]), the sale starting at start, and waits until each has opened
// its connections (or failed); it returns the processes started, for the
// caller to wait for.
func startCrowds(ctx context.Context, dir string, specs []crowdSpec, groups [][]int, start time.Time, logw io.Writer) ([]*crowdProc, error) {
	var procs []*crowdProc
	for k, spec := range specs {
		spec.Start = start
		p, err := startCrowd(ctx, dir, k, spec, groups[k], logw)
		if err != nil {
			return procs, err
		}
		procs = append(procs, p)
	}
	for k, p := range procs {
		if err := <-p.ready; err != nil {
			return procs, fmt.Errorf("crowd %d: %w", k, err)
		}
	}
	return procs, nil
}

// stockOpen sets each SKU's units and the sale's start, as the admin does.
func stockOpen(ctx context.Context, url, token string, skus []string, units []int64, start time.Time) error {
	c, err := client.New(url, client.WithToken(token))
	if err != nil {
		return err
	}
	for k, sku := range skus {
		if _, err := c.SetStock(ctx, sku, client.StockSetting{Available: units[k], SaleStartsAt: &start}); err != nil {
			return fmt.Errorf("set stock of %s: %w", sku, err)
		}
	}
	return nil
}

// auditAll is the audit of each SKU.
func auditAll(ctx context.Context, url, token string, skus []string) ([]client.Audit, error) {
	out := make([]client.Audit, len(skus))
	for k, sku := range skus {
		a, err := getAudit(ctx, url, token, sku)
		if err != nil {
			return nil, fmt.Errorf("audit of %s: %w", sku, err)
		}
		out[k] = a
	}
	return out, nil
}

// runOpenPhase measures, prints each run and the goals, and writes the
// results file if asked. A broken sale (oversold, units unaccounted for,
// an audit inconsistent) is an error; a missed speed goal is reported.
func runOpenPhase(ctx context.Context, o options, runID, token string, stdout io.Writer) error {
	runs, m, err := measureOpen(ctx, o, runID, token)
	if err != nil {
		return err
	}
	knows := binaryKnows(o.bin, "STOCK_PREWARM")
	_, _ = fmt.Fprintf(stdout, "\nOpening: %d buyers over %d instances (%s), connections open before the start\n", o.open.buyers, o.instances, o.open.strategy)
	var broken []string
	for _, r := range runs {
		_, _ = fmt.Fprintln(stdout, "  "+r.line())
		if p := r.problems(); len(p) > 0 {
			broken = append(broken, fmt.Sprintf("%s/%s: %v", r.shape, r.prewarm, p))
		}
	}
	for _, l := range openNotes(runs, knows) {
		_, _ = fmt.Fprintln(stdout, "  "+l)
	}
	if o.open.doc != "" {
		if err := writeOpenDoc(ctx, o, runs, m, knows); err != nil {
			return err
		}
		_, _ = fmt.Fprintf(stdout, "open: %s\n", o.open.doc)
	}
	if len(broken) > 0 {
		return fmt.Errorf("the sale's checks failed: %v", broken)
	}
	return nil
}

// binaryKnows reports whether the binary at path holds name (a setting's
// variable is a string in it), so a run can say whether a setting it
// passes is one the binary reads.
func binaryKnows(path, name string) bool {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the binary under test
	return err == nil && bytes.Contains(b, []byte(name))
}

// loadAvg is the box's 1, 5 and 15 minute load averages, "-" if unknown:
// the other tenants' share of the cores shows there.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "-"
}

// boxCPU is the CPU seconds the whole box has been busy (every core's
// time but idle and iowait, from /proc/stat), 0 if unknown.
func boxCPU() float64 {
	b, err := os.ReadFile("/proc/stat")
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if err != nil || len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var busy float64
	for i, v := range f[1:9] {
		var n float64
		_, _ = fmt.Sscan(v, &n)
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy / 100 // USER_HZ
}
