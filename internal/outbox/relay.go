package outbox

import (
	"context"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/seckill/stock/events"
)

// Target is a sink with its retry policy.
type Target struct {
	Sink Sink
	// MaxAge is how long an event is retried before it is marked failed
	// and the SKU's next goes (0: retried until delivered).
	MaxAge time.Duration
	// MaxBackoff caps the wait between attempts (which starts near 1s and
	// doubles, with jitter).
	MaxBackoff time.Duration
	// Timeout bounds one attempt.
	Timeout time.Duration
}

// Observer is told what the relay does (metrics).
type Observer interface {
	// Delivered: an event reached sink, lag after it was written.
	Delivered(sink string, lag time.Duration)
	// Attempt: a failed attempt (final: the event was given up on).
	AttemptFailed(sink string, final bool)
	// Backlog: what sink has not delivered, read now and then.
	Backlog(sink string, b Backlog)
}

// Config is a relay's.
type Config struct {
	// Owner names this relay in the leases; unique per process.
	Owner   string
	Targets []Target
	// Retention: events older are pruned (0: never).
	Retention time.Duration
	// Tick is how often new events are looked for (default 50ms).
	Tick time.Duration
	// Lease is how long a SKU's cursor is held without renewal; a dead
	// relay's SKUs are taken over after it (default 3s; for a target whose
	// Timeout is longer, its Timeout plus 1s).
	Lease time.Duration
	// Workers bounds the SKUs one target delivers at once (default 16).
	Workers int
	// Batch is how many events of a SKU are read at once (default 100).
	Batch int
}

func (c *Config) defaults() {
	if c.Tick <= 0 {
		c.Tick = 50 * time.Millisecond
	}
	if c.Lease <= 0 {
		c.Lease = 3 * time.Second
	}
	if c.Workers <= 0 {
		c.Workers = 16
	}
	if c.Batch <= 0 {
		c.Batch = 100
	}
	for i := range c.Targets {
		if c.Targets[i].MaxBackoff <= 0 {
			c.Targets[i].MaxBackoff = time.Minute
		}
		if c.Targets[i].Timeout <= 0 {
			c.Targets[i].Timeout = 5 * time.Second
		}
	}
}

// Relay stamps the feed, delivers every target's events and prunes.
type Relay struct {
	cfg   Config
	store Store
	obs   Observer
	log   *slog.Logger
}

// New returns a relay of cfg on store; obs may be nil.
func New(cfg Config, store Store, obs Observer, log *slog.Logger) *Relay {
	cfg.defaults()
	if obs == nil {
		obs = nopObserver{}
	}
	return &Relay{cfg: cfg, store: store, obs: obs, log: log}
}

// Run works until ctx ends: the stamper and pruner (each by its lease)
// and one dispatcher per target. It returns when all have stopped.
func (r *Relay) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { r.runJobs(ctx) })
	var ds []*dispatcher
	for _, t := range r.cfg.Targets {
		d := newDispatcher(r, t)
		ds = append(ds, d)
		wg.Go(func() { d.run(ctx) })
		if t.MaxAge > 0 {
			wg.Go(func() { r.runRedeliveries(ctx, t) })
		}
	}
	if len(ds) > 0 {
		wg.Go(func() { r.discover(ctx, ds) })
	}
	wg.Wait()
}

// discover reads, every tick, the SKUs of the events stamped since the
// last look and hands them to every dispatcher: one read per relay, not
// per target. It starts from the feed's end when it starts (what is older
// is each dispatcher's backlog).
func (r *Relay) discover(ctx context.Context, ds []*dispatcher) {
	tick := time.NewTicker(r.cfg.Tick)
	defer tick.Stop()
	var pos int64 = -1
	for {
		for more := true; more && ctx.Err() == nil; {
			skus, top, err := r.store.Touched(ctx, pos, 5000)
			if err != nil {
				break
			}
			more = pos >= 0 && top > pos && len(skus) > 0
			pos = top
			for _, d := range ds {
				d.add(skus)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// runJobs stamps feed positions every tick and prunes every minute, each
// while this relay holds its lease. The stamp lease is asked for (taken or
// renewed) every third of it, not every tick.
func (r *Relay) runJobs(ctx context.Context) {
	tick := time.NewTicker(r.cfg.Tick)
	defer tick.Stop()
	var lastPrune, asked time.Time
	stamping := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if time.Since(asked) >= r.cfg.Lease/3 {
			asked = time.Now()
			ok, err := r.store.TakeLease(ctx, "stamp", r.cfg.Owner, r.cfg.Lease)
			stamping = err == nil && ok
		}
		if stamping {
			var err error
			for n := 1000; n == 1000 && ctx.Err() == nil; {
				if n, err = r.store.Stamp(ctx, r.cfg.Owner, 1000); err != nil {
					r.log.Warn("outbox: stamping the feed failed", "err", err)
				}
			}
		}
		if r.cfg.Retention > 0 && time.Since(lastPrune) > time.Minute {
			lastPrune = time.Now()
			if ok, err := r.store.TakeLease(ctx, "prune", r.cfg.Owner, time.Minute); err == nil && ok {
				if _, err := r.store.Prune(ctx, time.Now().Add(-r.cfg.Retention), 5000); err != nil {
					r.log.Warn("outbox: pruning failed", "err", err)
				}
			}
		}
	}
}

// runRedeliveries sends the events an admin asked to redeliver to t, one
// attempt per request.
func (r *Relay) runRedeliveries(ctx context.Context, t Target) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		reds, err := r.store.Redeliveries(ctx, t.Sink.Name(), 10, time.Minute)
		if err != nil {
			r.log.Warn("outbox: reading redeliveries failed", "sink", t.Sink.Name(), "err", err)
			continue
		}
		for _, red := range reds {
			err := r.send(ctx, t, red.Event)
			if rerr := r.store.Redelivered(ctx, t.Sink.Name(), idOf(red.Event), err); rerr != nil {
				r.log.Warn("outbox: recording a redelivery failed", "sink", t.Sink.Name(), "event", red.Event.ID, "err", rerr)
			}
		}
	}
}

// send makes one attempt at e on t, bounded by t.Timeout.
func (r *Relay) send(ctx context.Context, t Target, e events.Event) error {
	body, err := json.Marshal(e)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	if err := t.Sink.Send(ctx, e, body); err != nil {
		r.obs.AttemptFailed(t.Sink.Name(), false)
		return err
	}
	r.obs.Delivered(t.Sink.Name(), time.Since(e.OccurredAt))
	return nil
}

// backoff is the wait before attempt n+1 after n failed ones: about 1s,
// doubling, capped at max, with up to 20% jitter either way.
func backoff(n int, maxWait time.Duration) time.Duration {
	d := time.Second
	for i := 1; i < n && d < maxWait; i++ {
		d *= 2
	}
	d = min(d, maxWait)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64())) //nolint:gosec // G404: jitter, not a secret
}

type nopObserver struct{}

func (nopObserver) Delivered(string, time.Duration) {}
func (nopObserver) AttemptFailed(string, bool)      {}
func (nopObserver) Backlog(string, Backlog)         {}
