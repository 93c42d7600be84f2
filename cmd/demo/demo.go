package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/skulock"
	"github.com/seckill/stock/loadtest/driver"
	"github.com/seckill/stock/loadtest/fleet"
	"github.com/seckill/stock/loadtest/report"
)

// strategies is every STOCK_STRATEGY, in the order of the README table.
var strategies = service.StrategyNames()

// phase is one scenario run once per strategy.
type phase struct {
	name        string
	title       string
	note        string
	stock       int64
	buyers      int
	concurrency int
	quantity    int
	duration    time.Duration
	safetyOnly  bool              // a run must be safe; buyers giving up (SHORT) is a finding, not a failure
	greedy      int               // every greedy-th buyer is greedy (0: none)
	limit       int64             // the SKU's per-buyer limit (0: none)
	env         map[string]string // the instances' settings beyond the strategy
}

type options struct {
	bin        string
	goTool     string
	strategies []string
	phases     []phase
	instances  int
	mysqlBase  string
	redis      string
	out        string
	results    string // a Markdown results file, or ""
	target     string // the make target in its header
	retries    int
	keepDB     bool
	logw       io.Writer
	ceiling    *ceilingOpts   // nil: no ceiling phase
	profile    string         // if set, the throughput phase's lock+version run writes a CPU profile document here
	gates      *gatesOpts     // nil: no gates phase
	wrk        *wrkOptions    // nil: no wrk phase
	lifecycle  *lifecycleOpts // nil: no lifecycle phase
	outbox     *outboxOpts    // nil: no outbox phase
	open       *openOpts      // nil: no open phase
}

// ceilingOpts sizes the ceiling phase.
type ceilingOpts struct {
	concurrency int
	duration    time.Duration
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 3 && args[1] == crowdCommand {
		return runCrowd(ctx, args[2], stdout)
	}
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.bin == "" {
		dir, err := os.MkdirTemp("", "stock-demo-")
		if err != nil {
			return err
		}
		defer func() { _ = os.RemoveAll(dir) }()
		_, _ = fmt.Fprintln(o.logw, "demo: building cmd/stock")
		if o.bin, err = fleet.Build(ctx, o.goTool, dir); err != nil {
			return err
		}
	}
	rep, err := demo(ctx, o, stdout)
	if err != nil {
		return err
	}
	if err := writeReports(ctx, o, rep, stdout); err != nil {
		return err
	}
	if !rep.Passed {
		return errors.New("at least one run did not show what it should (see FAIL, or SHORT in the sell-out, above)")
	}
	return nil
}

// phaseFlags are the flags that choosePhases turns into o's phases.
type phaseFlags struct {
	strats, phases, gateList *string
	sinkList, prewarmList    *string
	shapeList                *string
	tpRateLimit              *bool
	gates                    gatesOpts
	ceil                     ceilingOpts
	wrk                      wrkOptions
	life                     lifecycleOpts
	outbox                   outboxOpts
	open                     openOpts
	sell, tp                 phase
}

// parseOptions reads the flags into the demo's options.
func parseOptions(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		o          options
		strats     = fs.String("strategies", "all", "comma list of strategies to run, in order; all: every one, in the README's order")
		phases     = fs.String("phases", "ceiling,sellout,throughput", "comma list of phases: ceiling, sellout, throughput, lifecycle, gates, wrk, outbox, open")
		gateList   = fs.String("gates", "all", "gates: comma list of STOCK_LOCK_BACKEND values to compare; all: "+strings.Join(skulock.Gates(), ","))
		sinkList   = fs.String("outbox-sinks", strings.Join(outboxSinks, ","), "outbox: comma list of the sinks of the runs with sinks, of "+strings.Join(outboxSinks, ",")+"; none: the relays alone")
		prewarm    = fs.String("open-prewarm", "0,"+prewarmDefault, "open: comma list of the instances' STOCK_PREWARM, one run of each shape per value; "+prewarmDefault+": unset")
		shapes     = fs.String("open-shapes", "hot,zipf", "open: comma list of the sales to run, of hot (one SKU) and zipf (-open-skus SKUs)")
		pf         = phaseFlags{strats: strats, phases: phases, gateList: gateList, sinkList: sinkList, prewarmList: prewarm, shapeList: shapes, sell: phase{name: "sellout"}, tp: phase{name: "throughput"}}
		quiet      = fs.Bool("q", false, "no progress lines")
		defaultOut = filepath.Join("loadtest", "out")
	)
	fs.StringVar(&o.bin, "bin", "", "the stock binary (default: go build ./cmd/stock into a temporary directory)")
	fs.StringVar(&o.goTool, "go", "go", "the go command, to build the binary when -bin is not given")
	fs.IntVar(&o.instances, "instances", 3, "instances per strategy")
	fs.StringVar(&o.mysqlBase, "mysql", "root@tcp(127.0.0.1:3306)/", "MySQL server, as a DSN without a database; each run gets a fresh database on it")
	fs.StringVar(&o.redis, "redis", "127.0.0.1:6379", "Redis address")
	fs.StringVar(&o.out, "out", defaultOut, "report directory: report.json, report.html and the instances' logs")
	fs.StringVar(&o.results, "results", "", "also write the report as a Markdown results file here (make demo: docs/results/demo.md)")
	fs.StringVar(&o.target, "target", "demo", "the make target named in the results file's header")
	fs.IntVar(&o.retries, "retries", 3, "retries of one order, same key, on 429/502/503/504/no response")
	fs.BoolVar(&o.keepDB, "keep-db", false, "keep each run's database (default: dropped after the run)")
	fs.StringVar(&o.profile, "profile", "", "write a CPU profile of one lock+version instance in the throughput phase to this markdown file (and the raw profile beside it)")
	pf.register(fs)
	if err := fs.Parse(args[1:]); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := o.choosePhases(&pf); err != nil {
		return o, err
	}
	if len(o.strategies) == 0 || len(o.phases) == 0 && o.ceiling == nil && o.gates == nil && o.wrk == nil && o.lifecycle == nil && o.outbox == nil && o.open == nil {
		return o, errors.New("nothing to run: -strategies and -phases must not be empty")
	}
	if o.instances < 1 || o.instances > 16 {
		return o, fmt.Errorf("-instances %d: want 1..16", o.instances)
	}
	o.logw = stderr
	if *quiet {
		o.logw = io.Discard
	}

	return o, nil
}

// register defines the phases' flags on fs.
func (pf *phaseFlags) register(fs *flag.FlagSet) {
	sell, tp, ceil, gates := &pf.sell, &pf.tp, &pf.ceil, &pf.gates
	pf.tpRateLimit = fs.Bool("tp-rate-limit", false, "throughput: run the instances with the sell-out's per-IP rate limit (default: without, like the ceiling's instances)")
	fs.DurationVar(&sell.duration, "duration", 3*time.Minute, "sellout: cap on each run's buying phase")
	fs.Int64Var(&sell.stock, "stock", 1000, "sellout: units of stock")
	fs.IntVar(&sell.buyers, "buyers", 5000, "sellout: buyers, one order each")
	fs.IntVar(&sell.concurrency, "concurrency", 200, "sellout: concurrent buyers")
	fs.IntVar(&sell.quantity, "quantity", 1, "sellout: units per order")
	fs.Int64Var(&tp.stock, "tp-stock", 1_000_000, "throughput: units of stock (enough not to sell out)")
	fs.IntVar(&tp.buyers, "tp-buyers", 20_000, "throughput: buyers")
	fs.IntVar(&tp.concurrency, "tp-concurrency", 200, "throughput: concurrent buyers")
	fs.IntVar(&tp.quantity, "tp-quantity", 1, "throughput: units per order")
	fs.DurationVar(&tp.duration, "tp-duration", time.Minute, "throughput: cap on each run's buying phase")
	fs.Int64Var(&tp.limit, "tp-limit", 0, "throughput: the SKU's per-buyer limit in units (0: none), to measure what enforcing it costs")
	fs.IntVar(&ceil.concurrency, "ceiling-concurrency", 240, "ceiling: concurrent connections")
	fs.DurationVar(&ceil.duration, "ceiling-duration", 5*time.Second, "ceiling: measured time of each request kind (after 1s of warm-up)")
	fs.Int64Var(&gates.stock, "gates-stock", 5000, "gates: units of the exact run, one per buyer")
	fs.IntVar(&gates.concurrency, "gates-concurrency", 200, "gates: concurrent buyers of the exact run")
	fs.Int64Var(&gates.pauseStock, "gates-pause-stock", 200, "gates: units of the pause run (twice as many buyers, 20 concurrent)")
	fs.StringVar(&gates.doc, "gates-doc", "", "gates: also write the comparison as a markdown document here")
	fs.Int64Var(&pf.life.stock, "life-stock", 300, "lifecycle: units of stock")
	fs.IntVar(&pf.life.window, "life-window", 3, "lifecycle: the payment window, seconds")
	fs.Float64Var(&pf.life.rate, "life-rate", 150, "lifecycle: buyers arriving per second")
	fs.DurationVar(&pf.life.duration, "life-duration", 15*time.Second, "lifecycle: how long buyers keep arriving")
	fs.IntVar(&pf.life.concurrency, "life-concurrency", 100, "lifecycle: orders in flight at most")
	fs.IntVar(&pf.wrk.connections, "wrk-connections", 201, "wrk: connections in all, split over the instances")
	fs.DurationVar(&pf.wrk.duration, "wrk-duration", 30*time.Second, "wrk: duration of each request kind, all rounds together (whole seconds per round)")
	fs.IntVar(&pf.wrk.rounds, "wrk-rounds", 3, "wrk: rounds of /healthz then orders, alternated")
	fs.StringVar(&pf.wrk.doc, "wrk-doc", "", "wrk: also write the results as a markdown document here")
	fs.IntVar(&pf.outbox.connections, "outbox-connections", 201, "outbox: wrk connections in all, split over the instances")
	fs.DurationVar(&pf.outbox.duration, "outbox-duration", 15*time.Second, "outbox: measured time of each run (whole seconds)")
	fs.IntVar(&pf.outbox.rounds, "outbox-rounds", 2, "outbox: rounds of one run with sinks off and one with them on")
	fs.DurationVar(&pf.outbox.drain, "outbox-drain", 30*time.Second, "outbox: the longest wait after a run with sinks for every event to reach every receiver")
	fs.StringVar(&pf.outbox.doc, "outbox-doc", "", "outbox: also write the results as a markdown document here")
	pf.registerOpen(fs)
}

// registerOpen defines the open phase's flags on fs.
func (pf *phaseFlags) registerOpen(fs *flag.FlagSet) {
	op := &pf.open
	fs.IntVar(&op.buyers, "open-buyers", 20_000, "open: buyers, each with a connection of its own opened before the start, one order each")
	fs.Int64Var(&op.units, "open-units", 1000, "open: units on sale in each run (the Zipf run spreads them over its SKUs)")
	fs.IntVar(&op.skus, "open-skus", 100, "open: SKUs of the Zipf run (0: the hot-SKU run alone)")
	fs.Float64Var(&op.zipfS, "open-zipf", 1.1, "open: the Zipf law's exponent s (> 1) of the buyers' picks")
	fs.DurationVar(&op.lead, "open-lead", 15*time.Second, "open: how far ahead the admin sets sale_starts_at; every connection must be open by then, and it must exceed STOCK_PREWARM")
	fs.DurationVar(&op.fire, "open-fire", 5*time.Millisecond, "open: buyers send their orders at the start plus this, by the local clock")
	fs.StringVar(&op.strategy, "open-strategy", "lock+version", "open: the instances' STOCK_STRATEGY")
	fs.IntVar(&op.retries, "open-retries", 3, "open: sends again of one order, same key, on a temporary answer (429, 503, sale-not-started)")
	fs.StringVar(&op.doc, "open-doc", "", "open: also write the results as a markdown document here")
	fs.StringVar(&op.profile, "open-profile", "", "open: a directory for a CPU profile and an execution trace of the first instance over each run's first seconds")
}

// choosePhases sets o's strategies and phases from the flags.
func (o *options) choosePhases(pf *phaseFlags) error {
	list := splitList(*pf.strats)
	if *pf.strats == "all" {
		list = strategies
	}
	for _, s := range list {
		if !slices.Contains(strategies, s) {
			return fmt.Errorf("-strategies: unknown strategy %q; want some of %s", s, strings.Join(strategies, ","))
		}
		o.strategies = append(o.strategies, s)
	}
	for _, p := range splitList(*pf.phases) {
		var err error
		switch p {
		case "ceiling":
			o.ceiling = &pf.ceil
		case "sellout":
			o.phases = append(o.phases, sellPhase(pf.sell, o.instances))
		case "throughput":
			o.phases = append(o.phases, throughputPhase(pf.tp, o.instances, *pf.tpRateLimit))
		case "gates":
			err = o.chooseGates(pf)
		case "wrk":
			o.wrk = &pf.wrk
		case "lifecycle":
			o.lifecycle = &pf.life
		case "outbox":
			err = o.chooseSinks(pf)
		case "open":
			err = o.chooseOpen(pf)
		default:
			err = fmt.Errorf("-phases: unknown phase %q; want some of ceiling, sellout, throughput, lifecycle, gates, wrk, outbox, open", p)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// sellPhase is the sell-out phase of sell's flags.
func sellPhase(sell phase, instances int) phase {
	sell.title = fmt.Sprintf("Sell-out: %d units, %d buyers x %d, %d concurrent, %d instances",
		sell.stock, sell.buyers, sell.quantity, sell.concurrency, instances)
	sell.note = fmt.Sprintf("The zero-oversell proof: none and counter (plain writes, nothing serializing them) must be caught by the audit and by MySQL; every other strategy must sell exactly the stock. "+
		"Every %dth buyer orders as one of %d greedy buyers, with a per-buyer limit of %d units: no buyer may end above it. "+
		"The per-IP rate limit is on (%s/s, burst %s), each buyer its own address.",
		demoGreedyEvery, demoGreedyBuyers, 2*sell.quantity, demoEnv["STOCK_RATE_IP"], demoEnv["STOCK_RATE_IP_BURST"])
	sell.greedy, sell.limit, sell.env = demoGreedyEvery, int64(2*sell.quantity), demoEnv
	return sell
}

// throughputPhase is the throughput phase of tp's flags, with the per-IP
// rate limit when rateLimit.
func throughputPhase(tp phase, instances int, rateLimit bool) phase {
	tp.title = fmt.Sprintf("Throughput: %d units, %d buyers x %d, %d concurrent, %d instances",
		tp.stock, tp.buyers, tp.quantity, tp.concurrency, instances)
	tp.note = "The stock does not sell out, so orders/s counts orders, not rejections. none shows lost updates instead of an oversell. " +
		"Runs here must be safe; SHORT means buyers gave up (retries spent, or the cap hit) and is a finding about speed, not safety."
	tp.safetyOnly = true
	tp.env = unlimitedEnv()
	if rateLimit {
		tp.env = demoEnv
		tp.note += fmt.Sprintf(" The per-IP rate limit is on (%s/s, burst %s).", demoEnv["STOCK_RATE_IP"], demoEnv["STOCK_RATE_IP_BURST"])
	} else {
		tp.note += " The instances run as the ceiling's do, without the per-IP rate limit, so orders/s compares with their /healthz rate; the ceiling's two sold-out floods show what the limit costs per request."
	}
	return tp
}

// chooseGates sets the gates phase from -gates.
func (o *options) chooseGates(pf *phaseFlags) error {
	pf.gates.names = splitList(*pf.gateList)
	if *pf.gateList == "all" {
		pf.gates.names = skulock.Gates()
	}
	for _, b := range pf.gates.names {
		if !skulock.ValidGate(b) {
			return fmt.Errorf("-gates: unknown gate %q; want some of %s", b, strings.Join(skulock.Gates(), ","))
		}
	}
	o.gates = &pf.gates
	return nil
}

// chooseSinks sets the outbox phase from -outbox-sinks.
func (o *options) chooseSinks(pf *phaseFlags) error {
	pf.outbox.sinks = nil
	for _, s := range splitList(*pf.sinkList) {
		if s == "none" {
			continue
		}
		if !slices.Contains(outboxSinks, s) {
			return fmt.Errorf("-outbox-sinks: unknown sink %q; want some of %s, or none", s, strings.Join(outboxSinks, ","))
		}
		pf.outbox.sinks = append(pf.outbox.sinks, s)
	}
	o.outbox = &pf.outbox
	return nil
}

// chooseOpen checks the open phase's flags and sets it.
func (o *options) chooseOpen(pf *phaseFlags) error {
	op := &pf.open
	switch {
	case op.buyers < 1 || op.units < 1:
		return fmt.Errorf("-open-buyers %d, -open-units %d: want both >= 1", op.buyers, op.units)
	case op.skus < 0 || op.skus > 10_000 || op.skus > 0 && op.zipfS <= 1:
		return fmt.Errorf("-open-skus %d, -open-zipf %g: want 0..10000 SKUs and s > 1", op.skus, op.zipfS)
	case !slices.Contains(strategies, op.strategy):
		return fmt.Errorf("-open-strategy: unknown strategy %q; want one of %s", op.strategy, strings.Join(strategies, ","))
	}
	op.prewarm = splitList(*pf.prewarmList)
	for _, v := range op.prewarm {
		if _, err := time.ParseDuration(v); err != nil && v != "0" && v != prewarmDefault {
			return fmt.Errorf("-open-prewarm: %q is neither a duration nor %s", v, prewarmDefault)
		}
	}
	if len(op.prewarm) == 0 {
		return errors.New("-open-prewarm: empty")
	}
	op.only = splitList(*pf.shapeList)
	for _, v := range op.only {
		if v != "hot" && v != "zipf" {
			return fmt.Errorf("-open-shapes: unknown sale %q; want hot or zipf", v)
		}
	}
	if len(op.shapes()) == 0 {
		return errors.New("-open-shapes: no sale to run (zipf needs -open-skus > 0)")
	}
	o.open = op
	return nil
}

// writeReports writes the JSON and HTML reports, and the Markdown results
// file if asked.
func writeReports(ctx context.Context, o options, rep report.Report, stdout io.Writer) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil { //nolint:gosec // G301: the report directory, for people to read like the work tree
		return err
	}
	for name, write := range map[string]func(io.Writer, report.Report) error{
		"report.json": func(w io.Writer, r report.Report) error { return report.WriteJSON(w, r) },
		"report.html": report.WriteHTML,
	} {
		if err := report.WriteFile(filepath.Join(o.out, name), func(w io.Writer) error { return write(w, rep) }); err != nil {
			return err
		}
	}
	_, _ = fmt.Fprintf(stdout, "\nreport: %s, %s\n", filepath.Join(o.out, "report.html"), filepath.Join(o.out, "report.json"))
	if o.results != "" {
		if err := os.MkdirAll(filepath.Dir(o.results), 0o755); err != nil { //nolint:gosec // G301: the results directory of the repo, for people to read
			return err
		}
		commit := report.Commit(ctx)
		if err := report.WriteFile(o.results, func(w io.Writer) error { return report.WriteMarkdown(w, rep, o.target, commit) }); err != nil {
			return err
		}
		_, _ = fmt.Fprintf(stdout, "results: %s\n", o.results)
	}
	return nil
}

// demo runs every phase for every strategy and prints each phase's table.
func demo(ctx context.Context, o options, stdout io.Writer) (report.Report, error) {
	runID := driver.NewRunID()
	token := fleet.Secret()
	ceiling, err := demoCeiling(ctx, o, runID, token, stdout)
	if err != nil {
		return report.Report{}, err
	}
	var sections []report.Section
	for _, p := range o.phases {
		sec, err := demoPhase(ctx, o, p, runID, token, ceiling, stdout)
		if err != nil {
			return report.Report{}, err
		}
		sections = append(sections, sec)
	}
	gs, err := demoGates(ctx, o, runID, token, stdout)
	if err != nil {
		return report.Report{}, err
	}
	if gs != nil {
		exact, _ := gatesSections(gs, o.gates)
		sections = append(sections, exact)
	}
	var life []*driver.LifecycleResult
	var lifeNote string
	if o.lifecycle != nil {
		if life, lifeNote, err = runLifecycle(ctx, o, runID, token, stdout); err != nil {
			return report.Report{}, err
		}
	}
	if o.wrk != nil {
		if err := runWrkPhase(ctx, o, runID, token, stdout); err != nil {
			return report.Report{}, fmt.Errorf("wrk: %w", err)
		}
	}
	if o.outbox != nil {
		if err := runOutboxPhase(ctx, o, runID, token, stdout); err != nil {
			return report.Report{}, fmt.Errorf("outbox: %w", err)
		}
	}
	if o.open != nil {
		if err := runOpenPhase(ctx, o, runID, token, stdout); err != nil {
			return report.Report{}, fmt.Errorf("open: %w", err)
		}
	}
	rep := report.NewReport(fmt.Sprintf("seckill demo: %d instances per strategy", o.instances), sections...)
	if gs != nil {
		// Reported, not required: the oversell of a gate without its
		// backstop is the finding.
		_, pause := gatesSections(gs, o.gates)
		rep.Sections = append(rep.Sections, pause)
	}
	rep.Ceiling, rep.CeilingNote = ceiling, strings.Join(ceilingGoals(ceiling), " ")
	if life != nil {
		rep.AddLifecycle(lifeNote, life)
	}
	return rep, nil
}

// demoCeiling measures and prints the ceiling, if o asks for it (nil if not).
func demoCeiling(ctx context.Context, o options, runID, token string, stdout io.Writer) ([]driver.RateResult, error) {
	if o.ceiling == nil {
		return nil, nil
	}
	ceiling, err := measureCeiling(ctx, o, runID, token)
	if err != nil {
		return nil, fmt.Errorf("ceiling: %w", err)
	}
	_, _ = fmt.Fprintf(stdout, "\nCeiling: the same %d instances (lock+version), %d connections, %v each\n", o.instances, o.ceiling.concurrency, o.ceiling.duration)
	for _, r := range ceiling {
		_, _ = fmt.Fprintln(stdout, "  "+r.String())
	}
	for _, line := range ceilingGoals(ceiling) {
		_, _ = fmt.Fprintln(stdout, "  "+line)
	}
	return ceiling, nil
}

// demoPhase runs phase p for every strategy, prints its table and goals,
// and returns its report section.
func demoPhase(ctx context.Context, o options, p phase, runID, token string, ceiling []driver.RateResult, stdout io.Writer) (report.Section, error) {
	var runs []*driver.Result
	for _, s := range o.strategies {
		res, err := demoRun(ctx, o, p, s, runID, token, ceiling, stdout)
		if err != nil {
			return report.Section{}, err
		}
		runs = append(runs, res)
		if !res.Passed {
			_, _ = fmt.Fprintf(o.logw, "demo: %s/%s: %s\n", p.name, s, res.Verdict())
			report.WriteSummary(o.logw, res)
		}
	}
	g := goals(runs, p, ceiling)
	_, _ = fmt.Fprintf(stdout, "\n%s\n", p.title)
	if err := report.WriteTable(stdout, runs); err != nil {
		return report.Section{}, err
	}
	for _, line := range g {
		_, _ = fmt.Fprintln(stdout, "  "+line)
	}
	return report.Section{Title: p.title, Note: p.note + " " + strings.Join(g, " "), Runs: runs, SafetyOnly: p.safetyOnly}, nil
}

// demoRun runs strategy s in phase p, with a CPU profile of one instance
// when o asks for one of this run.
func demoRun(ctx context.Context, o options, p phase, s, runID, token string, ceiling []driver.RateResult, stdout io.Writer) (*driver.Result, error) {
	var prof *profiler
	if o.profile != "" && p.name == "throughput" && s == "lock+version" {
		var err error
		if prof, err = newProfiler(ctx); err != nil {
			return nil, err
		}
	}
	res, err := runStrategy(ctx, o, p, s, runID, token, prof)
	if err != nil {
		return nil, fmt.Errorf("%s, %s: %w", p.name, s, err)
	}
	if prof == nil {
		return res, nil
	}
	b, err := prof.wait()
	if err == nil {
		err = writeProfileDoc(ctx, o, prof, b, res, ceiling)
	}
	if err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	_, _ = fmt.Fprintf(stdout, "profile: %s\n", o.profile)
	return res, nil
}

// demoGates runs and prints the gates phase, if o asks for it (nil if not),
// and writes its document.
func demoGates(ctx context.Context, o options, runID, token string, stdout io.Writer) ([]gateResult, error) {
	if o.gates == nil || len(o.gates.names) == 0 {
		return nil, nil
	}
	gs, err := runGates(ctx, o, runID, token)
	if err != nil {
		return nil, err
	}
	_, _ = fmt.Fprintf(stdout, "\nGates: each STOCK_LOCK_BACKEND under lock+version (backstop on), then under lock (backstop off) with its holder paused past the lease\n")
	if err := writeGatesTable(stdout, gs); err != nil {
		return nil, err
	}
	if o.gates.doc != "" {
		if err := writeGatesDoc(ctx, o.gates.doc, o, gs); err != nil {
			return nil, err
		}
		_, _ = fmt.Fprintf(stdout, "gates: %s\n", o.gates.doc)
	}
	return gs, nil
}

// freshDB creates the migrated database name on o's MySQL; drop drops it
// (unless o.keepDB).
func freshDB(ctx context.Context, o options, name string) (dsn string, drop func(), err error) {
	if dsn, err = fleet.DSNFor(o.mysqlBase, name); err != nil {
		return "", nil, err
	}
	if err := fleet.DropDatabase(ctx, dsn); err != nil {
		return "", nil, fmt.Errorf("drop old database: %w", err)
	}
	if err := fleet.Migrate(ctx, o.bin, dsn); err != nil {
		return "", nil, err
	}
	drop = func() {
		if o.keepDB {
			return
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := fleet.DropDatabase(dctx, dsn); err != nil {
			_, _ = fmt.Fprintf(o.logw, "demo: drop database: %v\n", err)
		}
	}
	return dsn, drop, nil
}

// runStrategy is one run: fresh database, o.instances instances, the driver,
// stop, and the instances' exit checked.
func runStrategy(ctx context.Context, o options, p phase, strategy, runID, token string, prof *profiler) (*driver.Result, error) {
	prefix := ""
	if p.name == "throughput" {
		prefix = "tp_"
	}
	dsn, drop, err := freshDB(ctx, o, "stock_demo_"+prefix+dbSafe(strategy)+"_"+runID)
	if err != nil {
		return nil, err
	}
	defer drop()
	fc := fleet.Config{
		Bin: o.bin, N: o.instances, DSN: dsn, RedisAddr: o.redis, AdminToken: token, Strategy: strategy,
		LogDir: filepath.Join(o.out, "logs"), Name: p.name + "-" + dbSafe(strategy), Env: p.env,
	}
	if prof != nil {
		fc.InstanceEnv = prof.env()
	}
	f, err := fleet.Start(ctx, fc)
	if err != nil {
		return nil, err
	}
	defer f.Stop()
	if prof != nil {
		var pids []int
		for _, in := range f.Instances {
			pids = append(pids, in.PID())
		}
		prof.dsn, prof.redisAddr, prof.instances = dsn, o.redis, len(pids)
		prof.procs = []procGroup{
			{fmt.Sprintf("the %d stock instances", len(pids)), func() []int { return pids }},
			{"MySQL (mariadbd, mysqld)", pidsNamed("mariadbd", "mysqld")},
			{"Redis (every redis-server)", pidsNamed("redis-server")},
			{"the load driver (this process)", func() []int { return []int{os.Getpid()} }},
		}
		prof.start(ctx)
	}
	res, err := driver.Run(ctx, driver.Config{
		URLs: f.URLs(), Stock: p.stock, Buyers: p.buyers, Concurrency: p.concurrency, Quantity: p.quantity,
		AdminToken: token, JWTSecret: fleet.JWTSecret, Retries: o.retries, Duration: p.duration, MySQLDSN: dsn, RedisAddr: o.redis,
		ExpectOversell: plainUnguarded(strategy), Label: strategy, Log: o.logw,
		ClientIP: demoClientIP, Greedy: p.greedy, GreedyBuyers: demoGreedyBuyers, PerBuyerLimit: p.limit,
	})
	stopped := f.Stop()
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, f.Logs())
	}
	res.Instances = stopped
	for i, in := range stopped {
		res.AddCheck(fmt.Sprintf("instance %d exited 0 after SIGTERM", i), in.ExitOK, fleet.ErrNotGraceful.Error()+"; log "+f.Instances[i].LogPath)
	}
	return res, nil
}

// plainUnguarded reports whether the strategy writes plain values with
// nothing to serialize its writers (none, counter): its stock row loses
// updates under any load, so its runs pass when the checks catch that.
func plainUnguarded(strategy string) bool {
	info := service.Strategy(strategy).Info()
	return info.Write == service.WritePlain && !info.UsesLock
}

// reportedOnly reports whether the strategy is unsafe but serializes its
// plain writes (lock): an oversell is a finding, not a requirement.
func reportedOnly(strategy string) bool {
	return !service.Strategy(strategy).Info().Safe && !plainUnguarded(strategy)
}

// demoEnv turns on the per-IP rate limit as a real sale would run it; every
// buyer is its own client address (demoClientIP, through X-Forwarded-For,
// believed from the driver on loopback), so ordinary buyers are never
// limited and the limit costs its Redis round trip per request.
var demoEnv = map[string]string{
	"STOCK_RATE_IP":         "20",
	"STOCK_RATE_IP_BURST":   "40",
	"STOCK_TRUSTED_PROXIES": "127.0.0.1",
}

// unlimitedEnv is demoEnv without the rate limit: the ceiling's instances.
func unlimitedEnv() map[string]string {
	env := maps.Clone(demoEnv)
	env["STOCK_RATE_IP"] = "0"
	return env
}

func demoClientIP(buyer int) string {
	return fmt.Sprintf("10.%d.%d.%d", buyer>>16&255, buyer>>8&255, buyer&255)
}

// In the sell-out phase every 10th buyer orders as one of 20 greedy
// identities, with a per-buyer limit of two orders' worth of units.
const (
	demoGreedyEvery  = 10
	demoGreedyBuyers = 20
)

// goals states the performance goals for one phase's runs, with their
// orders/s as a ratio of the ceiling's /healthz rate when it was measured.
func goals(runs []*driver.Result, p phase, ceiling []driver.RateResult) []string {
	var lv, cond, counted *driver.Result
	var peak int64
	for _, r := range runs {
		switch r.Label {
		case "lock+version":
			lv = r
		case "conditional":
			cond = r
		case "counter+conditional":
			counted = r
		}
		for _, in := range r.Instances {
			peak = max(peak, in.PeakRSSBytes)
		}
	}
	met := func(ok bool) string {
		if ok {
			return "MET"
		}
		return "NOT MET"
	}
	var out []string
	if lv != nil && cond != nil && cond.OrdersPerSec > 0 {
		ratio := lv.OrdersPerSec / cond.OrdersPerSec
		want := 0.5
		if p.name == "throughput" {
			want = 3
		}
		out = append(out, fmt.Sprintf("goal lock+version >= %gx conditional orders/s: %.0f vs %.0f = %.2fx, %s.",
			want, lv.OrdersPerSec, cond.OrdersPerSec, ratio, met(ratio >= want)))
	}
	if lv != nil && counted != nil && lv.OrdersPerSec > 0 {
		out = append(out, counterVsLock(counted, lv))
	}
	if h := rateOf(ceiling, ceilingHealthz); h > 0 {
		var parts []string
		for _, r := range runs {
			parts = append(parts, fmt.Sprintf("%s %.3fx", r.Label, r.OrdersPerSec/h))
		}
		out = append(out, fmt.Sprintf("orders/s as a share of the /healthz ceiling (%.0f/s): %s.", h, strings.Join(parts, ", ")))
		if lv != nil && p.name == "throughput" {
			out = append(out, fmt.Sprintf("goal lock+version >= 0.2x the /healthz ceiling: %.3fx, %s.", lv.OrdersPerSec/h, met(lv.OrdersPerSec >= 0.2*h)))
		}
	}
	if lv != nil {
		// The same instances' p99 without an order's work, for scale: a
		// health check, and one MySQL point read.
		var scale []string
		for _, name := range []string{ceilingHealthz, ceilingStock} {
			if c := ceilingRow(ceiling, name); c != nil {
				scale = append(scale, fmt.Sprintf("%s p99 %.1f ms", name, c.Latency.P99))
			}
		}
		line := fmt.Sprintf("goal lock+version p99 < 50 ms at %d concurrent: %.1f ms, %s.", lv.Concurrency, lv.Latency.P99, met(lv.Latency.P99 < 50))
		if len(scale) > 0 {
			line += fmt.Sprintf(" (The ceiling at %d concurrent: %s.)", ceiling[0].Concurrency, strings.Join(scale, ", "))
		}
		out = append(out, line)
	}
	if peak > 0 {
		out = append(out, fmt.Sprintf("goal every instance < 100 MiB RSS: peak %.1f MiB, %s.", float64(peak)/(1<<20), met(peak < 100<<20)))
	}
	return out
}

// counterVsLock is the results' line on one hot SKU: the Redis counter in
// front of MySQL against the lock's batches, by orders/s, p99 and MySQL
// statements per request (the counter spares MySQL the losers, the batches
// spare it round trips per winner).
func counterVsLock(counted, lv *driver.Result) string {
	winner := "lock+version"
	if counted.OrdersPerSec > lv.OrdersPerSec {
		winner = "counter+conditional"
	}
	return fmt.Sprintf("one hot SKU, counter+conditional vs lock+version: %.0f vs %.0f orders/s (%.2fx), p99 %.1f vs %.1f ms, "+
		"MySQL statements per request %s vs %s; %s places more orders/s here.",
		counted.OrdersPerSec, lv.OrdersPerSec, counted.OrdersPerSec/lv.OrdersPerSec, counted.Latency.P99, lv.Latency.P99,
		report.PerRequest(counted.MySQLPerRequest), report.PerRequest(lv.MySQLPerRequest), winner)
}

func dbSafe(s string) string {
	return strings.NewReplacer("+", "_", "-", "_").Replace(s)
}

func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}
