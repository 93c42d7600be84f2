package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seckill/stock/events"
	"github.com/seckill/stock/loadtest/driver"
	"github.com/seckill/stock/loadtest/fleet"
	"github.com/seckill/stock/loadtest/report"
)

// The outbox phase prices the outbox's delivery: hot-SKU orders/s under
// wrk, as the wrk phase measures them, on instances whose relays deliver
// every event to NATS JetStream and to a webhook (the feed is always on)
// against instances with no relay and no sinks; the events' lag from their
// commit to a receiver; and the outbox rows written per order. Both sides
// write their events (a change and its event commit together), so the
// ratio is the cost of the relays and sinks, not of the writes.

// outboxOpts sizes the outbox phase.
type outboxOpts struct {
	connections int           // wrk connections in all, split over the instances
	duration    time.Duration // measured time of each run
	rounds      int           // rounds of one run with sinks off and one with them on
	drain       time.Duration // the longest wait, after a run with sinks, for every event to arrive
	sinks       []string      // the sinks of the runs with sinks: nats, webhook (none: the relay alone)
	doc         string        // the results file
}

// outboxSinks are the sinks the phase can turn on.
var outboxSinks = []string{"nats", "webhook"}

// outboxStream is the NATS sink's stream in the phase's private server.
const outboxStream = "STOCK"

// outboxRun is one run of the phase.
type outboxRun struct {
	on      bool
	round   int     // from 1
	wrk     wrkRun  // the measured time's
	drain   float64 // s, sinks on: from wrk's end until every sink had every event (-1: not within the bound)
	backlog int64   // sinks on: events the slower sink had yet to receive at wrk's end
	// warmDrain is, with sinks, the wait after the warm-up until every
	// sink had its events, in s (-1: not within the bound).
	warmDrain float64
	cpu       []cpuShare
	// box is the whole box's busy cores over the measured time (wrk's
	// included; 0 if unknown).
	box float64
	// received is, per sink, the events it first received per second of
	// the measured time.
	received map[string]float64
}

// outboxRows is what one database's outbox holds for its SKU.
type outboxRows struct {
	orders int64
	byType map[string]int64
}

func (r outboxRows) events() int64 {
	var n int64
	for _, c := range r.byType {
		n += c
	}
	return n
}

// outboxResult is the phase's outcome.
type outboxResult struct {
	machine          driver.Machine
	instances, conns int
	duration         time.Duration // of each run
	drainBound       time.Duration
	runs             []outboxRun
	sinks            []string
	lags             []sinkLag // per sink
	on, off          outboxRows
}

// outboxSide is one side of the comparison: its database, SKU and the
// instances' settings beyond unlimitedEnv.
type outboxSide struct {
	on      bool
	dsn     string
	db      *sql.DB
	sku     string
	env     map[string]string
	stocked bool
}

func (s *outboxSide) name() string {
	if s.on {
		return "on"
	}
	return "off"
}

// measureOutbox starts the NATS server and the webhook receiver, then
// runs o.outbox.rounds rounds of a run with sinks off and one with them on
// (off, on, then on, off, ...: each round's order the reverse of the one
// before, so a steady drift in the machine's load falls on both sides
// alike), each on fresh lock+version instances of its side's database.
func measureOutbox(ctx context.Context, o options, runID, token string) (outboxResult, error) {
	oo := o.outbox
	res := outboxResult{instances: o.instances, duration: oo.duration.Truncate(time.Second), drainBound: oo.drain, sinks: oo.sinks}
	if _, err := exec.LookPath("wrk"); err != nil {
		return res, errors.New("wrk is not installed (Debian: apt-get install -y wrk)")
	}
	dir, err := os.MkdirTemp("", "stock-outbox-")
	if err != nil {
		return res, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	var undo cleanups
	defer undo.run()
	sides := map[bool]*outboxSide{
		false: {env: map[string]string{"STOCK_EVENTS_RELAY": "0"}},
		true:  {on: true, env: map[string]string{"STOCK_EVENTS_RELAY": "1"}},
	}
	sk, err := startOutboxSinks(ctx, o, dir, sides[true].env, &undo)
	if err != nil {
		return res, err
	}
	if err := openOutboxSides(ctx, o, runID, sides, &undo); err != nil {
		return res, err
	}
	files, err := writeWrkFiles(dir, runID)
	if err != nil {
		return res, err
	}
	if res.runs, err = outboxRounds(ctx, o, sides, files, token, runID, sk); err != nil {
		return res, err
	}
	res.conns = max(1, oo.connections/o.instances) * o.instances
	for _, rec := range sk.recs {
		res.lags = append(res.lags, rec.figures())
	}
	if res.on, err = countOutbox(ctx, sides[true]); err != nil {
		return res, err
	}
	if res.off, err = countOutbox(ctx, sides[false]); err != nil {
		return res, err
	}
	res.machine = driver.DetectMachine(ctx, sides[true].dsn, o.redis)
	return res, nil
}

// cleanups are undone in reverse order, as defers are.
type cleanups []func()

func (c *cleanups) add(f func()) { *c = append(*c, f) }

func (c cleanups) run() {
	for i := len(c) - 1; i >= 0; i-- {
		c[i]()
	}
}

// outboxReceivers are the receivers of the runs with sinks: their lag
// recorders and nats-server's pid (nil without NATS).
type outboxReceivers struct {
	recs    []*lagRecorder
	natsPID func() []int
}

// startOutboxSinks starts the sinks of o.outbox.sinks (a private
// nats-server read by a stream reader, the webhook receiver) and sets the
// sinks-on side's env for them; undo stops them.
func startOutboxSinks(ctx context.Context, o options, dir string, env map[string]string, undo *cleanups) (outboxReceivers, error) {
	var sk outboxReceivers
	logDir := filepath.Join(o.out, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil { //nolint:gosec // G301: the logs, for people to read like the work tree
		return sk, err
	}
	if slices.Contains(o.outbox.sinks, "nats") {
		ns, err := startNATS(ctx, filepath.Join(dir, "nats"), filepath.Join(logDir, "outbox-nats.log"))
		if err != nil {
			return sk, err
		}
		undo.add(ns.stop)
		sk.natsPID = func() []int { return []int{ns.cmd.Process.Pid} }
		rec := newLagRecorder("nats")
		stream, err := readStream(ctx, ns.URL, outboxStream, rec)
		if err != nil {
			return sk, err
		}
		undo.add(stream.close)
		sk.recs = append(sk.recs, rec)
		env["STOCK_EVENTS_NATS_URL"], env["STOCK_EVENTS_NATS_STREAM"] = ns.URL, outboxStream
	}
	if slices.Contains(o.outbox.sinks, "webhook") {
		rec := newLagRecorder("webhook")
		secret := fleet.Secret()
		hook, err := startWebhookReceiver(ctx, secret, rec)
		if err != nil {
			return sk, err
		}
		undo.add(func() { hook.close(ctx) })
		sk.recs = append(sk.recs, rec)
		env["STOCK_WEBHOOK_URL"], env["STOCK_WEBHOOK_SECRET"] = hook.URL, secret
	}
	return sk, nil
}

// openOutboxSides gives each side its SKU and a fresh database, opened;
// undo drops them.
func openOutboxSides(ctx context.Context, o options, runID string, sides map[bool]*outboxSide, undo *cleanups) error {
	for _, s := range sides {
		s.sku = "outbox-" + s.name() + "-" + runID
		dsn, drop, err := freshDB(ctx, o, "stock_demo_outbox_"+s.name()+"_"+runID)
		if err != nil {
			return err
		}
		s.dsn = dsn
		undo.add(drop)
		if s.db, err = sql.Open("mysql", s.dsn); err != nil {
			return err
		}
		db := s.db
		undo.add(func() { _ = db.Close() })
	}
	return nil
}

// outboxRounds runs the rounds: off then on, then on then off, ...
func outboxRounds(ctx context.Context, o options, sides map[bool]*outboxSide, files wrkFiles, token, runID string, sk outboxReceivers) ([]outboxRun, error) {
	var runs []outboxRun
	order := []bool{false, true}
	for round := 1; round <= max(1, o.outbox.rounds); round++ {
		for _, on := range order {
			r, err := outboxOnce(ctx, o, sides[on], round, files, token, runID, sk.recs, sk.natsPID)
			if err != nil {
				return nil, fmt.Errorf("round %d, sinks %s: %w", round, sides[on].name(), err)
			}
			runs = append(runs, r)
		}
		slices.Reverse(order)
	}
	return runs, nil
}

// outboxOnce is one run: fresh instances of side s, the SKU stocked on the
// side's first run, 2s of uncounted orders, the measured orders, and with
// sinks the wait for every event to arrive.
func outboxOnce(ctx context.Context, o options, s *outboxSide, round int, files wrkFiles, token, runID string, recs []*lagRecorder, natsPID func() []int) (outboxRun, error) {
	run := outboxRun{on: s.on, round: round}
	_, _ = fmt.Fprintf(o.logw, "demo: outbox: round %d, sinks %s\n", round, s.name())
	f, err := startOutboxFleet(ctx, o, s, round, token)
	if err != nil {
		return run, err
	}
	defer f.Stop()
	urls := f.URLs()
	per := max(1, o.outbox.connections/len(urls))
	env2 := func(prefix string) func(i int) []string {
		return func(i int) []string {
			return []string{"WRK_TOKENS=" + files.tokens, "WRK_SKU=" + s.sku,
				"WRK_PREFIX=" + prefix + "-" + runID + "-" + strconv.Itoa(i)}
		}
	}
	tag := fmt.Sprintf("%s%d", s.name(), round)
	if _, err := runWrk(ctx, "warm-up", urls, "/", per, 2*time.Second, env2("w"+tag), []string{"-s", files.orders}); err != nil {
		return run, err
	}
	if s.on {
		// The warm-up's events first: the new relays take the SKU over
		// only once the stopped instances' hold on it has lapsed.
		if run.warmDrain, _, err = waitDelivered(ctx, s, recs, o.outbox.drain); err != nil {
			return run, err
		}
	}
	d := max(time.Second, o.outbox.duration.Truncate(time.Second))
	name := fmt.Sprintf("round %d: sinks %s", round, s.name())
	if err := run.measure(outboxProcs(f, natsPID), recs, func() (wrkRun, error) {
		return runWrk(ctx, name, urls, "/", per, d, env2("m"+tag), []string{"-s", files.orders})
	}); err != nil {
		return run, err
	}
	if s.on {
		run.drain, run.backlog, err = waitDelivered(ctx, s, recs, o.outbox.drain)
		if err != nil {
			return run, err
		}
	}
	for i, in := range f.Stop() {
		if !in.ExitOK {
			return run, fmt.Errorf("instance %d did not exit 0 after SIGTERM (log %s)", i, f.Instances[i].LogPath)
		}
	}
	return run, nil
}

// startOutboxFleet starts fresh instances of s's side for round, and
// stocks s's SKU at its first run.
func startOutboxFleet(ctx context.Context, o options, s *outboxSide, round int, token string) (*fleet.Fleet, error) {
	env := unlimitedEnv()
	maps.Copy(env, s.env)
	f, err := fleet.Start(ctx, fleet.Config{
		Bin: o.bin, N: o.instances, DSN: s.dsn, RedisAddr: o.redis, AdminToken: token, Strategy: "lock+version",
		LogDir: filepath.Join(o.out, "logs"), Name: fmt.Sprintf("outbox-%s-%d", s.name(), round), Env: env,
	})
	if err != nil {
		return nil, err
	}
	if !s.stocked {
		if err := putStock(ctx, f.URLs()[0], token, s.sku, 100_000_000); err != nil {
			f.Stop()
			return nil, err
		}
		s.stocked = true
	}
	return f, nil
}

// measure runs wrk, the measured time, and records over it each process
// group's CPU, the whole box's and each sink's first receipts per second.
func (run *outboxRun) measure(procs []procGroup, recs []*lagRecorder, wrk func() (wrkRun, error)) error {
	before, box0, t0 := groupsCPU(procs), boxCPU(), time.Now()
	for _, r := range recs {
		r.open(t0)
	}
	var err error
	if run.wrk, err = wrk(); err != nil {
		return err
	}
	t1 := time.Now()
	after, box1, secs := groupsCPU(procs), boxCPU(), t1.Sub(t0).Seconds()
	run.received = map[string]float64{}
	for _, r := range recs {
		run.received[r.sink] = float64(r.shut(t1)) / secs
	}
	if box0 > 0 {
		run.box = (box1 - box0) / secs
	}
	for i, g := range procs {
		run.cpu = append(run.cpu, cpuShare{g.name, (after[i] - before[i]) / secs})
	}
	return nil
}

// outboxProcs are the process groups whose CPU a run reports: the
// instances, MySQL, Redis, the NATS server (when natsPID is set) and the
// demo (its receivers; wrk's own processes are gone before they can be read).
func outboxProcs(f *fleet.Fleet, natsPID func() []int) []procGroup {
	var pids []int
	for _, in := range f.Instances {
		pids = append(pids, in.PID())
	}
	groups := []procGroup{
		{cpuInstances, func() []int { return pids }},
		{"MySQL", pidsNamed("mariadbd", "mysqld")},
		{"Redis", pidsNamed("redis-server")},
	}
	if natsPID != nil {
		groups = append(groups, procGroup{cpuNATS, natsPID})
	}
	return append(groups, procGroup{cpuReceivers, func() []int { return []int{os.Getpid()} }})
}

// groupsCPU is each group's CPU seconds so far.
func groupsCPU(groups []procGroup) []float64 {
	out := make([]float64, len(groups))
	for i, g := range groups {
		for _, pid := range g.pids() {
			out[i] += procCPU(pid)
		}
	}
	return out
}

// waitDelivered waits until every recorder has received every event of
// s's SKU in MySQL, or bound has passed. It returns the wait in seconds
// (-1: bound passed) and how many events the slowest recorder lacked at
// the start.
func waitDelivered(ctx context.Context, s *outboxSide, recs []*lagRecorder, bound time.Duration) (float64, int64, error) {
	start := time.Now()
	var backlog int64 = -1
	prev := int64(-1)
	for {
		var top int64
		if err := s.db.QueryRowContext(ctx, "SELECT COALESCE(MAX(seq), 0) FROM outbox_events WHERE sku = ?", s.sku).Scan(&top); err != nil {
			return 0, 0, err
		}
		behind := int64(0)
		for _, r := range recs {
			behind = max(behind, top-r.lastSeq(s.sku))
		}
		if backlog < 0 {
			backlog = behind
		}
		// Done when the last event (stable across two looks, as orders
		// wrk stopped waiting for still commit) has reached every sink.
		if behind == 0 && top == prev {
			return time.Since(start).Seconds(), backlog, nil
		}
		prev = top
		if time.Since(start) > bound {
			return -1, backlog, nil
		}
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// countOutbox counts s's orders and outbox rows of its SKU, by type.
func countOutbox(ctx context.Context, s *outboxSide) (outboxRows, error) {
	r := outboxRows{byType: map[string]int64{}}
	if err := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM orders WHERE sku = ?", s.sku).Scan(&r.orders); err != nil {
		return r, err
	}
	rows, err := s.db.QueryContext(ctx, "SELECT type, COUNT(*) FROM outbox_events WHERE sku = ? GROUP BY type", s.sku)
	if err != nil {
		return r, err
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var typ string
		var n int64
		if err := rows.Scan(&typ, &n); err != nil {
			return r, err
		}
		r.byType[typ] = n
	}
	return r, rows.Err()
}

// side is the mean orders placed/s of the runs with sinks on (or off),
// and each run's.
func (r outboxResult) side(on bool) (mean float64, each []float64) {
	for _, run := range r.runs {
		if run.on == on {
			each = append(each, run.wrk.placed())
		}
	}
	for _, v := range each {
		mean += v / float64(len(each))
	}
	return mean, each
}

// goals checks the run (every event reached each sink once, in order,
// signed; every answer a 201) and states the phase's goals.
func (r outboxResult) goals() (lines []string, passed bool) {
	met := func(ok bool) string {
		if ok {
			return "MET"
		}
		return "NOT MET"
	}
	var problems []string
	want := r.on.events()
	for _, l := range r.lags {
		if l.received != want || l.gaps > 0 || l.bad > 0 {
			problems = append(problems, fmt.Sprintf("%s received %d of the %d events (%d gaps, %d refused)", l.sink, l.received, want, l.gaps, l.bad))
		}
	}
	for _, run := range r.runs {
		for c, n := range run.wrk.statuses {
			if c != http.StatusCreated && n > 0 {
				problems = append(problems, fmt.Sprintf("round %d, sinks %s: %d answers %d", run.round, onOff(run.on), n, c))
			}
		}
	}
	passed = len(problems) == 0 && want > 0
	if passed {
		lines = append(lines, fmt.Sprintf("PASS: every one of the %d events of the SKU with sinks reached %s, in order (Seq without gaps), each signature checked; every order answered 201.", want, r.sinkNames()))
	} else {
		lines = append(lines, "FAIL: "+strings.Join(problems, "; ")+".")
	}
	on, onEach := r.side(true)
	off, offEach := r.side(false)
	if off > 0 {
		var each []string
		for i := range min(len(onEach), len(offEach)) {
			if offEach[i] > 0 {
				each = append(each, fmt.Sprintf("%.3fx", onEach[i]/offEach[i]))
			}
		}
		ratio := on / off
		lines = append(lines, fmt.Sprintf("goal sinks on >= 0.9x sinks off, orders placed/s on one hot SKU: %.0f vs %.0f = %.3fx (round by round: %s), %s.",
			on, off, ratio, strings.Join(each, ", "), met(ratio >= 0.9)))
	}
	if len(r.lags) > 0 {
		var lag []string
		worst := 0.0
		var outP99, outMax float64
		for _, l := range r.lags {
			lag = append(lag, fmt.Sprintf("%s p50 %.0f ms, p99 %.0f ms", l.sink, l.p50, l.p99))
			worst = max(worst, l.p99)
			outP99, outMax = max(outP99, l.outP99), max(outMax, l.outMax)
		}
		lines = append(lines, fmt.Sprintf("goal event lag p99 < 1 s, from the write (just before the commit) to the receiver, at this load (the events written in the measured time): %s, %s.",
			strings.Join(lag, "; "), met(worst < 1000)))
		lines = append(lines, fmt.Sprintf("the events written in the warm-ups, on instances just started in place of stopped ones: p99 up to %.0f ms, max %.0f ms.", outP99, outMax))
	}
	lines = append(lines, r.bounds()...)
	for _, side := range []struct {
		name string
		rows outboxRows
	}{{"sinks on", r.on}, {"sinks off (events written, no relay)", r.off}} {
		if side.rows.orders > 0 {
			lines = append(lines, fmt.Sprintf("outbox rows per order, %s: %d rows / %d orders = %.4f (%s).",
				side.name, side.rows.events(), side.rows.orders, float64(side.rows.events())/float64(side.rows.orders), side.rows.types()))
		}
	}
	return lines, passed
}

// types lists the rows by type.
func (r outboxRows) types() string {
	var parts []string
	for _, t := range events.Types() {
		if n := r.byType[t]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", t, n))
		}
	}
	for _, t := range slices.Sorted(maps.Keys(r.byType)) {
		if !slices.Contains(events.Types(), t) {
			parts = append(parts, fmt.Sprintf("%s %d", t, r.byType[t]))
		}
	}
	return orDash(strings.Join(parts, ", "))
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// runOutboxPhase measures, prints the runs and the goals, and writes the
// results file if asked. A failed check is an error.
func runOutboxPhase(ctx context.Context, o options, runID, token string, stdout io.Writer) error {
	r, err := measureOutbox(ctx, o, runID, token)
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintf(stdout, "\nOutbox: %d instances (lock+version), %d connections, %v per run, sinks off against the relays with %s\n", r.instances, r.conns, r.duration, r.sinkNames())
	for _, run := range r.runs {
		_, _ = fmt.Fprintf(stdout, "  %-22s %7.0f orders/s  p50 %6.1f ms  p99 %6.1f ms  CPU %s  %s\n", run.wrk.name, run.wrk.placed(), run.wrk.pct(50), run.wrk.pct(99), run.cpuText(), run.drainText())
	}
	for _, l := range r.lags {
		_, _ = fmt.Fprintf(stdout, "  lag at the %-8s receiver: p50 %.1f ms, p99 %.1f ms, max %.1f ms over the %d events of the measured time; the warm-ups' p99 %.1f ms, max %.1f ms\n",
			l.sink, l.p50, l.p99, l.maxMS, l.measured, l.outP99, l.outMax)
	}
	lines, passed := r.goals()
	for _, l := range lines {
		_, _ = fmt.Fprintln(stdout, "  "+l)
	}
	if o.outbox.doc != "" {
		if err := writeOutboxDoc(ctx, o.outbox.doc, o.target, r); err != nil {
			return err
		}
		_, _ = fmt.Fprintf(stdout, "outbox: %s\n", o.outbox.doc)
	}
	if !passed {
		return errors.New("the outbox's check failed: " + lines[0])
	}
	return nil
}

// sinkNames names the sinks of the runs with sinks.
func (r outboxResult) sinkNames() string {
	if len(r.sinks) == 0 {
		return "no sinks"
	}
	return strings.Join(r.sinks, " and ")
}

// cpuText is the run's CPU by process group, in cores, and per 1000
// orders placed.
func (run outboxRun) cpuText() string {
	var parts []string
	var all float64
	for _, c := range run.cpu {
		parts = append(parts, fmt.Sprintf("%s %.2f", c.name, c.cores))
		all += c.cores
	}
	per := "-"
	if p := run.wrk.placed(); p > 0 {
		per = fmt.Sprintf("%.0f ms", all/p*1e6)
	}
	box := ""
	if run.box > 0 {
		box = fmt.Sprintf("; the whole box busy %.2f cores", run.box)
	}
	return fmt.Sprintf("%.2f cores (%s); %s per 1000 orders%s", all, strings.Join(parts, ", "), per, box)
}

// drainText is how the run's events reached the sinks after the warm-up
// and after wrk stopped.
func (run outboxRun) drainText() string {
	if !run.on {
		return "-"
	}
	wait := func(s float64) string {
		if s < 0 {
			return "not all delivered within the wait"
		}
		return fmt.Sprintf("all delivered %.1f s later", s)
	}
	return fmt.Sprintf("warm-up's %s; %d behind at wrk's end, %s", wait(run.warmDrain), run.backlog, wait(run.drain))
}

// writeOutboxDoc writes the outbox phase's results file.
func writeOutboxDoc(ctx context.Context, path, target string, r outboxResult) error {
	var b bytes.Buffer
	b.WriteString(report.Header("The outbox's cost: sinks on against off", target, report.Commit(ctx), time.Now(), r.machine))
	fmt.Fprintf(&b, "%d `stock serve` instances (lock+version, no rate limit), one `wrk -t1 -c%d` per instance (%d connections in all), on this box beside the instances, MySQL, Redis, a private `nats-server -js` and the demo's webhook receiver. "+
		"Orders as the wrk phase sends them: one hot SKU that does not sell out, a fresh Idempotency-Key per request. "+
		"**Sinks on**: every instance runs its relay (STOCK_EVENTS_RELAY=1) with %s; the feed is always on. "+
		"**Sinks off**: STOCK_EVENTS_RELAY=0 and no sinks. Both write an outbox row in each order's transaction; the difference is the relays' and the sinks' work. "+
		"Each side has its own database, and each run its own fresh instances: 2s of uncounted orders, then, with sinks, a pause until every receiver has their events, then %v measured. "+
		"%d rounds, each of one run per side, in the order off, on, then on, off, ... so a steady drift in the machine's load falls on both sides alike. "+
		"After a run with sinks the instances keep running until every receiver has every event of the SKU (at most %v).\n\n",
		r.instances, max(1, r.conns/max(1, r.instances)), r.conns, r.sinkText(), r.duration, len(r.runs)/2, r.drainBound)
	b.WriteString("The CPU column is each process group's CPU over the measured time, in cores, read from /proc (wrk's own is not in it), and the whole box's busy time (/proc/stat: all but idle and iowait, wrk's included).\n\n")
	b.WriteString("| run | orders placed/s | p50 ms | p99 ms | statuses | errors | CPU | delivery after the warm-up and after wrk |\n|---|--:|--:|--:|---|---|---|---|\n")
	for _, run := range r.runs {
		var st []string
		for _, c := range slices.Sorted(maps.Keys(run.wrk.statuses)) {
			st = append(st, fmt.Sprintf("%d: %d", c, run.wrk.statuses[c]))
		}
		fmt.Fprintf(&b, "| %s | %.0f | %.1f | %.1f | %s | %s | %s | %s |\n", run.wrk.name, run.wrk.placed(), run.wrk.pct(50), run.wrk.pct(99),
			orDash(strings.Join(st, ", ")), orDash(run.wrk.errors), run.cpuText(), run.drainText())
	}
	if len(r.lags) > 0 {
		writeLagTable(&b, r.lags)
	}
	b.WriteString("\nOutbox rows per order, counted in MySQL for each side's SKU after its runs (one `order.placed` per order; these orders confirm at once, with no payment window, so no transitions; one `stock.changed` for the stocking).\n\n")
	b.WriteString("| side | orders | outbox rows | rows per order | by type |\n|---|--:|--:|--:|---|\n")
	for _, side := range []struct {
		name string
		rows outboxRows
	}{{"sinks on", r.on}, {"sinks off", r.off}} {
		per := 0.0
		if side.rows.orders > 0 {
			per = float64(side.rows.events()) / float64(side.rows.orders)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %.4f | %s |\n", side.name, side.rows.orders, side.rows.events(), per, side.rows.types())
	}
	lines, _ := r.goals()
	b.WriteString("\n")
	for _, l := range lines {
		b.WriteString("- " + l + "\n")
	}
	return os.WriteFile(path, b.Bytes(), 0o644) //nolint:gosec // G306: a document of the repo, for people to read
}

// writeLagTable writes the receivers' lag table with its note.
func writeLagTable(b *bytes.Buffer, lags []sinkLag) {
	b.WriteString("\nEvent lag at the receivers: receive time minus the event's `occurred_at` (written in the order's transaction, just before its commit), " +
		"first receipt of each event. The lag columns are of the events written in the measured time of the runs with sinks (received then or while the instances drained); " +
		"the warm-ups' are apart: their instances have just started in place of stopped ones, as in a restart, and their relays take the SKU over from the stopped ones'. " +
		"The webhook receiver is an HTTP server in the demo that checks each signature with `events.Verify`; the NATS receiver an ordered JetStream consumer of the stream, in the demo.\n\n")
	b.WriteString("| sink | events | of them measured | p50 ms | p99 ms | max ms | warm-ups' p99 ms | warm-ups' max ms | redelivered | Seq gaps | refused |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, l := range lags {
		fmt.Fprintf(b, "| %s | %d | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %d | %d | %d |\n", l.sink, l.received, l.measured, l.p50, l.p99, l.maxMS, l.outP99, l.outMax, l.dups, l.gaps, l.bad)
	}
}

// sinkText describes the sinks of the runs with sinks.
func (r outboxResult) sinkText() string {
	var parts []string
	for _, s := range r.sinks {
		switch s {
		case "nats":
			parts = append(parts, "the NATS JetStream sink (a private `nats-server -js`, read by an ordered consumer in the demo)")
		case "webhook":
			parts = append(parts, "the webhook sink (a receiver in the demo that checks each signature)")
		}
	}
	if len(parts) == 0 {
		return "no sinks (the relays stamp the feed and nothing more)"
	}
	return strings.Join(parts, " and ")
}
