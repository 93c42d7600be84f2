package outbox

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/seckill/stock/events"
)

// dispatcher finds the SKUs with events a target has not had and runs a
// worker per SKU (at most cfg.Workers at once). New events are found by
// their feed positions every tick; every few seconds, and at the start,
// the whole backlog is read too (a SKU another relay dropped, a retry come
// due).
type dispatcher struct {
	r *Relay
	t Target

	mu        sync.Mutex
	running   map[string]bool
	notBefore map[string]time.Time // a SKU waiting for its retry or another relay's lease
	pending   map[string]bool      // SKUs to try
	slots     chan struct{}
}

func newDispatcher(r *Relay, t Target) *dispatcher {
	return &dispatcher{r: r, t: t, running: map[string]bool{}, notBefore: map[string]time.Time{},
		pending: map[string]bool{}, slots: make(chan struct{}, r.cfg.Workers)}
}

// run dispatches until ctx ends and every worker has stopped.
func (d *dispatcher) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	tick := time.NewTicker(d.r.cfg.Tick)
	defer tick.Stop()
	var pos int64 = -1 // unknown: start from the backlog
	var lastScan time.Time
	name := d.t.Sink.Name()
	for {
		if pos < 0 || time.Since(lastScan) > 5*time.Second {
			lastScan = time.Now()
			if b, err := d.r.store.Backlog(ctx, name); err == nil {
				d.r.obs.Backlog(name, b)
			}
			skus, err := d.r.store.Behind(ctx, name, 10000)
			if err == nil {
				d.add(skus)
				if pos < 0 {
					pos = 0
				}
			}
		}
		if pos >= 0 {
			for more := true; more; {
				skus, top, err := d.r.store.Touched(ctx, pos, 5000)
				more = err == nil && top > pos && len(skus) > 0
				pos = top
				d.add(skus)
			}
		}
		d.start(ctx, &wg)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// add marks skus to try.
func (d *dispatcher) add(skus []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range skus {
		d.pending[s] = true
	}
}

// start runs a worker for each pending SKU that is due and not running,
// while slots are free.
func (d *dispatcher) start(ctx context.Context, wg *sync.WaitGroup) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	for sku := range d.pending {
		if d.running[sku] || now.Before(d.notBefore[sku]) {
			continue
		}
		select {
		case d.slots <- struct{}{}:
		default:
			return
		}
		delete(d.pending, sku)
		delete(d.notBefore, sku)
		d.running[sku] = true
		wg.Go(func() {
			wait := d.work(ctx, sku)
			d.mu.Lock()
			delete(d.running, sku)
			if wait > 0 {
				d.notBefore[sku], d.pending[sku] = time.Now().Add(wait), true
			}
			d.mu.Unlock()
			<-d.slots
		})
	}
}

// work delivers sku's events to the target while it holds the SKU's
// cursor. It returns how long to wait before trying the SKU again (0: it
// is done, until new events come).
func (d *dispatcher) work(ctx context.Context, sku string) time.Duration {
	r, name := d.r, d.t.Sink.Name()
	c, ok, err := r.store.Claim(ctx, name, sku, r.cfg.Owner, d.lease())
	switch {
	case err != nil:
		return time.Second
	case !ok: // another relay's: look again once its lease may have lapsed
		return c.LeaseLeft + 10*time.Millisecond
	case time.Now().Before(c.RetryAt):
		_ = r.store.Release(ctx, name, sku, r.cfg.Owner)
		return time.Until(c.RetryAt)
	}
	for ctx.Err() == nil {
		evs, err := r.store.After(ctx, sku, c.Seq, r.cfg.Batch)
		if err != nil {
			_ = r.store.Release(ctx, name, sku, r.cfg.Owner)
			return time.Second
		}
		if len(evs) == 0 {
			_ = r.store.Release(ctx, name, sku, r.cfg.Owner)
			return 0
		}
		wait, held := d.deliver(ctx, sku, &c, evs)
		if !held || wait > 0 {
			return max(wait, time.Millisecond)
		}
	}
	return 0
}

// deliver sends evs in order and moves the cursor past what went
// (renewing the lease at least every third of it). On a failed attempt it
// records the retry (or gives the event up past MaxAge) and says how long
// to wait. held is false once the lease was lost to another relay.
func (d *dispatcher) deliver(ctx context.Context, sku string, c *Cursor, evs []events.Event) (wait time.Duration, held bool) {
	r, name := d.r, d.t.Sink.Name()
	sent, renewed := c.Seq, time.Now()
	advance := func() bool {
		if sent == c.Seq {
			return true
		}
		ok, err := r.store.Advance(ctx, name, sku, r.cfg.Owner, sent, d.lease())
		if err != nil || !ok {
			return false
		}
		*c = Cursor{Seq: sent}
		renewed = time.Now()
		return true
	}
	for _, e := range evs {
		err := r.send(ctx, d.t, e)
		if err == nil {
			sent = e.Seq
			if time.Since(renewed) > d.lease()/3 && !advance() {
				return 0, false
			}
			continue
		}
		if !advance() {
			return 0, false
		}
		return d.failed(ctx, sku, c, e, err)
	}
	return 0, advance()
}

// failed records a failed attempt at e: a retry after the backoff, or,
// past the target's MaxAge, e given up on (and the SKU goes on at once).
func (d *dispatcher) failed(ctx context.Context, sku string, c *Cursor, e events.Event, sendErr error) (time.Duration, bool) {
	r, name := d.r, d.t.Sink.Name()
	c.Attempts++
	c.LastError = sendErr.Error()
	if c.FirstFailed.IsZero() {
		c.FirstFailed = time.Now()
	}
	if d.t.MaxAge > 0 && time.Since(c.FirstFailed) >= d.t.MaxAge {
		r.obs.AttemptFailed(name, true)
		r.log.Warn("outbox: event given up on", "sink", name, "event", e.ID, "sku", sku, "attempts", c.Attempts, "err", sendErr)
		ok, err := r.store.GiveUp(ctx, name, sku, r.cfg.Owner, e, *c, d.lease())
		if err != nil || !ok {
			return time.Second, false
		}
		*c = Cursor{Seq: e.Seq}
		return 0, true
	}
	wait := backoff(c.Attempts, d.t.MaxBackoff)
	c.RetryAt = time.Now().Add(wait)
	if _, err := r.store.Retry(ctx, name, sku, r.cfg.Owner, *c); err != nil {
		return time.Second, false
	}
	return wait, false
}

// idOf is an event's id as the outbox numbers it (0 if it is not one).
func idOf(e events.Event) int64 {
	id, _ := strconv.ParseInt(e.ID, 10, 64)
	return id
}

// lease is how long this target's SKU cursors are held without renewal:
// the relay's Lease, or longer than one attempt when an attempt may take
// longer (a slow send must not outlive the lease it was started under, or
// another relay could send the SKU's next events beside it).
func (d *dispatcher) lease() time.Duration {
	return max(d.r.cfg.Lease, d.t.Timeout+time.Second)
}
