package service

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Sold out, told across instances. A batch that MySQL answered sold out
// publishes it (StockEvents.SoldOut); every other instance marks the SKU
// on its sold-out fast path and ends its batches' waits for the SKU's
// lock, which are then answered from reads of their keys (drainSoldOut)
// instead of each instance taking a turn of the lock to learn the same
// thing. At a sale's opening, with every instance's batch of a SKU in the
// lock's line, this is most of the line. The notice only saves work: a
// mark never answers what MySQL would not (soldOut), and a lost notice
// costs a turn of the lock.

// errSoldOutElsewhere ends a batch's wait for the lock.
var errSoldOutElsewhere = errors.New("service: the SKU was found sold out at another instance")

// soldOutPublishTimeout bounds the publish of a sold-out notice.
const soldOutPublishTimeout = time.Second

// lockWaits are this instance's batches waiting for their SKU's lock, so
// a sold-out notice can end their waits.
type lockWaits struct {
	mu sync.Mutex
	m  map[string]map[*lockWait]struct{}
}

// lockWait is one batch's wait.
type lockWait struct{ cancel context.CancelCauseFunc }

// start returns a context of ctx that end(sku) cancels until stop is
// called. stop(taken) must be called once the wait is over; taken says
// the lock was taken, whose hold lives in the context, so it is not
// cancelled then.
func (w *lockWaits) start(ctx context.Context, sku string) (_ context.Context, stop func(taken bool)) {
	ctx, cancel := context.WithCancelCause(ctx)
	lw := &lockWait{cancel: cancel}
	w.mu.Lock()
	if w.m == nil {
		w.m = make(map[string]map[*lockWait]struct{})
	}
	if w.m[sku] == nil {
		w.m[sku] = make(map[*lockWait]struct{})
	}
	w.m[sku][lw] = struct{}{}
	w.mu.Unlock()
	return ctx, func(taken bool) {
		w.mu.Lock()
		delete(w.m[sku], lw)
		if len(w.m[sku]) == 0 {
			delete(w.m, sku)
		}
		w.mu.Unlock()
		if !taken {
			cancel(nil)
		}
	}
}

// end cancels every wait of sku under way.
func (w *lockWaits) end(sku string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for lw := range w.m[sku] {
		lw.cancel(errSoldOutElsewhere)
	}
}

// SoldOut takes another instance's word that MySQL found sku sold out
// while its restock sequence was seq: the SKU goes on this instance's
// sold-out fast path and its batches stop waiting for its lock. A notice
// older than a restock this instance knows of is ignored. The wiring calls
// it for every sold-out SKU another instance publishes.
func (s *Service) SoldOut(sku string, seq int64) {
	if s.soldOut == nil || seq < s.seqs.known(sku) {
		return
	}
	s.seqs.learn(sku, seq)
	s.soldOut.mark(sku) // before end: a batch whose wait ended finds the mark
	s.waits.end(sku)
}

// tellSoldOut publishes that MySQL found sku sold out with its restock
// sequence at most seq (nothing without Events, or while Redis is
// skipped). A failed publish is only logged: the other instances learn it
// from their own next batch.
func (s *Service) tellSoldOut(ctx context.Context, sku string, seq int64) {
	if s.cfg.Events == nil || s.redis.skip() {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), soldOutPublishTimeout)
	defer cancel()
	if err := s.cfg.Events.SoldOut(ctx, sku, seq); err != nil {
		s.log.DebugContext(ctx, "telling the other instances a SKU sold out failed", "sku", sku, "err", err)
	}
}
