package service

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/seckill/stock/internal/metrics"
)

// The reconcile of the Redis stock counter (counter.go): the counter is
// seeded from MySQL's row, given back what returns and restocks move, and
// repaired from the row when the two disagree on a quiet SKU.

// DefaultCounterReconcile is Run's default interval.
const DefaultCounterReconcile = 5 * time.Second

// Reconciler keeps the Redis stock counter of the counter strategies in
// step with MySQL: it seeds a missing counter, gives back the units of
// returns and restocks, and repairs drift on the SKUs it tracks. With no
// counter (the other strategies) it does nothing. Safe for concurrent use.
type Reconciler struct {
	counter StockCounter // Config.Counter; nil: no counter
	safe    bool         // counter+conditional: drift is repaired (`counter` trusts its counter)
	store   Store
	seqs    *restockSeqs // the placement's, learnt from the rows read here
	timeout time.Duration
	log     *slog.Logger
	metrics *metrics.Metrics

	skus counterStates // the SKUs counted here
}

// seed creates sku's counter from MySQL's row, unless another
// instance did first. Errors: ErrUnknownSKU, or the store's or Redis's.
func (r *Reconciler) seed(ctx context.Context, sku string) error {
	rctx, cancel := writeCtx(ctx, r.timeout)
	defer cancel()
	st, err := r.store.Stock(rctx, sku)
	if err != nil {
		return err
	}
	r.seqs.learn(sku, st.RestockSeq)
	return r.seedFrom(rctx, st)
}

// seedFrom creates st's SKU's counter from st, unless it exists, and
// tracks the SKU for the reconcile.
func (r *Reconciler) seedFrom(ctx context.Context, st Stock) error {
	seeded, err := r.counter.Seed(ctx, st.SKU, st.Available, st.PerBuyerLimit)
	if err != nil {
		return err
	}
	r.track(st.SKU)
	if seeded {
		r.metrics.CounterSeeded()
	}
	return nil
}

// restocked seeds the counter again after the admin set sku's stock
// to st: the old one is dropped, then seeded from st (or, if an order got
// there first, from MySQL's row).
func (r *Reconciler) restocked(ctx context.Context, st Stock) {
	if r.counter == nil {
		return
	}
	if err := r.counter.Drop(ctx, st.SKU); err != nil {
		r.track(st.SKU)
		r.log.WarnContext(ctx, "stock counter not dropped after a restock; the reconcile repairs it", "sku", st.SKU, "err", err)
		return
	}
	if err := r.seedFrom(ctx, st); err != nil {
		r.track(st.SKU)
		r.log.WarnContext(ctx, "stock counter not seeded after a restock; the next order seeds it", "sku", st.SKU, "err", err)
	}
}

// returned gives a lifecycle return's units back to the counter (a
// missing counter is seeded by the next order, from MySQL's row).
func (r *Reconciler) returned(ctx context.Context, ret Return) {
	if r.counter == nil {
		return
	}
	if _, err := r.counter.Give(context.WithoutCancel(ctx), ret.SKU, "", ret.Units); err != nil {
		r.track(ret.SKU)
		r.log.WarnContext(ctx, "stock counter: returned units not given back; the reconcile repairs it", "sku", ret.SKU, "err", err)
	}
}

// counterStates is what the reconcile knows of each SKU this instance
// counted (took from, seeded, or met an unknown outcome on): the last
// reading, so a disagreement is repaired when the next round reads the
// same one (a quiet SKU).
type counterStates struct {
	mu   sync.Mutex
	skus map[string]counterReading
}

// counterReading is one round's available counts of a SKU.
type counterReading struct{ mysql, counter int64 }

// track adds sku to the SKUs the reconcile checks (nothing without a
// counter).
func (r *Reconciler) track(sku string) {
	if r.counter != nil {
		r.skus.add(sku)
	}
}

// add adds sku, with no reading yet, unless it is there.
func (c *counterStates) add(sku string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.skus == nil {
		c.skus = make(map[string]counterReading)
	}
	if _, ok := c.skus[sku]; !ok {
		c.skus[sku] = counterReading{}
	}
}

// list returns the SKUs tracked.
func (c *counterStates) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.skus))
	for sku := range c.skus {
		out = append(out, sku)
	}
	return out
}

// observe records one round's reading of a tracked sku and reports whether
// the previous round read the same disagreement (time to repair it).
func (c *counterStates) observe(sku string, got counterReading) (repair bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	last, ok := c.skus[sku]
	if !ok {
		return false
	}
	repair = got.mysql != got.counter && got == last
	if repair {
		got = counterReading{} // repaired: the next disagreement starts afresh
	}
	c.skus[sku] = got
	return repair
}

// Run runs Reconcile every interval (default DefaultCounterReconcile)
// until ctx ends: under counter+conditional only
// (`counter` trusts its counter, as the simple versions do).
func (r *Reconciler) Run(ctx context.Context, interval time.Duration) {
	if r.counter == nil || !r.safe {
		return
	}
	if interval <= 0 {
		interval = DefaultCounterReconcile
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.Reconcile(ctx)
		}
	}
}

// Reconcile compares the counter of every SKU this instance counted
// with MySQL's row: a missing counter is seeded; one that disagrees with
// the row by the same amount two rounds running (the SKU was quiet: no
// order moved either) is set to the row's count, if it has not moved since
// it was read. Drift is repaired in both directions; a SKU under load is
// left to a quiet round. It returns the SKUs it repaired or seeded.
func (r *Reconciler) Reconcile(ctx context.Context) int {
	n := 0
	for _, sku := range r.skus.list() {
		if ctx.Err() != nil {
			return n
		}
		fixed, err := r.reconcileOne(ctx, sku)
		if err != nil {
			r.log.WarnContext(ctx, "stock counter not reconciled", "sku", sku, "err", err)
		}
		if fixed {
			n++
		}
	}
	return n
}

// reconcileOne is one round of Reconcile for sku.
func (r *Reconciler) reconcileOne(ctx context.Context, sku string) (bool, error) {
	rctx, cancel := writeCtx(ctx, r.timeout)
	defer cancel()
	before, ok, err := r.counter.Available(rctx, sku)
	if err != nil {
		return false, err
	}
	if !ok { // Redis forgot it (a restart, a FLUSHALL, a failover)
		err := r.seed(rctx, sku)
		return err == nil, err
	}
	st, err := r.store.Stock(rctx, sku)
	if err != nil {
		return false, err
	}
	after, ok, err := r.counter.Available(rctx, sku)
	if err != nil || !ok || after != before { // an order moved it meanwhile: next round
		return false, err
	}
	if !r.skus.observe(sku, counterReading{mysql: st.Available, counter: after}) {
		return false, nil
	}
	repaired, err := r.counter.Repair(rctx, sku, after, st.Available)
	if repaired {
		r.metrics.CounterRepaired(st.Available - after)
		r.log.InfoContext(ctx, "stock counter repaired from MySQL's row", "sku", sku, "counter", after, "mysql", st.Available)
	}
	return repaired, err
}
