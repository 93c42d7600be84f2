package driver

import (
	"fmt"
	"strings"
	"time"
)

// Result is everything one run measured and proved. The JSON field names are
// the report format.
type Result struct {
	Label   string    `json:"label"`
	SKU     string    `json:"sku"`
	RunID   string    `json:"run_id"`
	Started time.Time `json:"started"`

	URLs        []string `json:"urls"`
	Stock       int64    `json:"stock"`
	Buyers      int      `json:"buyers"`
	Concurrency int      `json:"concurrency"`
	Quantity    int      `json:"quantity"`
	Retries     int      `json:"retries"`
	CapSeconds  float64  `json:"cap_seconds"`

	ExpectedOrders int64 `json:"expected_orders"`
	ExpectedSold   int64 `json:"expected_sold"`

	Seconds          float64        `json:"seconds"`            // the buying phase, first request to last answer
	LastOrderSeconds float64        `json:"last_order_seconds"` // when the last 201 arrived (the sell-out moment)
	Aborted          bool           `json:"aborted"`            // the duration cap ended the run early
	BuyersRun        int            `json:"buyers_run"`
	Requests         int            `json:"requests"`
	Statuses         map[string]int `json:"statuses"` // per request: "201", "409", "429", "no-response", ...
	Outcomes         map[string]int `json:"outcomes"` // per buyer, its last answer
	// RateLimited and Busy split Statuses["429"] by problem type: refused by
	// the per-client-IP rate limit, or busy (the SKU's line is full; any
	// other 429 counts here too).
	RateLimited int `json:"rate_limited"`
	Busy        int `json:"busy"`
	// RateLimitedBuyers is buyers whose last answer was 429 rate-limited:
	// refused by policy, so not counted in the demand the sell-out check
	// expects to be served.
	RateLimitedBuyers int `json:"rate_limited_buyers"`
	// Problems counts problem details answers by kind ("sold-out", "busy",
	// "rate-limited", ...).
	Problems     map[string]int `json:"problems,omitempty"`
	Created      int            `json:"created"`  // 201s
	Replayed     int            `json:"replayed"` // 200s (a retry of an order that had been committed)
	BadEchoes    int            `json:"bad_echoes"`
	OrdersPerSec float64        `json:"orders_per_sec"` // 201s per second of the buying phase
	// MySQLPerRequest is MySQL's statements (the server's Questions, from
	// every client: the instances' sweeps too) per order request of the
	// buying phase; -1: not measured (no MySQLDSN).
	MySQLPerRequest float64  `json:"mysql_statements_per_request"`
	RequestsPerSec  float64  `json:"requests_per_sec"`
	Latency         Latency  `json:"latency"` // every order request, retries included
	Timeline        Timeline `json:"timeline"`
	// Crowds is each crowd on its own (only with Config.Crowds).
	Crowds []CrowdResult `json:"crowds,omitempty"`

	Metrics   Metrics    `json:"metrics"`
	Instances []Instance `json:"instances,omitempty"` // filled by whoever started the instances
	Machine   Machine    `json:"machine"`

	Audit    *Audit      `json:"audit,omitempty"`
	MySQL    *MySQLState `json:"mysql,omitempty"`
	Sold     int64       `json:"sold"`     // units sold this run, per the stock row
	Orders   int64       `json:"orders"`   // orders placed this run (audit)
	Units    int64       `json:"units"`    // units in those orders
	Oversold int64       `json:"oversold"` // units ordered beyond the stock
	// LostUpdates is units in orders that the stock row does not account for
	// (units - sold): the read-check-write race of the unsafe strategy.
	LostUpdates int64 `json:"lost_updates"`
	// BuyersOverLimit is the buyers holding more than the per-buyer limit,
	// from the audit (an unsafe strategy is caught here too).
	BuyersOverLimit int64 `json:"buyers_over_limit"`

	Checks           []Check `json:"checks"`
	ExpectOversell   bool    `json:"expect_oversell"`
	OversellDetected bool    `json:"oversell_detected"`
	// Safe: every safety check held (with ExpectOversell: the oversell was
	// caught and nothing else broke). Passed: Safe, and every buyer who could
	// have bought did (no liveness check failed).
	Safe   bool `json:"safe"`
	Passed bool `json:"passed"`
}

// Latency summarises request latencies, in milliseconds.
type Latency struct {
	P50  float64 `json:"p50_ms"`
	P95  float64 `json:"p95_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
	Mean float64 `json:"mean_ms"`
}

// CrowdResult is what one crowd of the run saw: the same counts as the run's,
// over its buyers' requests only.
type CrowdResult struct {
	Name        string  `json:"name"`
	FirstBuyer  int     `json:"first_buyer"` // its buyers are FirstBuyer .. FirstBuyer+Buyers-1
	Buyers      int     `json:"buyers"`
	Concurrency int     `json:"concurrency"`
	Retries     int     `json:"retries"`
	Rate        float64 `json:"rate"`

	BuyersRun         int            `json:"buyers_run"`
	Requests          int            `json:"requests"`
	Statuses          map[string]int `json:"statuses"`
	Outcomes          map[string]int `json:"outcomes"`
	RateLimited       int            `json:"rate_limited"`
	Busy              int            `json:"busy"`
	RateLimitedBuyers int            `json:"rate_limited_buyers"`
	Created           int            `json:"created"`
	Replayed          int            `json:"replayed"`
	Latency           Latency        `json:"latency"`
	// FirstSent and LastAnswer bound its requests, in seconds since the
	// start of the buying phase (0 and 0 when it sent none).
	FirstSent  float64 `json:"first_sent_seconds"`
	LastAnswer float64 `json:"last_answer_seconds"`
}

// Timeline counts answers per BucketWidth of the buying phase.
type Timeline struct {
	BucketMS int   `json:"bucket_ms"`
	Created  []int `json:"created"`  // 201s
	Requests []int `json:"requests"` // every answer
}

// Instance is one server process, as seen by whoever started it.
type Instance struct {
	URL          string `json:"url"`
	PID          int    `json:"pid,omitempty"`
	PeakRSSBytes int64  `json:"peak_rss_bytes,omitempty"` // VmHWM just before stopping
	ExitOK       bool   `json:"exit_ok"`                  // exited 0 after SIGTERM
}

// Check is one verified invariant.
type Check struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Oversell marks the checks an oversell (or a lost update) breaks; with
	// ExpectOversell the others must still hold.
	Oversell bool `json:"oversell"`
	// Liveness marks the checks that fail when buyers gave up (their
	// retries ran out, or the duration cap hit) while nothing unsafe happened.
	Liveness bool   `json:"liveness,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

// RSS formats each instance's peak RSS in MiB ("31/30/32"), or the RSS at the
// end of the run from /metrics when no peak is known.
func (res *Result) RSS() string {
	var parts []string
	for _, in := range res.Instances {
		if in.PeakRSSBytes > 0 {
			parts = append(parts, fmt.Sprintf("%.0f", float64(in.PeakRSSBytes)/mib))
		}
	}
	if len(parts) > 0 {
		return strings.Join(parts, "/")
	}
	for _, m := range res.Metrics.Instances {
		if m.RSSBytes > 0 {
			parts = append(parts, fmt.Sprintf("%.0f", m.RSSBytes/mib))
		}
	}
	if len(parts) > 0 {
		return "~" + strings.Join(parts, "/")
	}
	return "-"
}

// Verdict is PASS; DETECTED for an expected oversell that was caught; SHORT
// when nothing unsafe happened but buyers gave up, so less than
// min(stock, demand) was sold; or FAIL.
func (res *Result) Verdict() string {
	switch {
	case !res.Safe:
		return "FAIL"
	case !res.Passed:
		return "SHORT"
	case res.ExpectOversell:
		return "DETECTED"
	}
	return "PASS"
}

// mib is a mebibyte.
const mib = 1 << 20
