package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/stock/internal/outbox"
)

// Outbox holds the relay's collectors; it is the relay's outbox.Observer.
// A nil *Outbox records nothing.
type Outbox struct {
	DeliveredN *prometheus.CounterVec   // sink
	Failed     *prometheus.CounterVec   // sink, final: failed attempts; final="true": events given up on
	Lag        *prometheus.HistogramVec // sink: from the write to the delivery
	Pending    *prometheus.GaugeVec     // sink: events past the cursors
	Oldest     *prometheus.GaugeVec     // sink: age of the oldest pending event
	Dead       *prometheus.GaugeVec     // sink: events given up on, not redelivered
}

// NewOutbox registers the relay's collectors on reg, with zero series
// for sinks.
func NewOutbox(reg prometheus.Registerer, sinks []string) *Outbox {
	o := &Outbox{
		DeliveredN: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stock_events_delivered_total", Help: "Events delivered, by sink (a redelivery counts again).",
		}, []string{"sink"}),
		Failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stock_events_failed_attempts_total", Help: "Failed delivery attempts, by sink; final=\"true\": the event was given up on (STOCK_WEBHOOK_MAX_AGE).",
		}, []string{"sink", "final"}),
		Lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "stock_events_lag_seconds", Help: "From an event's write to its delivery, by sink.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"sink"}),
		Pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "stock_events_pending", Help: "Events a sink has not had yet, at the relay's last look.",
		}, []string{"sink"}),
		Oldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "stock_events_oldest_pending_seconds", Help: "Age of the oldest event a sink has not had yet (0: none); a stuck outbox grows it.",
		}, []string{"sink"}),
		Dead: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "stock_events_failed", Help: "Events given up on and not redelivered, by sink.",
		}, []string{"sink"}),
	}
	reg.MustRegister(o.DeliveredN, o.Failed, o.Lag, o.Pending, o.Oldest, o.Dead)
	for _, s := range sinks {
		o.DeliveredN.WithLabelValues(s)
		o.Failed.WithLabelValues(s, "false")
		o.Failed.WithLabelValues(s, "true")
		o.Pending.WithLabelValues(s)
		o.Oldest.WithLabelValues(s)
		o.Dead.WithLabelValues(s)
	}
	return o
}

var _ outbox.Observer = (*Outbox)(nil)

// Delivered counts a delivery and its lag (outbox.Observer).
func (o *Outbox) Delivered(sink string, lag time.Duration) {
	if o != nil {
		o.DeliveredN.WithLabelValues(sink).Inc()
		o.Lag.WithLabelValues(sink).Observe(lag.Seconds())
	}
}

// AttemptFailed counts a failed attempt (outbox.Observer).
func (o *Outbox) AttemptFailed(sink string, final bool) {
	if o != nil {
		f := "false"
		if final {
			f = "true"
		}
		o.Failed.WithLabelValues(sink, f).Inc()
	}
}

// Backlog sets the backlog gauges (outbox.Observer).
func (o *Outbox) Backlog(sink string, b outbox.Backlog) {
	if o != nil {
		o.Pending.WithLabelValues(sink).Set(float64(b.Pending))
		o.Oldest.WithLabelValues(sink).Set(b.Oldest.Seconds())
		o.Dead.WithLabelValues(sink).Set(float64(b.Failed))
	}
}
