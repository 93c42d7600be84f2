// Package report prints, saves and charts the load driver's results
// (package loadtest/driver): one run as a few lines (WriteSummary) or a
// table row (WriteTable), and a Report of sections of runs, with the
// ceiling and lifecycle phases, as JSON, a self-contained HTML page with
// charts (WriteHTML) or a Markdown results file with its header
// (WriteMarkdown, Header, Commit), the format of docs/results/.
//
// It only reads results: what a figure means is documented on the
// driver's types.
package report

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/seckill/stock/loadtest/driver"
)

// Report is a set of runs to print, save and chart, grouped in sections
// (e.g. the sell-out and the throughput phase of the demo).
type Report struct {
	Title     string         `json:"title"`
	Generated time.Time      `json:"generated"`
	Machine   driver.Machine `json:"machine"`
	Sections  []Section      `json:"sections"`
	Passed    bool           `json:"passed"` // every run passed (or was Safe, in a SafetyOnly section)
	// Ceiling is what the same instances answer without an order (the
	// demo's ceiling phase), the yardstick of the sections' orders/s.
	Ceiling     []driver.RateResult `json:"ceiling,omitempty"`
	CeilingNote string              `json:"ceiling_note,omitempty"`
	// Lifecycle is the lifecycle phase's runs (reserve, pay, cancel,
	// expire), with its note.
	Lifecycle     []*driver.LifecycleResult `json:"lifecycle,omitempty"`
	LifecycleNote string                    `json:"lifecycle_note,omitempty"`
}

// AddLifecycle adds the lifecycle phase's runs; a run that did not pass
// fails the report.
func (r *Report) AddLifecycle(note string, runs []*driver.LifecycleResult) {
	r.Lifecycle, r.LifecycleNote = runs, note
	for _, run := range runs {
		r.Passed = r.Passed && (run.Passed || run.Reported)
	}
}

// Section is runs compared side by side.
type Section struct {
	Title string           `json:"title"`
	Note  string           `json:"note,omitempty"`
	Runs  []*driver.Result `json:"runs"`
	// SafetyOnly sections (throughput runs) require every run to be Safe,
	// not Passed: a strategy whose buyers give up is slow, not wrong.
	SafetyOnly bool `json:"safety_only,omitempty"`
}

// NewReport returns a report of the sections, its machine taken from the first run.
func NewReport(title string, sections ...Section) Report {
	r := Report{Title: title, Generated: time.Now().UTC().Truncate(time.Second), Sections: sections, Passed: true}
	for _, s := range sections {
		for _, run := range s.Runs {
			if r.Machine.Cores == 0 {
				r.Machine = run.Machine
			}
			r.Passed = r.Passed && (run.Passed || s.SafetyOnly && run.Safe)
		}
	}
	return r
}

// WriteJSON writes v as indented JSON.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// WriteTable prints one line per run.
func WriteTable(w io.Writer, runs []*driver.Result) error {
	head, rows := tableRows(runs)
	var b strings.Builder
	b.WriteString(strings.Join(head, "\t") + "\t\n")
	for _, row := range rows {
		b.WriteString(strings.Join(row, "\t") + "\t\n")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if _, err := io.WriteString(tw, b.String()); err != nil {
		return err
	}
	return tw.Flush()
}

func msOrDash(sec, n float64) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", sec*1000)
}

// WriteSummary prints one run in a few lines, with every failed check.
func WriteSummary(w io.Writer, r *driver.Result) {
	var b strings.Builder
	fmt.Fprintf(&b, "seckill %s: sku %s, stock %d, buyers %d x %d, concurrency %d, %d instance(s), retries %d\n",
		r.Label, r.SKU, r.Stock, r.Buyers, r.Quantity, r.Concurrency, len(r.URLs), r.Retries)
	fmt.Fprintf(&b, "  %.2fs, %d requests (%.0f/s), %d x 201 (%.0f orders/s, last at %.2fs), %d x 200 replays\n",
		r.Seconds, r.Requests, r.RequestsPerSec, r.Created, r.OrdersPerSec, r.LastOrderSeconds, r.Replayed)
	fmt.Fprintf(&b, "  statuses %v; buyer outcomes %v\n", r.Statuses, r.Outcomes)
	if r.Statuses["429"] > 0 {
		fmt.Fprintf(&b, "  429s: %d rate-limited (%d buyers refused at their last try), %d busy\n", r.RateLimited, r.RateLimitedBuyers, r.Busy)
	}
	for _, c := range r.Crowds {
		fmt.Fprintf(&b, "  crowd %s: %d buyers (%d ran), %d requests %.2fs..%.2fs, statuses %v, 429s %d rate-limited %d busy, %d x 201, p50 %.1fms p99 %.1fms max %.1fms\n",
			c.Name, c.Buyers, c.BuyersRun, c.Requests, c.FirstSent, c.LastAnswer, c.Statuses, c.RateLimited, c.Busy, c.Created,
			c.Latency.P50, c.Latency.P99, c.Latency.Max)
	}
	fmt.Fprintf(&b, "  latency p50 %.1fms p95 %.1fms p99 %.1fms max %.1fms\n", r.Latency.P50, r.Latency.P95, r.Latency.P99, r.Latency.Max)
	s := r.Metrics.Sum
	fmt.Fprintf(&b, "  metrics (sum of %d): orders %v, conflicts %.0f, lock %v, lock wait mean %sms p99 %.1fms, held mean %sms, db-only %.0f, cpu %.1fs\n",
		len(r.Metrics.Instances), compact(s.Orders), s.Conflicts, compact(s.LockResults),
		msOrDash(s.LockWaitMean(), s.LockWaits), s.LockWaitP99*1000, msOrDash(s.LockHeldMean(), s.LockHolds), s.DBOnly, s.CPUSeconds)
	fmt.Fprintf(&b, "  sold %d (want %d), orders %d, units %d, oversold %d, lost updates %d\n",
		r.Sold, r.ExpectedSold, r.Orders, r.Units, r.Oversold, r.LostUpdates)
	for _, c := range r.Checks {
		mark := [...]string{"ok  ", "saw ", "SHORT", "FAIL"}[outcome(r, c)]
		line := "  " + mark + " " + c.Name
		if !c.OK {
			line += ": " + c.Detail
		}
		b.WriteString(line + "\n")
	}
	fmt.Fprintf(&b, "  result: %s\n", r.Verdict())
	_, _ = io.WriteString(w, b.String()) // for the operator's eyes: a failed write has no one to tell
}

// outcome classifies a check of r: 0 held, 1 broken as expected (an
// oversell check of a run that expects one), 2 short (buyers gave up), 3
// failed.
func outcome(res *driver.Result, c driver.Check) int {
	switch {
	case c.OK:
		return 0
	case res.ExpectOversell && c.Oversell:
		return 1
	case c.Liveness:
		return 2
	}
	return 3
}

// outcomeMark names outcome(c) for the reports.
func outcomeMark(res *driver.Result, c driver.Check) string {
	return [...]string{"ok", "broken, as expected", "short (buyers gave up)", "FAIL"}[outcome(res, c)]
}

func compact(m map[string]float64) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		if m[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s=%.0f", k, m[k]))
		}
	}
	return "{" + strings.Join(parts, " ") + "}"
}

func sortedKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ---- HTML ----

var palette = []string{"#d62728", "#ff7f0e", "#9467bd", "#1f77b4", "#2ca02c", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"}

// WriteHTML writes one self-contained page: tables and inline SVG charts
// (orders over time, orders per second, latency percentiles), no scripts and
// nothing fetched from elsewhere.
func WriteHTML(w io.Writer, rep Report) error {
	var b strings.Builder
	e := html.EscapeString
	fmt.Fprintf(&b, `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>%s</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}
table{border-collapse:collapse;margin:1em 0}th,td{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right}
th:first-child,td:first-child{text-align:left}.PASS{color:#2ca02c;font-weight:bold}.FAIL{color:#d62728;font-weight:bold}
.DETECTED{color:#ff7f0e;font-weight:bold}.SHORT{color:#9467bd;font-weight:bold}svg{background:#fafafa;border:1px solid #eee;margin:0.5em 0}
svg text{font:11px system-ui,sans-serif}.small{color:#666;font-size:12px}details{margin:0.3em 0}
</style></head><body>
<h1>%s</h1>
`, e(rep.Title), e(rep.Title))
	m := rep.Machine
	fmt.Fprintf(&b, "<p class=small>Generated %s on %d cores (%s), %s, %s; MySQL %s, Redis %s.</p>\n",
		rep.Generated.Format(time.RFC3339), m.Cores, e(m.CPU), e(m.OS), e(m.Go), e(orDash(m.MySQL)), e(orDash(m.Redis)))
	if len(rep.Ceiling) > 0 {
		b.WriteString("<h2>Ceiling: the same instances without an order</h2>\n")
		if rep.CeilingNote != "" {
			fmt.Fprintf(&b, "<p>%s</p>\n", e(rep.CeilingNote))
		}
		head, rows := ceilingRows(rep.Ceiling)
		b.WriteString("<table><tr><th>" + strings.Join(head, "</th><th>") + "</th></tr>\n")
		for _, row := range rows {
			for i := range row {
				row[i] = e(row[i])
			}
			b.WriteString("<tr><td>" + strings.Join(row, "</td><td>") + "</td></tr>\n")
		}
		b.WriteString("</table>\n")
	}
	for _, s := range rep.Sections {
		fmt.Fprintf(&b, "<h2>%s</h2>\n", e(s.Title))
		if s.Note != "" {
			fmt.Fprintf(&b, "<p>%s</p>\n", e(s.Note))
		}
		htmlTable(&b, s.Runs)
		b.WriteString("<h3>Orders over time</h3>\n")
		cumulativeChart(&b, s.Runs)
		b.WriteString("<h3>Orders per second (100 ms buckets, 500 ms moving average)</h3>\n")
		rateChart(&b, s.Runs)
		b.WriteString("<h3>Order latency percentiles (every request, log scale)</h3>\n")
		latencyChart(&b, s.Runs)
		b.WriteString("<h3>Checks</h3>\n")
		for _, r := range s.Runs {
			fmt.Fprintf(&b, "<details><summary><b>%s</b>: <span class=%s>%s</span> (sku %s)</summary><ul>\n",
				e(r.Label), r.Verdict(), r.Verdict(), e(r.SKU))
			for _, c := range r.Checks {
				mark := outcomeMark(r, c)
				fmt.Fprintf(&b, "<li>%s: %s", e(mark), e(c.Name))
				if !c.OK {
					fmt.Fprintf(&b, " <span class=small>(%s)</span>", e(c.Detail))
				}
				b.WriteString("</li>\n")
			}
			b.WriteString("</ul></details>\n")
		}
	}
	b.WriteString("</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func htmlTable(b *strings.Builder, runs []*driver.Result) {
	e := html.EscapeString
	b.WriteString("<table><tr><th>strategy</th><th>result</th><th>stock</th><th>buyers</th><th>sold</th><th>oversold</th><th>lost updates</th>" +
		"<th>orders/s</th><th>p50 ms</th><th>p95 ms</th><th>p99 ms</th><th>201</th><th>409</th><th>429</th><th>other</th>" +
		"<th>conflicts</th><th>lock wait ms</th><th>lock held ms</th><th>peak RSS MiB</th></tr>\n")
	for i, r := range runs {
		s := r.Metrics.Sum
		other := r.Requests - r.Statuses["201"] - r.Statuses["200"] - r.Statuses["409"] - r.Statuses["429"]
		fmt.Fprintf(b, "<tr><td><span style=\"color:%s\">&#9632;</span> %s</td><td class=%s>%s</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td>"+
			"<td>%.0f</td><td>%.1f</td><td>%.1f</td><td>%.1f</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%.0f</td><td>%s</td><td>%s</td><td>%s</td></tr>\n",
			palette[i%len(palette)], e(r.Label), r.Verdict(), r.Verdict(), r.Stock, r.Buyers, r.Sold, r.Oversold, r.LostUpdates,
			r.OrdersPerSec, r.Latency.P50, r.Latency.P95, r.Latency.P99,
			r.Statuses["201"], r.Statuses["409"], r.Statuses["429"], other, s.Conflicts,
			msOrDash(s.LockWaitMean(), s.LockWaits), msOrDash(s.LockHeldMean(), s.LockHolds), e(r.RSS()))
	}
	b.WriteString("</table>\n")
}

// chart geometry
const (
	cw, ch           = 900, 320
	padL, padR       = 70, 150
	padT, padB       = 15, 40
	plotW, plotH     = cw - padL - padR, ch - padT - padB
	maxPolylinePoint = 2000
)

type series struct {
	label string
	color string
	xs    []float64 // seconds
	ys    []float64
}

func lineChart(b *strings.Builder, ss []series, yLabel string, hline float64, hlabel string) {
	xmax, ymax := 0.0, hline
	for _, s := range ss {
		for i := range s.xs {
			xmax = max(xmax, s.xs[i])
			ymax = max(ymax, s.ys[i])
		}
	}
	if xmax == 0 {
		xmax = 1
	}
	if ymax == 0 {
		ymax = 1
	}
	ymax = niceCeil(ymax * 1.05)
	xmax = niceCeil(xmax)
	px := func(x float64) float64 { return padL + x/xmax*plotW }
	py := func(y float64) float64 { return padT + plotH - y/ymax*plotH }
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", cw, ch, cw, ch)
	axes(b, xmax, ymax, px, py, "seconds", yLabel)
	if hline > 0 {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#888" stroke-dasharray="4 3"/>`+
			`<text x="%.1f" y="%.1f" fill="#666">%s</text>`+"\n", px(0), py(hline), px(xmax), py(hline), px(0)+4, py(hline)-4, html.EscapeString(hlabel))
	}
	for i, s := range ss {
		var pts strings.Builder
		step := max(1, len(s.xs)/maxPolylinePoint)
		for j := 0; j < len(s.xs); j += step {
			fmt.Fprintf(&pts, "%.1f,%.1f ", px(s.xs[j]), py(s.ys[j]))
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.8" points="%s"/>`+"\n", s.color, pts.String())
		ly := float64(padT + 14 + 16*i)
		fmt.Fprintf(b, `<rect x="%d" y="%.0f" width="12" height="3" fill="%s"/><text x="%d" y="%.0f">%s</text>`+"\n",
			cw-padR+10, ly-4, s.color, cw-padR+26, ly, html.EscapeString(s.label))
	}
	b.WriteString("</svg>\n")
}

func axes(b *strings.Builder, xmax, ymax float64, px, py func(float64) float64, xl, yl string) {
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/><line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n",
		padL, padT, padL, padT+plotH, padL, padT+plotH, padL+plotW, padT+plotH)
	for i := 0; i <= 5; i++ {
		x := xmax * float64(i) / 5
		y := ymax * float64(i) / 5
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`, px(x), padT+plotH+15, num(x))
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e5e5e5"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n",
			padL, py(y), padL+plotW, py(y), padL-5, py(y)+4, num(y))
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`, padL+plotW/2, ch-5, html.EscapeString(xl))
	fmt.Fprintf(b, `<text x="15" y="%d" text-anchor="middle" transform="rotate(-90 15 %d)">%s</text>`+"\n", padT+plotH/2, padT+plotH/2, html.EscapeString(yl))
}

func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 10000:
		return fmt.Sprintf("%.0fk", v/1000)
	case v >= 100 || v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// niceCeil rounds v up to a round multiple of a power of ten (1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8).
func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func cumulativeChart(b *strings.Builder, runs []*driver.Result) {
	var ss []series
	stock := int64(-1)
	for i, r := range runs {
		s := series{label: r.Label, color: palette[i%len(palette)], xs: []float64{0}, ys: []float64{0}}
		total := 0
		bw := float64(r.Timeline.BucketMS) / 1000
		for j, n := range r.Timeline.Created {
			total += n
			s.xs = append(s.xs, float64(j+1)*bw)
			s.ys = append(s.ys, float64(total))
		}
		ss = append(ss, s)
		if stock == -1 || stock == r.Stock {
			stock = r.Stock
		} else {
			stock = -2
		}
	}
	hline := 0.0
	maxY := 0.0
	for _, s := range ss {
		for _, y := range s.ys {
			maxY = max(maxY, y)
		}
	}
	if stock > 0 && float64(stock) <= 2*maxY {
		hline = float64(stock)
	}
	lineChart(b, ss, "orders (201s, cumulative)", hline, fmt.Sprintf("stock %d", stock))
}

func rateChart(b *strings.Builder, runs []*driver.Result) {
	var ss []series
	for i, r := range runs {
		s := series{label: r.Label, color: palette[i%len(palette)]}
		bw := float64(r.Timeline.BucketMS) / 1000
		c := r.Timeline.Created
		const win = 5
		for j := range c {
			sum, n := 0, 0
			for k := max(0, j-win+1); k <= j; k++ {
				sum += c[k]
				n++
			}
			s.xs = append(s.xs, float64(j+1)*bw)
			s.ys = append(s.ys, float64(sum)/(float64(n)*bw))
		}
		ss = append(ss, s)
	}
	lineChart(b, ss, "orders/s", 0, "")
}

// latencyChart draws p50, p95 and p99 of each run as grouped bars on a log scale.
func latencyChart(b *strings.Builder, runs []*driver.Result) {
	const lo = 0.1 // ms, the floor of the log scale
	hi := 1.0
	for _, r := range runs {
		hi = max(hi, r.Latency.P99)
	}
	top := math.Pow(10, math.Ceil(math.Log10(hi*1.01)))
	py := func(v float64) float64 {
		v = max(v, lo)
		return padT + plotH - math.Log10(v/lo)/math.Log10(top/lo)*plotH
	}
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", cw, ch, cw, ch)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/><line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n",
		padL, padT, padL, padT+plotH, padL, padT+plotH, padL+plotW, padT+plotH)
	for t := lo; t <= top*1.001; t *= 10 {
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e5e5e5"/><text x="%d" y="%.1f" text-anchor="end">%s ms</text>`+"\n",
			padL, py(t), padL+plotW, py(t), padL-5, py(t)+4, num(t))
	}
	shades := []string{"#9ecae1", "#4292c6", "#08519c"}
	names := []string{"p50", "p95", "p99"}
	for k, n := range names {
		ly := float64(padT + 14 + 16*k)
		fmt.Fprintf(b, `<rect x="%d" y="%.0f" width="12" height="10" fill="%s"/><text x="%d" y="%.0f">%s</text>`+"\n",
			cw-padR+10, ly-9, shades[k], cw-padR+26, ly, n)
	}
	if len(runs) > 0 {
		group := float64(plotW) / float64(len(runs))
		bar := min(40, group*0.8/3)
		for i, r := range runs {
			x0 := padL + group*float64(i) + (group-3*bar)/2
			for k, v := range []float64{r.Latency.P50, r.Latency.P95, r.Latency.P99} {
				x := x0 + bar*float64(k)
				y := py(v)
				fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s %.1f ms</title></rect>`+
					`<text x="%.1f" y="%.1f" text-anchor="middle" font-size="9">%s</text>`+"\n",
					x, y, bar-2, float64(padT+plotH)-y, shades[k], html.EscapeString(r.Label), names[k], v, x+bar/2-1, y-3, num(v))
			}
			fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", padL+group*(float64(i)+0.5), padT+plotH+15, html.EscapeString(r.Label))
		}
	}
	b.WriteString("</svg>\n")
}

// WriteFile creates path (and its directory) and fills it with write.
func WriteFile(path string, write func(io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil { //nolint:gosec // G301: a report directory, readable like the rest of the work tree
		return err
	}
	f, err := os.Create(path) //nolint:gosec // G304: the caller names the file to write, by design
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
