package service

import (
	"context"
	"errors"
	"fmt"
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

// placeCounted is the `counter` strategy, deliberately the simple version
// most systems run: the counter is the stock. A counter that says no is
// the answer; one that says yes is followed by a plain write, and a unit
// the write then fails to sell is never given back (but for one refused
// outside the sale's schedule). A missing counter is
// seeded from a read of MySQL and taken from; with Redis down the write
// goes on alone.
func (s *Service) placeCounted(ctx context.Context, d Deduction) (Order, error) {
	d.Write = WritePlain
	got, err := s.cfg.Counter.Take(ctx, d.SKU, d.Buyer, d.Quantity)
	if err == nil && got.Answer == TakeMissing {
		if err = s.counter.seed(ctx, d.SKU); err == nil {
			got, err = s.cfg.Counter.Take(ctx, d.SKU, d.Buyer, d.Quantity)
		}
	}
	s.metrics.CounterTake(takeNames[got.Answer], err)
	switch {
	case errors.Is(err, ErrUnknownSKU):
		return Order{}, err
	case err != nil || got.Answer == TakeMissing:
		return s.writes.now(ctx, d)
	case got.Answer == TakeSoldOut:
		return Order{}, ErrSoldOut
	case got.Answer == TakeOverLimit:
		return Order{}, &LimitError{Limit: got.Limit, Held: got.Held, Requested: int64(d.Quantity)}
	}
	o, err := s.writes.now(ctx, d)
	if saleClosed(err) { // the one refusal this strategy gives back: a flood before the start would drain the counter
		s.settleTake(ctx, d, err)
	}
	return o, err
}

// saleClosed reports whether err refuses an order outside its SKU's sale.
func saleClosed(err error) bool {
	return errors.Is(err, ErrSaleNotStarted) || errors.Is(err, ErrSaleEnded)
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
	if s.redis.skip() { // Redis failed within redisBackoff: MySQL alone, as lock+version does
		s.counter.track(d.SKU)
		return s.placeWithoutRedis(ctx, d, nil)
	}
	got, err := s.cfg.Counter.Take(ctx, d.SKU, d.Buyer, d.Quantity)
	if err == nil && got.Answer == TakeMissing { // seeded from MySQL's row (or by another instance), then taken from
		if serr := s.counter.seed(ctx, d.SKU); serr == nil {
			got, err = s.cfg.Counter.Take(ctx, d.SKU, d.Buyer, d.Quantity)
		} else if !errors.Is(serr, ErrUnknownSKU) {
			s.log.WarnContext(ctx, "stock counter not seeded", "sku", d.SKU, "err", serr)
		}
	}
	s.metrics.CounterTake(takeNames[got.Answer], err)
	switch {
	case err != nil && ctx.Err() != nil: // the client left: not Redis's fault
		s.counter.track(d.SKU)
		return Order{}, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	case err != nil: // the take may or may not have happened: the reconcile settles it
		s.counter.track(d.SKU)
		return s.placeWithoutRedis(ctx, d, err)
	}
	s.redis.up(ctx)
	switch got.Answer {
	case TakeMissing: // still missing (or an unknown SKU): MySQL alone
		return s.writes.retrying(ctx, d)
	case TakeSoldOut:
		return s.soldOutByMySQL(ctx, d)
	case TakeOverLimit: // MySQL holds the exact allowance
		return s.writes.retrying(ctx, d)
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
	s.counter.track(d.SKU)
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
	case errors.Is(err, ErrSoldOut), refusedForBuyer(err), errors.As(err, &restocked), errors.Is(err, ErrDuplicateKey), saleClosed(err),
		errors.Is(err, ErrUnknownSKU), errors.Is(err, ErrBusy), errors.Is(err, ErrConflict), errors.Is(err, errNotQueued):
		gctx, cancel := writeCtx(ctx, s.cfg.WriteTimeout)
		defer cancel()
		given, gerr := s.cfg.Counter.Give(gctx, d.SKU, d.Buyer, int64(d.Quantity))
		if gerr != nil {
			s.counter.track(d.SKU)
			s.log.WarnContext(ctx, "stock counter: units not given back; the reconcile repairs it", "sku", d.SKU, "err", gerr)
			return
		}
		if given {
			s.metrics.CounterGivenBack(int64(d.Quantity))
		}
	default:
		s.counter.track(d.SKU)
	}
}

// takeNames label the counter's answers in metrics.
var takeNames = [...]string{TakeMissing: "missing", Taken: "taken", TakeSoldOut: "sold_out", TakeOverLimit: "over_limit"}

// counterTracking is what the counter strategies need of the counter's
// reconcile (*Reconciler): a missing counter seeded from MySQL's row, and a
// SKU whose counter may have drifted checked by the next rounds.
type counterTracking interface {
	seed(ctx context.Context, sku string) error
	track(sku string)
}
