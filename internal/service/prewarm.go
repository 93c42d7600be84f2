package service

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Pre-warm: from Config.Prewarm before a SKU's sale starts, each instance
// loads what the first orders need, so the opening second pays no cold
// start. The instance's own clock only times this; whether an order is
// early is the store's to say.

// SalesStarting lists the stock rows whose sale starts within the next
// within by the store's clock (StoreSchedules, implemented by both stores).
type SalesStarting interface {
	SalesStarting(ctx context.Context, within time.Duration) ([]Stock, error)
}

// Warmer warms one part (a pool, a cache) for a SKU about to open; an
// error is logged and the others go on.
type Warmer func(ctx context.Context, st Stock) error

// Prewarmer watches for sales about to start and runs its warmers once per
// SKU and start, and its pool warmers once per look that found any.
type Prewarmer struct {
	Lead    time.Duration // how long before the start; 0: never
	Store   SalesStarting
	Warmers []Warmer
	// Pools warm what every SKU shares (connection pools): once per look,
	// however many SKUs it found.
	Pools []func(ctx context.Context) error
	Log   *slog.Logger

	mu     sync.Mutex
	warmed map[string]Instant // the start each SKU was warmed for
}

// Run looks every Lead/4 (at most every second) until ctx ends.
func (p *Prewarmer) Run(ctx context.Context) {
	if p.Lead <= 0 {
		return
	}
	tick := time.NewTicker(min(time.Second, max(p.Lead/4, 10*time.Millisecond)))
	defer tick.Stop()
	for {
		p.Once(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Once warms each SKU starting within Lead not warmed yet for its start,
// and returns how many it warmed.
func (p *Prewarmer) Once(ctx context.Context) int {
	starting, err := p.Store.SalesStarting(ctx, p.Lead)
	if err != nil {
		p.Log.WarnContext(ctx, "prewarm: sales starting not read", "err", err)
		return 0
	}
	n := 0
	for _, st := range starting {
		if !p.first(st) {
			continue
		}
		began := time.Now()
		for _, w := range p.Warmers {
			if err := w(ctx, st); err != nil {
				p.Log.WarnContext(ctx, "prewarm: a part not warmed", "sku", st.SKU, "err", err)
			}
		}
		n++
		p.Log.InfoContext(ctx, "prewarm: ready for the start", "sku", st.SKU, "starts_at", st.SaleStartsAt, "took", time.Since(began))
	}
	if n > 0 {
		for _, warm := range p.Pools {
			if err := warm(ctx); err != nil {
				p.Log.WarnContext(ctx, "prewarm: a pool not warmed", "err", err)
			}
		}
	}
	return n
}

// first records st's start as warmed and reports whether it was not yet.
func (p *Prewarmer) first(st Stock) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.warmed == nil {
		p.warmed = map[string]Instant{}
	}
	if p.warmed[st.SKU] == st.SaleStartsAt {
		return false
	}
	p.warmed[st.SKU] = st.SaleStartsAt
	return true
}

// Warm is the service's warmer: the SKU's restock sequence learnt (its
// first orders are not refused as admitted before a restock), its sold-out
// entry dropped, its Redis counter seeded (counter strategies), and its
// lock taken and released once (the lock's scripts loaded in Redis, its
// connection in use).
func (s *Service) Warm(ctx context.Context, st Stock) error {
	s.seqs.learn(st.SKU, st.RestockSeq)
	if s.soldOut != nil {
		s.soldOut.drop(st.SKU)
	}
	if s.info.Counted {
		if err := s.counter.seed(ctx, st.SKU); err != nil {
			return err
		}
	}
	if !s.info.UsesLock || s.locks.locker == nil {
		return nil
	}
	h, err := s.locks.take(ctx, st.SKU)
	if err != nil {
		return err
	}
	s.locks.release(ctx, h)
	return nil
}
