package report

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/seckill/stock/loadtest/driver"
)

func TestWriteTable(t *testing.T) {
	runs := []*driver.Result{
		{Label: "lock+version", Safe: true, Passed: true, Sold: 1000, Requests: 1300, OrdersPerSec: 3760, MySQLPerRequest: 1.25,
			Statuses: map[string]int{"201": 1000, "409": 250, "429": 40}},
		{Label: "none", Safe: false, Sold: 1200, Oversold: 200, Requests: 1200, MySQLPerRequest: -1, Statuses: map[string]int{"201": 1200}},
	}
	var b strings.Builder
	if err := WriteTable(&b, runs); err != nil {
		t.Fatalf("WriteTable = %v; want nil", err)
	}
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("WriteTable wrote %d lines; want a header and 2 rows:\n%s", len(lines), b.String())
	}
	for i, want := range [][]string{
		strings.Fields("strategy result sold oversold lost upd orders/s p50 ms p95 ms p99 ms 201 409 429 other conflicts lock wait ms lock held ms orders per hold MySQL stmts per request peak RSS MiB"),
		strings.Fields("lock+version PASS 1000 0 0 3760 0.0 0.0 0.0 1000 250 40 10 0 - - - 1.25 -"),
		strings.Fields("none FAIL 1200 200 0 0 0.0 0.0 0.0 1200 0 0 0 0 - - - - -"),
	} {
		if got := strings.Fields(lines[i]); !slices.Equal(got, want) {
			t.Errorf("WriteTable line %d = %q; want the fields %q", i, lines[i], want)
		}
		if i > 0 && len(lines[i]) != len(lines[0]) {
			t.Errorf("WriteTable line %d is %d wide, the header %d: columns not aligned\n%s", i, len(lines[i]), len(lines[0]), b.String())
		}
	}
}

type failingWriter struct{ err error }

func (w failingWriter) Write([]byte) (int, error) { return 0, w.err }

func TestWriteTableReturnsWriteError(t *testing.T) {
	want := errors.New("disk full")
	err := WriteTable(failingWriter{want}, []*driver.Result{{Label: "x", Statuses: map[string]int{}}})
	if !errors.Is(err, want) {
		t.Errorf("WriteTable to a failing writer = %v; want %v", err, want)
	}
}
func TestWriteHTMLSelfContained(t *testing.T) {
	r := &driver.Result{Label: "lock+version <b>", Stock: 10, Buyers: 20, Passed: true,
		Statuses: map[string]int{"201": 10}, Timeline: driver.Timeline{BucketMS: 100, Created: []int{5, 5}, Requests: []int{10, 10}},
		Latency: driver.Latency{P50: 1, P95: 2, P99: 3}, Checks: []driver.Check{{Name: "x", OK: true}}}
	var b strings.Builder
	if err := WriteHTML(&b, NewReport("t", Section{Title: "s", Runs: []*driver.Result{r}})); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, bad := range []string{"<script", "src=", "href=", "version <b>"} {
		if strings.Contains(page, bad) {
			t.Errorf("report contains %q; want a self-contained, escaped page", bad)
		}
	}
	if n := strings.Count(page, "<svg"); n != 3 {
		t.Errorf("report has %d charts; want 3", n)
	}
}
