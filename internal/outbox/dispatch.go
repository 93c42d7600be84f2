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

// run dispatches until ctx ends and every worker has stopped: the SKUs
// the relay's discovery adds, and every few seconds the target's whole
// backlog (a SKU another relay let go, a retry come due).
func (d *dispatcher) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	tick := time.NewTicker(d.r.cfg.Tick)
	defer tick.Stop()
	var lastScan time.Time
	name := d.t.Sink.Name()
	for {
		if time.Since(lastScan) > d.r.cfg.Rescan {
			lastScan = time.Now()
			if b, err := d.r.store.Backlog(ctx, name); err == nil {
				d.r.obs.Backlog(name, b)
			}
			if skus, err := d.r.store.Behind(ctx, name, 10000); err == nil {
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
// cursor, and keeps the cursor while new events come, letting it go after
// a third of its lease without any. It returns how long to wait before
// trying the SKU again (0: it is done, until new events come).
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
	h := &hold{d: d, sku: sku, c: c, sent: c.Seq, marked: time.Now()}
	var idle time.Time
	var ahead <-chan page // the page after the one being sent, read meanwhile
	defer func() {
		if ahead != nil { // a page read for nothing: let its read end first
			<-ahead
		}
	}()
	for ctx.Err() == nil {
		var evs []events.Event
		var err error
		if ahead != nil {
			p := <-ahead
			evs, err, ahead = p.evs, p.err, nil
		} else {
			evs, err = r.store.After(ctx, sku, h.sent, r.cfg.Batch)
		}
		if err != nil && ctx.Err() != nil {
			break
		}
		if err != nil {
			return h.release(ctx, time.Second)
		}
		if len(evs) == 0 {
			if idle.IsZero() {
				idle = time.Now()
			}
			if time.Since(idle) > d.lease()/3 || !h.mark(ctx, false) {
				return h.release(ctx, 0)
			}
			select {
			case <-ctx.Done():
			case <-time.After(r.cfg.Tick):
			}
			continue
		}
		idle = time.Time{}
		if len(evs) == r.cfg.Batch { // a backlog: read on while these go
			ahead = h.readAfter(ctx, evs[len(evs)-1].Seq)
		}
		if wait, held := h.deliver(ctx, evs); !held || wait > 0 {
			return max(wait, time.Millisecond)
		}
	}
	// Stopping: mark and let go, past ctx's end but briefly, so that the
	// next relay need not wait for the lease to lapse.
	stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	return h.release(stop, 0)
}

// hold is a worker's hold of one SKU's cursor: c as stored (c.Seq the last
// event marked), sent the last event sent, marked when the cursor (and its
// lease) was last written.
type hold struct {
	d      *dispatcher
	sku    string
	c      Cursor
	sent   int64
	marked time.Time
}

// page is a read of a SKU's events.
type page struct {
	evs []events.Event
	err error
}

// readAfter reads, in the background, the SKU's page of events after seq:
// the next one while a full page is sent, so that a SKU with a backlog
// does not wait for MySQL between pages. The page is used only when every
// event before it was sent; otherwise it is dropped unread.
func (h *hold) readAfter(ctx context.Context, seq int64) <-chan page {
	out := make(chan page, 1)
	r := h.d.r
	go func() {
		evs, err := r.store.After(ctx, h.sku, seq, r.cfg.Batch)
		out <- page{evs, err}
	}()
	return out
}

// markEvery is how often a hold writes its cursor while it sends: what a
// relay killed between sending and marking sends again is at most this
// much.
const markEvery = 200 * time.Millisecond

// mark writes the cursor at sent (renewing the lease) when it is behind
// and markEvery has passed, or when the lease needs renewing, or always
// with force. It reports whether the lease is still held.
func (h *hold) mark(ctx context.Context, force bool) bool {
	since := time.Since(h.marked)
	if !force && (h.sent == h.c.Seq || since < markEvery) && since < h.d.lease()/3 {
		return true
	}
	r := h.d.r
	ok, err := r.store.Advance(ctx, h.d.t.Sink.Name(), h.sku, r.cfg.Owner, h.sent, h.d.lease())
	if err != nil || !ok {
		return false
	}
	h.c, h.marked = Cursor{Seq: h.sent}, time.Now()
	return true
}

// release marks what was sent, lets the cursor go and returns wait.
func (h *hold) release(ctx context.Context, wait time.Duration) time.Duration {
	if h.sent != h.c.Seq && !h.mark(ctx, true) {
		return max(wait, time.Millisecond) // lost: the lease's new owner goes on
	}
	_ = h.d.r.store.Release(ctx, h.d.t.Sink.Name(), h.sku, h.d.r.cfg.Owner)
	return wait
}

// deliver sends evs in order, marking as it goes (mark): a BatchSink's
// events together, another sink's one at a time. On a failed attempt it
// marks what went, records the retry (or gives the event up past MaxAge)
// and says how long to wait. held is false once the lease was lost to
// another relay.
func (h *hold) deliver(ctx context.Context, evs []events.Event) (wait time.Duration, held bool) {
	for len(evs) > 0 {
		n, err := h.d.r.sendSome(ctx, h.d.t, evs)
		if n > 0 {
			h.sent = evs[n-1].Seq
			if !h.mark(ctx, false) {
				return 0, false
			}
		}
		if err == nil {
			evs = evs[n:]
			continue
		}
		if !h.mark(ctx, h.sent != h.c.Seq) {
			return 0, false
		}
		return h.d.failed(ctx, h.sku, &h.c, evs[n], err, &h.sent)
	}
	return 0, true
}

// failed records a failed attempt at e: a retry after the backoff, or,
// past the target's MaxAge, e given up on (and the SKU goes on at once).
func (d *dispatcher) failed(ctx context.Context, sku string, c *Cursor, e events.Event, sendErr error, sent *int64) (time.Duration, bool) {
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
		*c, *sent = Cursor{Seq: e.Seq}, e.Seq
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
