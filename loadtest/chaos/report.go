// Package chaos is the fault matrix of the stock service: each scenario runs
// three real instances (the built binary) on their own redis-server (and,
// where the fault needs it, their own mariadbd or Sentinels), drives the
// seckill load of loadtest/driver through them, injects one fault mid-run
// (a paused or killed instance, a Redis restart, FLUSHALL or failover, a
// MariaDB restart, clients that time out, a SIGTERM, a flood of
// connections) and then proves the
// invariants from the audit and from MySQL: never more sold than stocked,
// every acknowledged order persisted exactly once, the audit consistent.
//
// The scenarios are tests (chaos_test.go). `go test ./loadtest/chaos` runs a
// short subset (a pause, a SIGKILL, FLUSHALL, a SIGTERM, a flood, a Redlock
// master killed); STOCK_CHAOS=full
// runs all of them (`make chaos`), and -short skips them all. With
// STOCK_CHAOS_REPORT=<file> the results table is written there as Markdown
// by WriteMarkdown, the small report writer of this file.
package chaos

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// Row is one scenario's outcome, as the results table shows it.
type Row struct {
	ID       string // "1", "6b", ...
	Scenario string
	Strategy string
	Stock    int64
	Sold     int64
	Oversold int64
	// LostUpdates is units in orders the stock row does not account for.
	LostUpdates int64
	Statuses    map[string]int // order requests by status ("201", "503", "no-response", ...)
	Conflicts   float64        // stock_backstop_conflicts_total over the run, all instances scraped
	LostLocks   float64        // stock_lock_results_total{result="lost"}
	DBOnly      float64        // stock_db_only_orders_total
	// Recovery is the time from the fault to the next 201; negative: none
	// measured.
	Recovery time.Duration
	Note     string // what the scenario saw besides the columns
	// ExpectOversell marks the control run of an unsafe strategy: it passes
	// when the oversell is caught.
	ExpectOversell bool
	Verdict        string // PASS, FAIL, or SKIP
}

// WriteMarkdown writes rows as a Markdown table, then one line of notes per
// row that has any.
func WriteMarkdown(w io.Writer, title string, rows []Row) error {
	var b strings.Builder
	if title != "" {
		fmt.Fprintf(&b, "%s\n\n", title)
	}
	b.WriteString("| # | scenario | strategy | sold / stock | oversold | responses | 200 replays | backstop conflicts | lost locks | db-only orders | recovery | verdict |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		over := fmt.Sprint(r.Oversold)
		if r.LostUpdates > 0 {
			over += fmt.Sprintf(" (+%d lost updates)", r.LostUpdates)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d / %d | %s | %s | %d | %s | %s | %s | %s | %s |\n",
			r.ID, escape(r.Scenario), escape(r.Strategy), r.Sold, r.Stock, over, statuses(r.Statuses),
			r.Statuses["200"], count(r.Conflicts), count(r.LostLocks), count(r.DBOnly), recovery(r.Recovery), r.Verdict)
	}
	b.WriteString("\nResponses count every order request, retries included (no-response: a timeout or a refused connection; " +
		"the driver retries those on the next instance). Conflicts, lost locks and db-only orders are the services' own counters, " +
		"summed over the instances still running at the end. Recovery: from the fault to the first 201 of an order written after it.\n")
	var notes []string
	for _, r := range rows {
		if r.Note != "" {
			notes = append(notes, fmt.Sprintf("- %s: %s", r.ID, escape(r.Note)))
		}
	}
	if len(notes) > 0 {
		b.WriteString("\n" + strings.Join(notes, "\n") + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func statuses(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func count(v float64) string { return fmt.Sprintf("%.0f", v) }

func recovery(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// escape keeps a cell on one line and its pipes out of the table syntax.
func escape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
