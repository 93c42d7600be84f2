package main

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seckill/stock/client"
)

// openFigures are one run's figures: the buyers' results and the CPU
// (collectSale) summed up (finish), then MySQL's and the audits'
// (openOnce), then the fairness (fairness).
type openFigures struct {
	results    []buyerResult      // buyer i's
	cpu        map[string]float64 // CPU seconds by group (cpuGroups) from the start until the crowds ended
	cpuWindow  time.Duration      // that time
	start      time.Time          // the sale's start, as set
	warmUp     time.Duration      // opening every buyer's connection
	buyers     int
	units      int64 // on sale, all SKUs together
	skus       int
	demand     []int           // buyers of each SKU
	keys       []string        // buyer i's idempotency key
	sent       []time.Duration // buyer i's first order request written, after the start (-1: never)
	warmFailed int             // buyers whose warm-up request failed
	crowds     int             // the crowd processes the buyers were dealt into
	load       string          // the box's load average as the buyers fired (/proc/loadavg)
	ordered    int             // buyers who sent their order (over their connection)
	lastSent   time.Duration   // the last first order request written, after the start
	firstSec   int             // answers received in the first second after the start
	p50, p99   float64         // their latency (request written to answer), ms
	maxMS      float64
	lastAnswer time.Duration  // the last buyer's final answer, after the start
	finals     map[string]int // final answers: "201", "409 sold-out", "no answer", ...
	final      []int          // buyer i's final answer's status (0: none)
	fiveXX     int            // 5xx answers, every try
	failed     int            // tries with no answer (refused, reset, timed out)
	early      int            // sale-not-started answers
	retried    int            // buyers who sent more than once
	sentAgain  map[string]int // the answers that made a buyer send again, by name (finalName)
	errs       []string       // a few of the failures' errors
	firstP50   time.Duration  // buyers' first answers: the median time after the start
	firstP99   time.Duration  // and the 99th percentile
	logged     int            // ERROR lines in the instances' logs
	logSample  []string       // a few distinct errors of them
	db         openDB
	audits     []client.Audit
	exitOK     bool
	// The fairness: the share of the units won by the n buyers who sent
	// first, and by n buyers drawn at random; expected is n/buyers.
	firstShare, randomShare, expected float64
}

// finish sums up f.results, the buyers of shape, units on sale in all.
func (f *openFigures) finish(shape openShape, units int64) {
	f.buyers, f.units, f.skus = len(f.results), units, len(shape.units)
	f.demand, f.sent, f.final, f.finals = make([]int, len(shape.units)), make([]time.Duration, len(f.results)), make([]int, len(f.results)), map[string]int{}
	hist := map[int64]int64{} // µs -> answers of the first second
	for i, r := range f.results {
		f.demand[shape.picks[i]]++
		f.sent[i] = -1
		if r.Warm != "" {
			f.warmFailed++
			f.note(r.Warm)
		}
		if len(r.Tries) == 0 {
			f.finals["not sent"]++
			continue
		}
		f.countTries(r, hist)
		last := r.Tries[len(r.Tries)-1]
		f.final[i], f.sent[i] = last.Status, r.Tries[0].Sent
		f.lastSent, f.lastAnswer = max(f.lastSent, r.Tries[0].Sent), max(f.lastAnswer, last.At)
		f.finals[finalName(last)]++
	}
	f.p50, f.p99, f.maxMS = percentile(hist, 50), percentile(hist, 99), percentile(hist, 100)
	f.firstP50, f.firstP99 = f.firstAnswers(50), f.firstAnswers(99)
}

// firstAnswers is the p-th percentile of the times, after the start, at
// which the buyers had their first answer (of those who had one).
func (f *openFigures) firstAnswers(p float64) time.Duration {
	h := map[int64]int64{}
	for _, r := range f.results {
		if len(r.Tries) > 0 && r.Tries[0].Status != 0 {
			h[r.Tries[0].At.Microseconds()]++
		}
	}
	return time.Duration(percentile(h, p) * float64(time.Millisecond))
}

// logErrors counts the ERROR lines of an instance's log, and keeps a few
// of their distinct errors.
func (f *openFigures) logErrors(path string) {
	b, err := os.ReadFile(path) //nolint:gosec // G304: an instance's log, of the fleet
	if err != nil {
		return
	}
	for line := range strings.Lines(string(b)) {
		if !strings.Contains(line, "level=ERROR") {
			continue
		}
		f.logged++
		_, e, _ := strings.Cut(line, "err=")
		if e = strings.TrimSpace(e); e != "" && len(f.logSample) < 3 && !slices.Contains(f.logSample, e) {
			f.logSample = append(f.logSample, e)
		}
	}
}

// countTries counts r's tries into f, and the latency of those answered
// in the first second into hist.
func (f *openFigures) countTries(r buyerResult, hist map[int64]int64) {
	f.ordered++
	if len(r.Tries) > 1 {
		f.retried++
	}
	for _, t := range r.Tries[:len(r.Tries)-1] {
		if f.sentAgain == nil {
			f.sentAgain = map[string]int{}
		}
		f.sentAgain[finalName(t)]++
	}
	for _, t := range r.Tries {
		switch {
		case t.Status == 0:
			f.failed++
			f.note(r.Err)
		case t.Status >= 500:
			f.fiveXX++
		case t.Kind == client.KindSaleNotStarted:
			f.early++
		}
		if t.Status != 0 && t.At >= 0 && t.At < time.Second {
			f.firstSec++
			hist[(t.At-t.Sent).Microseconds()]++
		}
	}
}

// note keeps the first few distinct errors.
func (f *openFigures) note(e string) {
	if e != "" && len(f.errs) < 3 && !slices.Contains(f.errs, e) {
		f.errs = append(f.errs, e)
	}
}

// finalName names a buyer's final answer: its status and problem kind.
func finalName(t openTry) string {
	switch {
	case t.Status == 0:
		return "no answer"
	case t.Kind == "":
		return strconv.Itoa(t.Status)
	}
	return strconv.Itoa(t.Status) + " " + t.Kind
}

// openDB is what MySQL holds after a run, by SKU index.
type openDB struct {
	startsAt                  time.Time // the first SKU's sale_starts_at as stored
	stocked, available, sold  []int64
	orders, units             []int64          // the orders' count and units
	byKey                     map[string]int64 // units of each idempotency key
	lastAt                    time.Time        // the latest order's created_at
	created                   []time.Time      // every order's created_at
	unknownSKUs, unknownOrder int              // rows of SKUs not the run's
}

// readOpenDB reads the run's stock rows and orders (the database is the
// run's own).
func readOpenDB(ctx context.Context, dsn string, skus []string) (openDB, error) {
	n := len(skus)
	d := openDB{stocked: make([]int64, n), available: make([]int64, n), sold: make([]int64, n),
		orders: make([]int64, n), units: make([]int64, n), byKey: map[string]int64{}}
	index := map[string]int{}
	for k, s := range skus {
		index[s] = k
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return d, err
	}
	defer func() { _ = db.Close() }()
	if err := d.readStock(ctx, db, index); err != nil {
		return d, err
	}
	return d, d.readOrders(ctx, db, index)
}

func (d *openDB) readStock(ctx context.Context, db *sql.DB, index map[string]int) error {
	rows, err := db.QueryContext(ctx, "SELECT sku, stocked, available, sold, sale_starts_at FROM stock")
	if err != nil {
		return err
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var sku string
		var stocked, available, sold int64
		var starts sql.NullTime
		if err := rows.Scan(&sku, &stocked, &available, &sold, &starts); err != nil {
			return err
		}
		k, ok := index[sku]
		if !ok {
			d.unknownSKUs++
			continue
		}
		d.stocked[k], d.available[k], d.sold[k] = stocked, available, sold
		if k == 0 && starts.Valid {
			d.startsAt = starts.Time
		}
	}
	return rows.Err()
}

func (d *openDB) readOrders(ctx context.Context, db *sql.DB, index map[string]int) error {
	rows, err := db.QueryContext(ctx, "SELECT sku, idempotency_key, quantity, created_at FROM orders")
	if err != nil {
		return err
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var sku, key string
		var q int64
		var at time.Time
		if err := rows.Scan(&sku, &key, &q, &at); err != nil {
			return err
		}
		k, ok := index[sku]
		if !ok {
			d.unknownOrder++
			continue
		}
		d.orders[k]++
		d.units[k] += q
		d.byKey[key] += q
		d.created = append(d.created, at)
		if at.After(d.lastAt) {
			d.lastAt = at
		}
	}
	return rows.Err()
}

// lastUnit is the time from the start to the last order's created_at
// (-1: no order).
func (f openFigures) lastUnit() time.Duration {
	if f.db.lastAt.IsZero() {
		return -1
	}
	return f.db.lastAt.Sub(f.db.startsAt)
}

// ordersBy is how many orders MySQL's created_at puts within d of the
// start.
func (f openFigures) ordersBy(d time.Duration) int {
	n := 0
	for _, at := range f.db.created {
		if at.Sub(f.db.startsAt) <= d {
			n++
		}
	}
	return n
}

// soldUnits is the units MySQL's orders hold, and the units the buyers
// could take: each SKU's stock or its buyers, whichever is fewer.
func (f openFigures) soldUnits() (sold, takeable int64) {
	for k := range f.db.units {
		sold += f.db.units[k]
		takeable += min(f.db.stocked[k], int64(f.demand[k]))
	}
	return sold, takeable
}

// fairness sets the run's shares: of the units won (in MySQL), the part
// the first n senders won, n the units on sale; and the part n buyers
// drawn at random won.
func (f *openFigures) fairness() {
	won := make([]int64, len(f.keys))
	for i, k := range f.keys {
		won[i] = f.db.byKey[k]
	}
	n := int(f.firstN())
	f.firstShare = unitShare(sendOrder(f.sent), won, n)
	f.randomShare = unitShare(rand.New(rand.NewPCG(44, uint64(len(won)))).Perm(len(won)), won, n) //nolint:gosec // G404: a draw for a figure, not a secret
	if len(won) > 0 {
		f.expected = float64(n) / float64(len(won))
	}
}

// sendOrder is the buyers' indices in the order their first requests were
// written; those never sent (-1) come last.
func sendOrder(sent []time.Duration) []int {
	order := make([]int, len(sent))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if (sent[a] < 0) != (sent[b] < 0) {
			if sent[a] < 0 {
				return 1
			}
			return -1
		}
		return cmp.Compare(sent[a], sent[b])
	})
	return order
}

// unitShare is the share of all the units won that the buyers order[:n]
// won (0 when none was).
func unitShare(order []int, won []int64, n int) float64 {
	var all, theirs int64
	for _, w := range won {
		all += w
	}
	for _, i := range order[:min(n, len(order))] {
		theirs += won[i]
	}
	if all == 0 {
		return 0
	}
	return float64(theirs) / float64(all)
}

// zipfPicks is n buyers' SKUs of skus, SKU k picked with a weight of
// (k+1)^-s (s > 1), from a generator seeded with seed.
func zipfPicks(n, skus int, s float64, seed uint64) []int {
	z := rand.NewZipf(rand.New(rand.NewPCG(seed, seed^0x5eed)), s, 1, uint64(max(skus-1, 0))) //nolint:gosec // G404: a crowd's draw, not a secret
	out := make([]int, n)
	for i := range out {
		out[i] = int(z.Uint64()) //nolint:gosec // G115: at most skus-1
	}
	return out
}

// spreadUnits splits units over skus SKUs as evenly as it goes, the
// remainder to the first (most wanted).
func spreadUnits(units int64, skus int) []int64 {
	out := make([]int64, skus)
	for k := range out {
		out[k] = units / int64(skus)
		if int64(k) < units%int64(skus) {
			out[k]++
		}
	}
	return out
}

// spreadText is the units per SKU spreadUnits gives: "10", or "10-11".
func spreadText(units int64, skus int) string {
	u := spreadUnits(units, skus)
	if len(u) == 0 || u[0] == u[len(u)-1] {
		return strconv.FormatInt(units/int64(max(skus, 1)), 10)
	}
	return fmt.Sprintf("%d-%d", u[len(u)-1], u[0])
}
