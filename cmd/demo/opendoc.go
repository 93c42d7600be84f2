package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seckill/stock/loadtest/driver"
	"github.com/seckill/stock/loadtest/report"
)

// openGoal is the bound on every buyer's final answer, from the start.
const openGoal = 2 * time.Second

// problems are the run's broken checks of the sale itself, from MySQL and
// the audits: a unit sold twice or unaccounted for, an order without its
// 201 or a 201 without its order, an instance that did not stop cleanly.
func (f openFigures) problems() []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if f.db.unknownSKUs+f.db.unknownOrder > 0 {
		add("%d stock rows and %d orders not of the run's SKUs", f.db.unknownSKUs, f.db.unknownOrder)
	}
	for k := range f.db.units {
		switch {
		case f.db.sold[k] > f.db.stocked[k]:
			add("SKU %d oversold: %d sold of %d", k, f.db.sold[k], f.db.stocked[k])
		case f.db.units[k] != f.db.sold[k], f.db.available[k]+f.db.sold[k] != f.db.stocked[k]:
			add("SKU %d: orders hold %d units, the row sold %d, available %d, stocked %d", k, f.db.units[k], f.db.sold[k], f.db.available[k], f.db.stocked[k])
		}
	}
	for k, a := range f.audits {
		if !a.Consistent || a.Oversold != 0 {
			add("SKU %d's audit: consistent %v, oversold %d, %v", k, a.Consistent, a.Oversold, a.Problems)
		}
	}
	if missing, extra, _ := f.answersVsOrders(); missing+extra > 0 {
		add("%d answers 201 without an order in MySQL, %d orders whose buyer was answered otherwise", missing, extra)
	}
	var held int64
	for _, u := range f.db.byKey {
		held += u
	}
	if sold, _ := f.soldUnits(); held != sold || len(f.db.byKey) > f.buyers {
		add("%d keys hold %d units, the SKUs' orders %d", len(f.db.byKey), held, sold)
	}
	if !f.exitOK {
		add("an instance did not exit 0 after SIGTERM")
	}
	return out
}

// answersVsOrders compares the buyers' final answers with MySQL's orders:
// 201s (or 200 replays) without an order, orders of a buyer answered
// otherwise, and orders of a buyer left without an answer (allowed: the
// order may have committed as the answer was lost).
func (f openFigures) answersVsOrders() (missing, extra, lost int) {
	for i, key := range f.keys {
		placed := f.final[i] == http.StatusCreated || f.final[i] == http.StatusOK
		has := f.db.byKey[key] > 0
		switch {
		case placed && !has:
			missing++
		case !placed && has && f.final[i] == 0:
			lost++
		case !placed && has:
			extra++
		}
	}
	return missing, extra, lost
}

// goalMet reports whether every buyer had its final answer within
// openGoal of the start, with no 5xx and no request left unanswered.
func (f openFigures) goalMet() bool {
	return f.lastAnswer <= openGoal && f.fiveXX == 0 && f.failed == 0 && f.finals["not sent"] == 0
}

func metText(ok bool) string {
	if ok {
		return "MET"
	}
	return "NOT MET"
}

// finalsText lists the final answers, most frequent first.
func (f openFigures) finalsText() string { return countsText(f.finals) }

// sentAgainText is the buyers who sent again, and the answers that made
// them, most frequent first.
func (f openFigures) sentAgainText() string {
	if f.retried == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%s)", f.retried, countsText(f.sentAgain))
}

// countsText lists counts by name, most frequent first ("-" for none).
func countsText(counts map[string]int) string {
	names := slices.SortedFunc(maps.Keys(counts), func(a, b string) int { return cmp.Or(counts[b]-counts[a], strings.Compare(a, b)) })
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s: %d", n, counts[n])
	}
	return orDash(strings.Join(parts, ", "))
}

// line is the run in one line, for the demo's output.
func (r openRun) line() string {
	sold, takeable := r.soldUnits()
	return fmt.Sprintf("%-4s STOCK_PREWARM=%-7s load %s; %d connections opened in %.1fs (%d failed), %d orders sent; last written +%d ms; "+
		"first second: %d answers, latency %s; first answers p50 +%d ms, p99 +%d ms; last answer +%d ms; sold by +1s %d, last unit +%d ms (MySQL); sold %d of %d; %s; "+
		"5xx %d, no answer %d, sale-not-started %d, sent again %s; first %d senders won %.3f of the units, a random %d %.3f (expected %.3f); %s; all answered within %v: %s",
		r.shape, r.prewarm, r.load, r.buyers, r.warmUp.Seconds(), r.warmFailed, r.ordered, r.lastSent.Milliseconds(),
		r.firstSec, r.latencyText(), r.firstP50.Milliseconds(), r.firstP99.Milliseconds(), r.lastAnswer.Milliseconds(), r.ordersBy(time.Second), r.lastUnit().Milliseconds(), sold, takeable, r.finalsText(),
		r.fiveXX, r.failed, r.early, r.sentAgainText(), r.firstN(), r.firstShare, r.firstN(), r.randomShare, r.expected, r.cpuText(), openGoal, metText(r.goalMet()))
}

// cores is the named group's CPU over the run's window, in cores.
func (f openFigures) cores(name string) float64 {
	if f.cpuWindow <= 0 {
		return 0
	}
	return f.cpu[name] / f.cpuWindow.Seconds()
}

// cpuText is the run's CPU by group, in cores.
func (f openFigures) cpuText() string {
	parts := make([]string, len(cpuGroups))
	for i, name := range cpuGroups {
		parts[i] = fmt.Sprintf("%s %.2f", name, f.cores(name))
	}
	return fmt.Sprintf("cores over %.1fs: %s", f.cpuWindow.Seconds(), strings.Join(parts, ", "))
}

// latencyText is the first second's answers' latency: p50 / p99 / max.
func (f openFigures) latencyText() string {
	if f.firstSec == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f / %.0f / %.0f ms", f.p50, f.p99, f.maxMS)
}

// firstN is the size of the fairness's groups: the units on sale, at most
// the buyers.
func (f openFigures) firstN() int64 { return min(f.units, int64(f.buyers)) }

// openNotes compares each shape's runs without and with the pre-warm, and
// says whether the binary reads STOCK_PREWARM at all.
func openNotes(runs []openRun, knows bool) []string {
	var out []string
	if !knows {
		out = append(out, "the binary under test does not know STOCK_PREWARM (the variable is not in it; unknown STOCK_ variables are ignored): its runs differ by chance alone, not by the setting.")
	}
	for i, a := range runs {
		for _, b := range runs[i+1:] {
			if a.shape != b.shape {
				continue
			}
			out = append(out, fmt.Sprintf("%s, STOCK_PREWARM %s then %s: units sold by +1 s %d then %d; last unit sold +%d ms then +%d ms; the buyers' first answer p50 +%d ms then +%d ms; last answer +%d ms then +%d ms.",
				a.shape, a.prewarm, b.prewarm, a.ordersBy(time.Second), b.ordersBy(time.Second), a.lastUnit().Milliseconds(), b.lastUnit().Milliseconds(),
				a.firstP50.Milliseconds(), b.firstP50.Milliseconds(), a.lastAnswer.Milliseconds(), b.lastAnswer.Milliseconds()))
		}
	}
	return out
}

// writeOpenDoc writes the open phase's results file.
func writeOpenDoc(ctx context.Context, o options, runs []openRun, m driver.Machine, knows bool) error {
	oo := o.open
	var b bytes.Buffer
	b.WriteString(report.Header("The opening second, measured", o.target, report.Commit(ctx), time.Now(), m))
	writeOpenIntro(&b, o)
	b.WriteString("## Speed\n\n")
	b.WriteString("| run | STOCK_PREWARM | buyers | SKUs | units | load average at the start | connections opened before the start | last order written | answers in the first second | their latency p50 / p99 / max | buyers' first answer p50 / p99 | last answer | units sold by +1 s / +2 s | last unit sold | all answered within 2 s |\n")
	b.WriteString("|---|---|--:|--:|--:|---|---|--:|--:|---|---|--:|---|--:|---|\n")
	for _, r := range runs {
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %s | %d in %.1f s (%d failed); %d orders sent | +%d ms | %d | %s | +%d / +%d ms | +%d ms | %d / %d | +%d ms | %s |\n",
			r.shape, r.prewarm, r.buyers, r.skus, r.units, r.load, r.buyers-r.warmFailed, r.warmUp.Seconds(), r.warmFailed, r.ordered, r.lastSent.Milliseconds(),
			r.firstSec, r.latencyText(), r.firstP50.Milliseconds(), r.firstP99.Milliseconds(), r.lastAnswer.Milliseconds(), r.ordersBy(time.Second), r.ordersBy(2*time.Second), r.lastUnit().Milliseconds(), metText(r.goalMet()))
	}
	b.WriteString("\n## Exactness and fairness\n\n")
	b.WriteString("| run | STOCK_PREWARM | final answers | 5xx | no answer | sale-not-started | buyers who sent again | units sold (MySQL) of those wanted | 201s without an order / orders answered otherwise / orders of buyers left unanswered | audits | first N senders' share of the units | a random N's share | expected for a random N |\n")
	b.WriteString("|---|---|---|--:|--:|--:|---|--:|---|---|--:|--:|--:|\n")
	for _, r := range runs {
		sold, takeable := r.soldUnits()
		missing, extra, lost := r.answersVsOrders()
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %d | %s | %d of %d | %d / %d / %d | %s | %.3f | %.3f | %.3f |\n",
			r.shape, r.prewarm, r.finalsText(), r.fiveXX, r.failed, r.early, r.sentAgainText(), sold, takeable, missing, extra, lost,
			auditText(r), r.firstShare, r.randomShare, r.expected)
	}
	b.WriteString("\n## Where the cores went\n\n")
	b.WriteString("CPU from the start until the last crowd process ended, in cores (CPU seconds over that time; the box has " + strconv.Itoa(m.Cores) + "), read from /proc: the instances, the crowd processes (each its own), MySQL and Redis (servers other work on the box may use too) and the rest of the box's busy time.\n\n")
	b.WriteString("| run | STOCK_PREWARM | time | instances | crowds | MySQL | Redis | rest of the box |\n|---|---|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range runs {
		fmt.Fprintf(&b, "| %s | %s | %.1f s |", r.shape, r.prewarm, r.cpuWindow.Seconds())
		for _, name := range cpuGroups {
			fmt.Fprintf(&b, " %.2f |", r.cores(name))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	for _, r := range runs {
		writeOpenVerdict(&b, r)
	}
	for _, l := range openNotes(runs, knows) {
		b.WriteString("- " + l + "\n")
	}
	return os.WriteFile(oo.doc, b.Bytes(), 0o644) //nolint:gosec // G306: a document of the repo, for people to read
}

// auditText sums up a run's audits.
func auditText(r openRun) string {
	bad := 0
	var oversold int64
	for _, a := range r.audits {
		if !a.Consistent {
			bad++
		}
		oversold += a.Oversold
	}
	return fmt.Sprintf("%d of %d consistent, oversold %d", len(r.audits)-bad, len(r.audits), oversold)
}

// writeOpenVerdict writes a run's checks and goal as one bullet.
func writeOpenVerdict(b *bytes.Buffer, r openRun) {
	verdict := "PASS: no unit oversold, every unit in MySQL's orders and stock rows accounted for, every 201 an order and every order a 201, every audit consistent"
	if p := r.problems(); len(p) > 0 {
		verdict = "FAIL: " + strings.Join(p, "; ")
	}
	sold, takeable := r.soldUnits()
	fmt.Fprintf(b, "- %s, STOCK_PREWARM %s: %s; sold %d of the %d units the buyers wanted. Goal every buyer answered within %v of the start, no 5xx, no failed connection: last answer +%d ms, %d 5xx, %d requests without an answer, %s.",
		r.shape, r.prewarm, verdict, sold, takeable, openGoal, r.lastAnswer.Milliseconds(), r.fiveXX, r.failed, metText(r.goalMet()))
	if len(r.errs) > 0 {
		fmt.Fprintf(b, " The buyers' errors: %s.", strings.Join(r.errs, "; "))
	}
	if r.logged > 0 {
		fmt.Fprintf(b, " The instances logged %d errors, such as: %s.", r.logged, strings.Join(r.logSample, "; "))
	}
	b.WriteString("\n")
}

// writeOpenIntro describes the phase's set-up.
func writeOpenIntro(b *bytes.Buffer, o options) {
	oo := o.open
	fmt.Fprintf(b, "%d `stock serve` instances (%s, no rate limit, `STOCK_MAX_CONNS`, `STOCK_MAX_INFLIGHT` and `STOCK_QUEUE_MAX` set above the %d buyers each instance takes: their defaults, 2048 connections, 5000 requests in flight and 2000 orders of one SKU waiting per instance, would turn a bigger crowd away with `503` or `429 busy` and Retry-After: 1, as a shop expecting this crowd would not), "+
		"every other setting at its default. "+
		"MySQL, Redis and the buyers all on this box, which other work may share (the load average is in the table). Each run has a fresh database and fresh instances. "+
		"The buyers live in crowd processes of at most %d (`demo open-crowd`): a process here may hold %s open files, and each buyer is a connection. "+
		"Each buyer has one connection of its own, buyer i to instance i mod %d; the typed client's transport is that connection alone (the request written on it, the answer read from it, nothing pooled), so every request of the buyer, its order included, goes over the connection opened before the start. "+
		"The admin stocks the SKUs with `sale_starts_at` %v ahead; then every buyer opens its connection and sends GET /healthz on it, 200 at a time per process. "+
		"At the start each buyer's goroutine wakes by the local clock and sends its order at the start + %v; the server decides by its database's clock. "+
		"A temporary answer is sent again with the same key, at most %d times: a `sale-not-started` at its `starts_at`, others after Retry-After or a short backoff. "+
		"Times are from the start: a request's when it was written on the connection, an answer's when it was read; \"last unit sold\" is the latest `created_at` of the run's orders in MySQL minus the stored `sale_starts_at`. "+
		"Fairness: of the units won (MySQL's orders by idempotency key), the share won by the first N buyers by the time their first order was written, N the units on sale, beside the share of N buyers drawn at random (expected N/buyers).\n\n",
		o.instances, oo.strategy, (oo.buyers+o.instances-1)/o.instances, crowdMax, limitText(openFileLimit()), o.instances, oo.lead, oo.fire, oo.retries)
	var runs []string
	for _, sh := range oo.shapes() {
		if sh.name == "hot" {
			runs = append(runs, fmt.Sprintf("**hot**, one SKU of %d units", oo.units))
			continue
		}
		runs = append(runs, fmt.Sprintf("**zipf**, %d SKUs of %s units each (%d in all) that each buyer picks by a Zipf law (`math/rand/v2`, s = %.2f: SKU k's weight (k+1)^-s, the most wanted %.1fx the second)",
			oo.skus, spreadText(oo.units, oo.skus), oo.units, oo.zipfS, math.Pow(2, oo.zipfS)))
	}
	fmt.Fprintf(b, "Runs: %s", strings.Join(runs, "; "))
	fmt.Fprintf(b, ". Each with the instances' `STOCK_PREWARM` at each of: %s (`default`: unset, the binary's own default).", strings.Join(oo.prewarm, ", "))
	b.WriteString("\n\n")
}

// limitText is an open-file limit in words.
func limitText(n uint64) string {
	if n == 0 {
		return "only so many"
	}
	return fmt.Sprintf("at most %d", n)
}
