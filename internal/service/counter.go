package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// The counter strategies: a SKU's stock kept as a Redis counter in front of
// MySQL (internal/stockcounter), as most flash-sale systems do. `counter`
// trusts it, as they do; `counter+conditional` lets it turn the losers
// away and MySQL's conditional UPDATE decide every winner.

// Take is a counter's answer to an order.
type Take int

// TakeResult is a counter's answer, with the buyer's count and the limit
// when it is TakeOverLimit.
type TakeResult struct {
	Answer      Take
	Limit, Held int64
}

// The answers of StockCounter.Take.
const (
	TakeMissing   Take = iota // no counter for the SKU (never seeded, or Redis forgot it)
	Taken                     // the units (and the buyer's count) were taken
	TakeSoldOut               // fewer units left than asked
	TakeOverLimit             // the buyer would pass the counter's per-buyer limit
)

// StockCounter is a SKU's stock as a Redis counter (internal/stockcounter).
// Every method is one atomic step in Redis; an error means its outcome is
// unknown (a lost reply), or that Redis could not be asked.
type StockCounter interface {
	// Take takes q units of sku, and q of buyer's count within the limit.
	Take(ctx context.Context, sku, buyer string, q int) (TakeResult, error)
	// Give gives q units back, and buyer's q unless buyer is ""; false
	// when the counter is missing (it stays missing).
	Give(ctx context.Context, sku, buyer string, q int64) (bool, error)
	// Seed creates the counter with available units and the limit; false
	// when it exists already (it is left as it is).
	Seed(ctx context.Context, sku string, available, limit int64) (bool, error)
	// Repair sets the available count to to if it is still expect; false
	// when it moved or is missing.
	Repair(ctx context.Context, sku string, expect, to int64) (bool, error)
	// Available is the counter's available count; ok false when missing.
	Available(ctx context.Context, sku string) (n int64, ok bool, err error)
	// Drop deletes the counter.
	Drop(ctx context.Context, sku string) error
}

// DefaultCounterReconcile is Config.CounterReconcile's default.
const DefaultCounterReconcile = 5 * time.Second

// placeCounted is the `counter` strategy, deliberately the simple version
// most systems run: the counter is the stock. A counter that says no is
// the answer; one that says yes is followed by a plain write, and a unit
// the write then fails to sell is never given back. A missing counter is
// seeded from a read of MySQL and taken from; with Redis down the write
// goes on alone.
func (s *Service) placeCounted(ctx context.Context, d Deduction) (Order, error) {
	d.Write = WritePlain
	got, err := s.cfg.Counter.Take(ctx, d.SKU, d.Buyer, d.Quantity)
	if err == nil && got.Answer == TakeMissing {
		if err = s.seedCounter(ctx, d.SKU); err == nil {
			got, err = s.cfg.Counter.Take(ctx, d.SKU, d.Buyer, d.Quantity)
		}
	}
	s.metrics.CounterTake(takeNames[got.Answer], err)
	switch {
	case errors.Is(err, ErrUnknownSKU):
		return Order{}, err
	case err != nil || got.Answer == TakeMissing:
		return s.deductNow(ctx, d)
	case got.Answer == TakeSoldOut:
		return Order{}, ErrSoldOut
	case got.Answer == TakeOverLimit:
		return Order{}, &LimitError{Limit: got.Limit, Held: got.Held, Requested: int64(d.Quantity)}
	}
	return s.deductNow(ctx, d)
}

// placeCountedGuarded is `counter+conditional`: the counter turns the
// losers away, and the orders that pass it are combined per SKU into
// batches, each placed by one versioned UPDATE without a lock (combine.go);
// a unit MySQL refused goes back to the counter. While the counter cannot
// be trusted (missing, or Redis down or a lost reply: the DB-only path of
// redisdown.go, or a refusal under STOCK_ON_REDIS_DOWN=reject) the order
// goes to MySQL alone, by the conditional UPDATE, and a refusal of the
// counter is checked against MySQL's row before it is the answer: every
// answer is MySQL's.
func (s *Service) placeCountedGuarded(ctx context.Context, d Deduction) (Order, error) {
	d.Write = WriteConditional
	if s.skipLock() { // Redis failed within redisBackoff: MySQL alone, as lock+version does
		s.counters.track(d.SKU)
		return s.placeWithoutRedis(ctx, d, nil)
	}
	got, err := s.cfg.Counter.Take(ctx, d.SKU, d.Buyer, d.Quantity)
	if err == nil && got.Answer == TakeMissing { // seeded from MySQL's row (or by another instance), then taken from
		if serr := s.seedCounter(ctx, d.SKU); serr == nil {
			got, err = s.cfg.Counter.Take(ctx, d.SKU, d.Buyer, d.Quantity)
		} else if !errors.Is(serr, ErrUnknownSKU) {
			s.log.WarnContext(ctx, "stock counter not seeded", "sku", d.SKU, "err", serr)
		}
	}
	s.metrics.CounterTake(takeNames[got.Answer], err)
	switch {
	case err != nil && ctx.Err() != nil: // the client left: not Redis's fault
		s.counters.track(d.SKU)
		return Order{}, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	case err != nil: // the take may or may not have happened: the reconcile settles it
		s.counters.track(d.SKU)
		return s.placeWithoutRedis(ctx, d, err)
	}
	s.redisUp(ctx)
	switch got.Answer {
	case TakeMissing: // still missing (or an unknown SKU): MySQL alone
		return s.placeRetrying(ctx, d)
	case TakeSoldOut:
		return s.soldOutByMySQL(ctx, d)
	case TakeOverLimit: // MySQL holds the exact allowance
		return s.placeRetrying(ctx, d)
	case Taken:
	}
	o, err := s.placeBatched(ctx, d)
	s.settleTake(ctx, d, err)
	return o, err
}

// soldOutByMySQL answers an order the counter refused for want of stock
// from MySQL's row (on the sold-out fast path, a read shared with the
// SKU's other orders): sold out if the row agrees (its key read with it);
// a key with an order is the duplicate answerRefusal replays; and a row
// with the units (orders in flight not yet committed, or a counter that
// drifted low) means the order joins the SKU's next batch, which MySQL
// decides.
func (s *Service) soldOutByMySQL(ctx context.Context, d Deduction) (Order, error) {
	r := PlaceRequest{Buyer: d.Buyer, Key: d.Key, SKU: d.SKU, Quantity: d.Quantity}
	st, prev, err := s.precheck(ctx, r, s.soldOut != nil)
	switch {
	case err != nil:
		return Order{}, err
	}
	s.seqs.learn(d.SKU, st.RestockSeq)
	switch {
	case prev != nil:
		return Order{}, ErrDuplicateKey
	case st.Available < int64(d.Quantity):
		return Order{}, errSoldOutKeyRead
	}
	s.counters.track(d.SKU)
	return s.placeBatched(ctx, d)
}

// settleTake settles a take after MySQL's answer: a refusal gives the
// units back; an error that leaves the commit unknown keeps them taken
// until the reconcile compares the counter with MySQL's row.
func (s *Service) settleTake(ctx context.Context, d Deduction, err error) {
	var restocked *RestockedError
	switch {
	case err == nil:
		return
	case errors.Is(err, ErrSoldOut), errors.Is(err, ErrLimitExceeded), errors.As(err, &restocked), errors.Is(err, ErrDuplicateKey),
		errors.Is(err, ErrUnknownSKU), errors.Is(err, ErrBusy), errors.Is(err, ErrConflict), errors.Is(err, errNotQueued):
		gctx, cancel := s.writeCtx(ctx)
		defer cancel()
		given, gerr := s.cfg.Counter.Give(gctx, d.SKU, d.Buyer, int64(d.Quantity))
		if gerr != nil {
			s.counters.track(d.SKU)
			s.log.WarnContext(ctx, "stock counter: units not given back; the reconcile repairs it", "sku", d.SKU, "err", gerr)
			return
		}
		if given {
			s.metrics.CounterGivenBack(int64(d.Quantity))
		}
	default:
		s.counters.track(d.SKU)
	}
}

// seedCounter creates sku's counter from MySQL's row, unless another
// instance did first. Errors: ErrUnknownSKU, or the store's or Redis's.
func (s *Service) seedCounter(ctx context.Context, sku string) error {
	rctx, cancel := s.writeCtx(ctx)
	defer cancel()
	st, err := s.store.Stock(rctx, sku)
	if err != nil {
		return err
	}
	s.seqs.learn(sku, st.RestockSeq)
	return s.seedFrom(rctx, st)
}

// seedFrom creates st's SKU's counter from st, unless it exists, and
// tracks the SKU for the reconcile.
func (s *Service) seedFrom(ctx context.Context, st Stock) error {
	seeded, err := s.cfg.Counter.Seed(ctx, st.SKU, st.Available, st.PerBuyerLimit)
	if err != nil {
		return err
	}
	s.counters.track(st.SKU)
	if seeded {
		s.metrics.CounterSeeded()
	}
	return nil
}

// counterRestocked seeds the counter again after the admin set sku's stock
// to st: the old one is dropped, then seeded from st (or, if an order got
// there first, from MySQL's row).
func (s *Service) counterRestocked(ctx context.Context, st Stock) {
	if s.cfg.Counter == nil {
		return
	}
	if err := s.cfg.Counter.Drop(ctx, st.SKU); err != nil {
		s.counters.track(st.SKU)
		s.log.WarnContext(ctx, "stock counter not dropped after a restock; the reconcile repairs it", "sku", st.SKU, "err", err)
		return
	}
	if err := s.seedFrom(ctx, st); err != nil {
		s.counters.track(st.SKU)
		s.log.WarnContext(ctx, "stock counter not seeded after a restock; the next order seeds it", "sku", st.SKU, "err", err)
	}
}

// counterReturned gives a lifecycle return's units back to the counter (a
// missing counter is seeded by the next order, from MySQL's row).
func (s *Service) counterReturned(ctx context.Context, r Return) {
	if s.cfg.Counter == nil {
		return
	}
	if _, err := s.cfg.Counter.Give(context.WithoutCancel(ctx), r.SKU, "", r.Units); err != nil {
		s.counters.track(r.SKU)
		s.log.WarnContext(ctx, "stock counter: returned units not given back; the reconcile repairs it", "sku", r.SKU, "err", err)
	}
}

// takeNames label the counter's answers in metrics.
var takeNames = [...]string{TakeMissing: "missing", Taken: "taken", TakeSoldOut: "sold_out", TakeOverLimit: "over_limit"}

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

// track adds sku to the SKUs the reconcile checks.
func (c *counterStates) track(sku string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.skus == nil {
		c.skus = make(map[string]counterReading)
	}
	if _, ok := c.skus[sku]; !ok {
		c.skus[sku] = counterReading{}
	}
}

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
func (c *counterStates) observe(sku string, r counterReading) (repair bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	last, ok := c.skus[sku]
	if !ok {
		return false
	}
	repair = r.mysql != r.counter && r == last
	if repair {
		r = counterReading{} // repaired: the next disagreement starts afresh
	}
	c.skus[sku] = r
	return repair
}

// RunCounterReconcile runs ReconcileCounters every interval (default
// DefaultCounterReconcile) until ctx ends: under counter+conditional only
// (`counter` trusts its counter, as the simple versions do).
func (s *Service) RunCounterReconcile(ctx context.Context, interval time.Duration) {
	if s.cfg.Counter == nil || !s.info.Safe {
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
			s.ReconcileCounters(ctx)
		}
	}
}

// ReconcileCounters compares the counter of every SKU this instance counted
// with MySQL's row: a missing counter is seeded; one that disagrees with
// the row by the same amount two rounds running (the SKU was quiet: no
// order moved either) is set to the row's count, if it has not moved since
// it was read. Drift is repaired in both directions; a SKU under load is
// left to a quiet round. It returns the SKUs it repaired or seeded.
func (s *Service) ReconcileCounters(ctx context.Context) int {
	n := 0
	for _, sku := range s.counters.list() {
		if ctx.Err() != nil {
			return n
		}
		fixed, err := s.reconcileCounter(ctx, sku)
		if err != nil {
			s.log.WarnContext(ctx, "stock counter not reconciled", "sku", sku, "err", err)
		}
		if fixed {
			n++
		}
	}
	return n
}

// reconcileCounter is one round of ReconcileCounters for sku.
func (s *Service) reconcileCounter(ctx context.Context, sku string) (bool, error) {
	rctx, cancel := s.writeCtx(ctx)
	defer cancel()
	before, ok, err := s.cfg.Counter.Available(rctx, sku)
	if err != nil {
		return false, err
	}
	if !ok { // Redis forgot it (a restart, a FLUSHALL, a failover)
		err := s.seedCounter(rctx, sku)
		return err == nil, err
	}
	st, err := s.store.Stock(rctx, sku)
	if err != nil {
		return false, err
	}
	after, ok, err := s.cfg.Counter.Available(rctx, sku)
	if err != nil || !ok || after != before { // an order moved it meanwhile: next round
		return false, err
	}
	if !s.counters.observe(sku, counterReading{mysql: st.Available, counter: after}) {
		return false, nil
	}
	repaired, err := s.cfg.Counter.Repair(rctx, sku, after, st.Available)
	if repaired {
		s.metrics.CounterRepaired(st.Available - after)
		s.log.InfoContext(ctx, "stock counter repaired from MySQL's row", "sku", sku, "counter", after, "mysql", st.Available)
	}
	return repaired, err
}
