package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/client"
	"github.com/seckill/stock/loadtest/driver"
	"github.com/seckill/stock/loadtest/report"
)

// profiler takes a CPU profile of one instance in the middle of a run:
// instance 0 serves net/http/pprof on a free loopback port, and after
// profileDelay the profile of the next profileSeconds is fetched.
type profiler struct {
	addr  string
	got   chan []byte
	err   chan error
	procs []procGroup // the machine's CPU over the profile's window, by process
	split []cpuShare

	dsn, redisAddr string       // the run's database and Redis, for the window's counters
	instances      int          // the instances the orders spread over
	window         serverCounts // the counters' change over the window
	secs           float64      // the window's length
	allocs         []byte       // instance 0's allocation profile over the window
}

// procGroup is processes whose CPU is counted together.
type procGroup struct {
	name string
	pids func() []int
}

// cpuShare is a group's CPU over the profile's window, in cores.
type cpuShare struct {
	name  string
	cores float64
}

const (
	profileDelay   = 3 * time.Second
	profileSeconds = 5
)

func newProfiler(ctx context.Context) (*profiler, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return &profiler{addr: addr, got: make(chan []byte, 1), err: make(chan error, 1)}, nil
}

// env is instance 0's extra setting.
func (p *profiler) env() []map[string]string {
	return []map[string]string{{"STOCK_PPROF_ADDR": p.addr}}
}

// start fetches the profile in the background.
func (p *profiler) start(ctx context.Context) {
	go func() {
		select {
		case <-ctx.Done():
			p.err <- ctx.Err()
			return
		case <-time.After(profileDelay):
		}
		b, err := p.record(ctx)
		if err != nil {
			p.err <- err
			return
		}
		p.got <- b
	}()
}

// record takes instance 0's CPU and allocation profiles over the next
// profileSeconds, the process groups' CPU and the servers' counters over
// the same window, and returns the CPU profile.
func (p *profiler) record(ctx context.Context) ([]byte, error) {
	pprof, err := client.New("http://" + p.addr)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("mysql", p.dsn)
	if err != nil {
		return nil, err
	}
	defer func() { _ = db.Close() }()
	rdb := redis.NewClient(&redis.Options{Addr: p.redisAddr})
	defer func() { _ = rdb.Close() }()
	c0, err := readCounts(ctx, db, rdb)
	if err != nil {
		return nil, fmt.Errorf("the servers' counters: %w", err)
	}
	before := p.cpu()
	t0 := time.Now()
	allocs := make(chan error, 1)
	go func() {
		var err error
		p.allocs, err = pprof.AllocProfile(ctx, profileSeconds)
		allocs <- err
	}()
	b, err := pprof.CPUProfile(ctx, profileSeconds)
	after := p.cpu()
	p.secs = time.Since(t0).Seconds()
	if aerr := <-allocs; err == nil && aerr != nil {
		err = aerr
	}
	if err != nil {
		return nil, fmt.Errorf("pprof: %w", err)
	}
	c1, err := readCounts(ctx, db, rdb)
	if err != nil {
		return nil, fmt.Errorf("the servers' counters: %w", err)
	}
	p.window = c1.since(c0)
	for i, g := range p.procs {
		p.split = append(p.split, cpuShare{g.name, (after[i] - before[i]) / p.secs})
	}
	return b, nil
}

// cpu is each group's CPU seconds so far.
func (p *profiler) cpu() []float64 { return groupsCPU(p.procs) }

// procCPU is a process's user and system CPU seconds (Linux; 0 elsewhere).
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command (which may hold spaces) start at state.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	var ut, st float64
	_, _ = fmt.Sscan(f[11], &ut)
	_, _ = fmt.Sscan(f[12], &st)
	return (ut + st) / 100 // USER_HZ
}

// pidsNamed is the processes whose command name is one of names.
func pidsNamed(names ...string) func() []int {
	return func() []int {
		var out []int
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			var pid int
			if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
				continue
			}
			comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			if err == nil && slices.Contains(names, strings.TrimSpace(string(comm))) {
				out = append(out, pid)
			}
		}
		return out
	}
}

func (p *profiler) wait() ([]byte, error) {
	select {
	case b := <-p.got:
		return b, nil
	case err := <-p.err:
		return nil, err
	}
}

// profileShares are the parts of an instance's CPU the profile document
// reports: the share of samples whose stack includes a match.
var profileShares = []struct{ name, focus string }{
	{"syscalls (network reads and writes, futex)", `^syscall\.|^internal/runtime/syscall\.|^runtime\.futex`},
	{"MySQL client (go-sql-driver, database/sql)", `go-sql-driver/mysql|^database/sql\.`},
	{"gorm", `^gorm\.io/`},
	{"Redis client (lock, rate limit)", `redis/go-redis`},
	{"HTTP server and gin (all of a request's handling)", `^net/http\.|gin-gonic`},
	{"the order path (internal/service)", `stock/internal/service\.`},
	{"the combiner's queues (internal/combine)", `stock/internal/combine\.`},
	{"the lock (internal/lock)", `stock/internal/lock\.`},
	{"the outbox's relay (internal/outbox)", `stock/internal/outbox`},
	{"JWT verification", `golang-jwt`},
	{"JSON", `^encoding/json\.`},
	{"logging (slog)", `^log/slog\.`},
	{"metrics (Prometheus client)", `prometheus/client_golang`},
	{"tracing (OpenTelemetry)", `go\.opentelemetry\.io/`},
	{"garbage collection", `^runtime\.gcBgMarkWorker|^runtime\.gcAssist|^runtime\.markroot`},
}

var showingRE = regexp.MustCompile(`Showing nodes accounting for [^,]+, ([0-9.]+)% of ([^ ]+) total`)

// pprofTool runs `go tool pprof` on profiles the demo wrote.
type pprofTool struct {
	ctx    context.Context
	goTool string
}

// run returns pprof's output for args on file.
func (t pprofTool) run(file string, args ...string) (string, error) {
	cmd := exec.CommandContext(t.ctx, t.goTool, append([]string{"tool", "pprof"}, append(args, file)...)...) //nolint:gosec // G204: the go tool on the profile the demo wrote
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go tool pprof %v: %w: %s", args, err, stderr.String())
	}
	return out.String(), nil
}

// writeProfileDoc writes the profile document: header, the run it was taken
// in, the machine's CPU, the shares of profileShares, the costs per order,
// pprof's top functions and instance 0's allocation sites. The raw
// profiles go beside it.
func writeProfileDoc(ctx context.Context, o options, p *profiler, profile []byte, res *driver.Result, ceiling []driver.RateResult) error {
	if err := os.MkdirAll(filepath.Dir(o.profile), 0o755); err != nil { //nolint:gosec // G301: the profile document's directory, for people to read
		return err
	}
	pb := strings.TrimSuffix(o.profile, filepath.Ext(o.profile)) + ".pb.gz"
	apb := strings.TrimSuffix(pb, ".pb.gz") + ".allocs.pb.gz"
	if err := os.WriteFile(pb, profile, 0o644); err != nil { //nolint:gosec // G306: the raw profile beside its document, for people to read
		return err
	}
	tool := pprofTool{ctx: ctx, goTool: o.goTool}
	var b strings.Builder
	if err := writeProfileRun(&b, tool, pb, res, ceiling); err != nil {
		return err
	}
	writeMachineCPU(&b, p.split, res.Machine.Cores)
	shares, err := writeShares(&b, tool, pb)
	if err != nil {
		return err
	}
	allocBytes, allocObjects, allocTop := -1.0, -1.0, ""
	if len(p.allocs) > 0 {
		if err := os.WriteFile(apb, p.allocs, 0o644); err != nil { //nolint:gosec // G306: the raw profile beside its document, for people to read
			return err
		}
		if allocBytes, allocObjects, err = allocTotals(tool, apb); err != nil {
			return err
		}
		if allocTop, err = tool.run(apb, "-sample_index=alloc_space", "-top", "-nodecount=25"); err != nil {
			return err
		}
	}
	writePerOrder(&b, p, shares, allocBytes, allocObjects)
	cum, err := tool.run(pb, "-top", "-cum", "-nodecount=40")
	if err != nil {
		return err
	}
	flat, err := tool.run(pb, "-top", "-nodecount=25")
	if err != nil {
		return err
	}
	fmt.Fprintf(&b, "## Top functions by cumulative time\n\n```\n%s```\n\n## Top functions by own time\n\n```\n%s```\n", cum, flat)
	if allocTop != "" {
		fmt.Fprintf(&b, "\n## Instance 0's allocations by function, bytes over the window (`%s`)\n\n```\n%s```\n", filepath.Base(apb), allocTop)
	}
	return os.WriteFile(o.profile, []byte(b.String()), 0o644) //nolint:gosec // G306: a document of the repo, for people to read
}

// writeProfileRun writes the document's header, the run the profile at pb
// was taken in and its samples line.
func writeProfileRun(b *strings.Builder, tool pprofTool, pb string, res *driver.Result, ceiling []driver.RateResult) error {
	b.WriteString(report.Header("CPU profile of one instance at the throughput phase's rate", "profile", report.Commit(tool.ctx), time.Now(), res.Machine))
	fmt.Fprintf(b, "The run: `%s`, %d instances, %d buyers at %d concurrent: %.0f orders/s, p99 %.1f ms, result %s.",
		res.Label, len(res.Instances), res.Buyers, res.Concurrency, res.OrdersPerSec, res.Latency.P99, res.Verdict())
	if h := rateOf(ceiling, ceilingHealthz); h > 0 {
		fmt.Fprintf(b, " The same build's /healthz ceiling: %.0f/s (orders/s = %.3fx of it).", h, res.OrdersPerSec/h)
	}
	fmt.Fprintf(b, "\nThe profile is instance 0's CPU for %d s, %v into the buying phase's start; the raw profile is `%s`.\n\n",
		profileSeconds, profileDelay, filepath.Base(pb))
	top, err := tool.run(pb, "-top", "-nodecount=1")
	if err != nil {
		return err
	}
	if mm := showingRE.FindStringSubmatch(top); mm != nil {
		fmt.Fprintf(b, "Samples: %s of CPU in %d s (%.0f%% of one core).\n\n", mm[2], profileSeconds, cpuPercent(mm[2]))
	}
	return nil
}

// writeMachineCPU writes the process groups' CPU over the window (nothing
// without figures).
func writeMachineCPU(b *strings.Builder, split []cpuShare, cores int) {
	if len(split) == 0 {
		return
	}
	b.WriteString("## Who uses the machine\n\nCPU over the profile's window, in cores (of " + fmt.Sprint(cores) + "), from /proc.\n\n| processes | cores |\n|---|---|\n")
	total := 0.0
	for _, sh := range split {
		fmt.Fprintf(b, "| %s | %.2f |\n", sh.name, sh.cores)
		total += sh.cores
	}
	fmt.Fprintf(b, "| all of these | %.2f |\n\n", total)
}

// writeShares writes each part of profileShares's share of the samples of
// the profile at pb, and returns them (in %, in profileShares's order).
func writeShares(b *strings.Builder, tool pprofTool, pb string) ([]float64, error) {
	b.WriteString("## Where the instance's CPU goes\n\nShare of samples whose stack includes the part (they overlap: a MySQL read is also a syscall).\n\n| part | share of samples |\n|---|---|\n")
	shares := make([]float64, len(profileShares))
	for i, sh := range profileShares {
		// Every node shown: their flat times sum to the focused samples.
		out, err := tool.run(pb, "-top", "-nodecount=1000000", "-focus="+sh.focus)
		if err != nil {
			return nil, err
		}
		share := "0%"
		if mm := showingRE.FindStringSubmatch(out); mm != nil {
			share = mm[1] + "%"
			shares[i], _ = strconv.ParseFloat(mm[1], 64)
		}
		fmt.Fprintf(b, "| %s | %s |\n", sh.name, share)
	}
	b.WriteString("\n")
	return shares, nil
}

// cpuPercent turns pprof's total ("1.23s", "850ms") into a share of one
// core over profileSeconds.
func cpuPercent(total string) float64 {
	d, err := time.ParseDuration(total)
	if err != nil {
		return 0
	}
	return 100 * d.Seconds() / profileSeconds
}
