// Package metrics defines the Prometheus metrics of the stock service, on a
// registry the caller creates (never the global one).
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics holds every collector. A nil *Metrics is valid and records nothing.
type Metrics struct {
	Requests        *prometheus.CounterVec   // route, method, status
	RequestDuration *prometheus.HistogramVec // route, method
	Orders          *prometheus.CounterVec   // result: created, replayed, sold_out, limit_exceeded, unpaid_limit, sale_closed, busy, rejected, lock_lost, error
	LockWait        *prometheus.HistogramVec // result: acquired, timeout, abandoned, error
	LockHeld        prometheus.Histogram
	LockResults     *prometheus.CounterVec   // result: acquired, timeout, abandoned, lost, error
	Renewals        *prometheus.CounterVec   // result: renewed, lost, failed
	Conflicts       *prometheus.CounterVec   // strategy: versioned UPDATE misses
	DBOnly          prometheus.Counter       // orders placed through the DB-only path because Redis was down
	BatchSize       prometheus.Histogram     // orders served per lock acquisition (request combining)
	RateLimits      *prometheus.CounterVec   // result: allowed, limited, failed_open, failed_closed
	Transitions     *prometheus.CounterVec   // to (confirmed, cancelled, expired), cause (confirm, cancel, expire)
	Returned        *prometheus.CounterVec   // cause: units given back by cancel or expiry
	TransitionTime  *prometheus.HistogramVec // op (confirm, cancel), outcome
	SweepLag        prometheus.Gauge         // how long the oldest reservation past its deadline has been waiting
	CounterTakes    *prometheus.CounterVec   // result: taken, sold_out, over_limit, missing, error (the counter strategies)
	CounterGiven    prometheus.Counter       // units given back to the Redis counter after MySQL refused them
	CounterSeeds    prometheus.Counter       // counters seeded from MySQL
	CounterRepairs  *prometheus.CounterVec   // direction: up, down; units the reconcile moved the counter by
}

// New registers the metrics on reg, with the Go and process collectors.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{}
	m.newOrderPath()
	m.newLock()
	m.newLifecycle()
	m.newCounter()
	reg.MustRegister(m.Requests, m.RequestDuration, m.Orders, m.LockWait, m.LockHeld, m.LockResults,
		m.Renewals, m.Conflicts, m.DBOnly, m.BatchSize, m.RateLimits,
		m.Transitions, m.Returned, m.TransitionTime, m.SweepLag,
		m.CounterTakes, m.CounterGiven, m.CounterSeeds, m.CounterRepairs,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.zeroSeries()
	return m
}

// newOrderPath makes the collectors of the HTTP edge and the order path.
func (m *Metrics) newOrderPath() {
	m.Requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stock_http_requests_total", Help: "HTTP requests by route, method and status.",
	}, []string{"route", "method", "status"})
	m.RequestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "stock_http_request_duration_seconds", Help: "HTTP request latency by route and method.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	}, []string{"route", "method"})
	m.Orders = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stock_orders_total", Help: "Order requests by result.",
	}, []string{"result"})
	m.RateLimits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stock_rate_limit_total", Help: "Rate limit decisions: allowed, limited, failed_open and failed_closed (Redis could not be asked).",
	}, []string{"result"})
	m.DBOnly = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "stock_db_only_orders_total", Help: "Order attempts sent down the DB-only path because Redis was unreachable.",
	})
	m.Conflicts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stock_backstop_conflicts_total", Help: "Versioned UPDATEs that matched no row (0 under a healthy lock).",
	}, []string{"strategy"})
}

// newLock makes the SKU lock's collectors.
func (m *Metrics) newLock() {
	m.LockWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "stock_lock_wait_seconds", Help: "Time spent waiting for the SKU lock, by result.",
		Buckets: []float64{.0001, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}, []string{"result"})
	m.LockHeld = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "stock_lock_held_seconds", Help: "Time the SKU lock was held.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	})
	m.LockResults = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stock_lock_results_total", Help: "SKU lock outcomes: acquired, timeout, abandoned (the SKU was found sold out meanwhile), lost, error.",
	}, []string{"result"})
	m.Renewals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stock_lock_renewals_total", Help: "Watchdog renewals by result: renewed, lost (per hold), failed (per script call).",
	}, []string{"result"})
	m.BatchSize = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "stock_lock_batch_orders", Help: "Orders of one SKU served per lock acquisition (lock+version request combining).",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128},
	})
}

// newLifecycle makes the order lifecycle's collectors.
func (m *Metrics) newLifecycle() {
	m.Transitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stock_order_transitions_total", Help: "Orders moved out of reserved, by the status they reached and the cause (confirm, cancel, expire).",
	}, []string{"to", "cause"})
	m.Returned = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stock_units_returned_total", Help: "Units given back to available by cancelled or expired orders, by cause.",
	}, []string{"cause"})
	m.TransitionTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "stock_order_transition_seconds", Help: "Latency of confirm and cancel, by op and outcome.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}, []string{"op", "outcome"})
	m.SweepLag = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "stock_expiry_lag_seconds", Help: "Age past its deadline of the oldest reserved order not yet expired, at the last sweep (0: none overdue).",
	})
}

// newCounter makes the collectors of the Redis stock counter (the counter
// strategies).
func (m *Metrics) newCounter() {
	m.CounterTakes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stock_counter_takes_total", Help: "Answers of the Redis stock counter: taken, sold_out, over_limit, missing, error.",
	}, []string{"result"})
	m.CounterGiven = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "stock_counter_given_back_units_total", Help: "Units given back to the Redis stock counter after MySQL refused their order.",
	})
	m.CounterSeeds = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "stock_counter_seeds_total", Help: "Redis stock counters seeded from MySQL's row (a missing counter, a restock).",
	})
	m.CounterRepairs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stock_counter_repaired_units_total", Help: "Units the reconcile moved a drifted Redis stock counter by, up or down, to MySQL's row.",
	}, []string{"direction"})
}

// zeroSeries creates the series of every known label value, so that they
// are exported (and an alert on their rate sees 0) before the first event.
func (m *Metrics) zeroSeries() {
	for _, r := range []string{"created", "replayed", "sold_out", "limit_exceeded", "unpaid_limit", "sale_closed", "busy", "rejected", "lock_lost", "error"} {
		m.Orders.WithLabelValues(r)
	}
	for _, r := range []string{"acquired", "timeout", "abandoned", "lost", "error"} {
		m.LockResults.WithLabelValues(r)
	}
	for _, r := range []string{"renewed", "lost", "failed"} {
		m.Renewals.WithLabelValues(r)
	}
	for _, r := range []string{"allowed", "limited", "failed_open", "failed_closed"} {
		m.RateLimits.WithLabelValues(r)
	}
	for _, t := range [][2]string{{"confirmed", "confirm"}, {"cancelled", "cancel"}, {"expired", "expire"}, {"expired", "confirm"}, {"expired", "cancel"}} {
		m.Transitions.WithLabelValues(t[0], t[1])
	}
	for _, c := range []string{"cancel", "expire"} {
		m.Returned.WithLabelValues(c)
	}
	for _, op := range []string{"confirm", "cancel"} {
		m.TransitionTime.WithLabelValues(op, "ok")
	}
	for _, r := range []string{"taken", "sold_out", "over_limit", "missing", "error"} {
		m.CounterTakes.WithLabelValues(r)
	}
	for _, d := range []string{"up", "down"} {
		m.CounterRepairs.WithLabelValues(d)
	}
}

// CounterTake counts one answer of the stock counter (err: "error").
func (m *Metrics) CounterTake(result string, err error) {
	if m == nil {
		return
	}
	if err != nil {
		result = "error"
	}
	m.CounterTakes.WithLabelValues(result).Inc()
}

// CounterGivenBack counts units given back to the stock counter.
func (m *Metrics) CounterGivenBack(units int64) {
	if m != nil {
		m.CounterGiven.Add(float64(units))
	}
}

// CounterSeeded counts a counter seeded from MySQL.
func (m *Metrics) CounterSeeded() {
	if m != nil {
		m.CounterSeeds.Inc()
	}
}

// CounterRepaired counts a repair that moved a counter by delta units.
func (m *Metrics) CounterRepaired(delta int64) {
	if m == nil {
		return
	}
	if delta > 0 {
		m.CounterRepairs.WithLabelValues("up").Add(float64(delta))
	} else {
		m.CounterRepairs.WithLabelValues("down").Add(float64(-delta))
	}
}

// CountTransitions counts n orders that reached status to, by cause.
func (m *Metrics) CountTransitions(to, cause string, n int) {
	if m != nil {
		m.Transitions.WithLabelValues(to, cause).Add(float64(n))
	}
}

// CountReturn counts units given back to available, by cause.
func (m *Metrics) CountReturn(cause string, units int64) {
	if m != nil {
		m.Returned.WithLabelValues(cause).Add(float64(units))
	}
}

// ObserveTransition records one confirm or cancel: its latency by outcome.
func (m *Metrics) ObserveTransition(op, outcome string, d time.Duration) {
	if m != nil {
		m.TransitionTime.WithLabelValues(op, outcome).Observe(d.Seconds())
	}
}

// SetSweepLag records the age past its deadline of the oldest reservation
// not yet expired.
func (m *Metrics) SetSweepLag(d time.Duration) {
	if m != nil {
		m.SweepLag.Set(d.Seconds())
	}
}

// Strategy creates the zero series of the counters labelled by strategy, so
// that they are exported, and an alert on their rate sees 0 rather than
// nothing, before the first increment.
func (m *Metrics) Strategy(name string) {
	if m != nil {
		m.Conflicts.WithLabelValues(name)
	}
}

// RateLimit counts one rate limit decision.
func (m *Metrics) RateLimit(result string) {
	if m != nil {
		m.RateLimits.WithLabelValues(result).Inc()
	}
}

// Order counts one order request by result.
func (m *Metrics) Order(result string) {
	if m != nil {
		m.Orders.WithLabelValues(result).Inc()
	}
}

// Lock records one lock attempt: its wait and result.
func (m *Metrics) Lock(result string, wait time.Duration) {
	if m != nil {
		m.LockResults.WithLabelValues(result).Inc()
		if result != "lost" {
			m.LockWait.WithLabelValues(result).Observe(wait.Seconds())
		}
	}
}

// Held records how long the lock was held.
func (m *Metrics) Held(d time.Duration) {
	if m != nil {
		m.LockHeld.Observe(d.Seconds())
	}
}

// Batch records how many orders one lock acquisition served.
func (m *Metrics) Batch(n int) {
	if m != nil {
		m.BatchSize.Observe(float64(n))
	}
}

// Conflict counts one versioned UPDATE miss.
func (m *Metrics) Conflict(strategy string) {
	if m != nil {
		m.Conflicts.WithLabelValues(strategy).Inc()
	}
}

// DBOnlyOrder counts one order attempt on the DB-only path.
func (m *Metrics) DBOnlyOrder() {
	if m != nil {
		m.DBOnly.Inc()
	}
}

// Renewed records one watchdog renewal call.
func (m *Metrics) Renewed(renewed, lost int, err error) {
	if m == nil {
		return
	}
	m.Renewals.WithLabelValues("renewed").Add(float64(renewed))
	m.Renewals.WithLabelValues("lost").Add(float64(lost))
	if err != nil {
		m.Renewals.WithLabelValues("failed").Inc()
	}
}

// Request records one HTTP request.
func (m *Metrics) Request(route, method, status string, d time.Duration) {
	if m != nil {
		m.Requests.WithLabelValues(route, method, status).Inc()
		m.RequestDuration.WithLabelValues(route, method).Observe(d.Seconds())
	}
}
