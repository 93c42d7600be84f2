package outbox

import (
	"context"
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
	// Rescan is how often each target reads its whole backlog (default
	// 5s): what discovery missed (a SKU another relay let go, a retry
	// come due, an event committed later than gapWait after its id).
	Rescan time.Duration
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
	if c.Rescan <= 0 {
		c.Rescan = 5 * time.Second
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

// Relay delivers every target's events and prunes.
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

// Run works until ctx ends: the pruner (by its lease), discovery and one
// dispatcher per target. It returns when all have stopped.
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

// discover reads, every tick, the SKUs of the events committed since the
// last look and hands them to every dispatcher: one read per relay, not
// per target. It starts from the newest event when it starts (what is
// older is each dispatcher's backlog). Ids are given at the INSERT, not
// at the COMMIT, so an id skipped over (its transaction still open) is
// looked for again every tick for gapWait; past that it is left to the
// dispatchers' rescans (a rolled-back transaction leaves its ids unused).
func (r *Relay) discover(ctx context.Context, ds []*dispatcher) {
	tick := time.NewTicker(r.cfg.Tick)
	defer tick.Stop()
	var pos int64 = -1
	gaps := map[int64]time.Time{} // ids skipped over, since when
	for {
		for more := true; more && ctx.Err() == nil; {
			ws, top, err := r.store.Written(ctx, pos, 5000)
			if err != nil {
				break
			}
			more = pos >= 0 && len(ws) == 5000
			if pos >= 0 {
				noteGaps(gaps, pos, ws)
			}
			pos = top
			handOut(ds, ws)
		}
		r.lookForGaps(ctx, ds, gaps)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// gapWait is how long discovery looks for an event whose id it skipped;
// maxGaps bounds the ids it looks for at once.
const (
	gapWait = 2 * time.Second
	maxGaps = 1000
)

// noteGaps records in gaps the ids between after and ws's (in id order)
// that were not read.
func noteGaps(gaps map[int64]time.Time, after int64, ws []Written) {
	now := time.Now()
	prev := after
	for _, w := range ws {
		for id := prev + 1; id < w.ID && len(gaps) < maxGaps; id++ {
			gaps[id] = now
		}
		prev = w.ID
	}
}

// lookForGaps reads which skipped ids are committed now, hands their SKUs
// out and stops looking for them, and for those older than gapWait.
func (r *Relay) lookForGaps(ctx context.Context, ds []*dispatcher, gaps map[int64]time.Time) {
	if len(gaps) == 0 {
		return
	}
	ids := make([]int64, 0, len(gaps))
	for id := range gaps {
		ids = append(ids, id)
	}
	found, err := r.store.WrittenOf(ctx, ids)
	if err != nil {
		return
	}
	for _, w := range found {
		delete(gaps, w.ID)
	}
	handOut(ds, found)
	for id, since := range gaps {
		if time.Since(since) > gapWait {
			delete(gaps, id)
		}
	}
}

// handOut gives the SKUs of ws to every dispatcher.
func handOut(ds []*dispatcher, ws []Written) {
	if len(ws) == 0 {
		return
	}
	seen := make(map[string]bool, 8)
	skus := make([]string, 0, 8)
	for _, w := range ws {
		if !seen[w.SKU] {
			seen[w.SKU] = true
			skus = append(skus, w.SKU)
		}
	}
	for _, d := range ds {
		d.add(skus)
	}
}

// runJobs prunes every minute while this relay holds the prune lease.
func (r *Relay) runJobs(ctx context.Context) {
	if r.cfg.Retention <= 0 {
		return
	}
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for {
		if ok, err := r.store.TakeLease(ctx, "prune", r.cfg.Owner, time.Minute); err == nil && ok {
			if _, err := r.store.Prune(ctx, time.Now().Add(-r.cfg.Retention), 5000); err != nil {
				r.log.Warn("outbox: pruning failed", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
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
	_, err := r.sendSome(ctx, t, []events.Event{e})
	return err
}

// sendSome makes one attempt at evs on t, bounded by t.Timeout: at all of
// them together when t's sink is a BatchSink, else at the first alone. It
// returns how many, from the first, were delivered, and the error of the
// next one when it was not (nil: n events went, and the caller sends on).
func (r *Relay) sendSome(ctx context.Context, t Target, evs []events.Event) (int, error) {
	bs, batch := t.Sink.(BatchSink)
	if !batch {
		evs = evs[:1]
	}
	bodies := make([][]byte, len(evs))
	for i, e := range evs {
		body, err := e.MarshalJSON() // compact already: json.Marshal would check and copy it again
		if err != nil {
			return 0, err
		}
		bodies[i] = body
	}
	ctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	n, err := len(evs), error(nil)
	if batch {
		n, err = bs.SendBatch(ctx, evs, bodies)
	} else if err = t.Sink.Send(ctx, evs[0], bodies[0]); err != nil {
		n = 0
	}
	for _, e := range evs[:n] {
		r.obs.Delivered(t.Sink.Name(), time.Since(e.OccurredAt))
	}
	if err != nil {
		r.obs.AttemptFailed(t.Sink.Name(), false)
	}
	return n, err
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
