package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Request combining for lock+version. Orders of one SKU that arrive at an
// instance while the SKU is being served wait in its line (line.go); the next
// leader takes up to BatchMax of them, takes the Redis lock once and places
// them all in one transaction with one versioned UPDATE. The lock hand-off,
// the read, the UPDATE and the COMMIT are then paid once per batch rather
// than once per order, which is what bounds a hot SKU's throughput under a
// lock. Each order still gets its own answer: placed, sold out (the batch is
// filled in arrival order), or a replay of its key.

// errLineFull is the answer past the per-SKU line cap.
func errLineFull(max int) error {
	return fmt.Errorf("%w: more than %d orders of this SKU are waiting at this instance", ErrBusy, max)
}

// placeCombined places d through the SKU's line of orders and returns its own
// outcome. A request whose client gives up while it is still in line (not
// yet in a batch) leaves the line.
func (s *Service) placeCombined(ctx context.Context, d Deduction) (Order, error) {
	c := &call{ctx: ctx, d: d, done: make(chan struct{})}
	ok, lead := s.lines.join(d.SKU, c, s.cfg.QueueMax)
	if !ok {
		return Order{}, errLineFull(s.cfg.QueueMax)
	}
	if lead {
		s.serveLine(d.SKU)
	}
	select {
	case <-c.done:
		return c.o, c.err
	case <-ctx.Done():
	}
	if s.lines.leave(d.SKU, c) { // not taken into a batch yet: nothing was written
		return Order{}, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	}
	<-c.done // in a batch already: its outcome is the answer
	return c.o, c.err
}

// serveLine serves one batch of the SKU's line, then hands the line to a new
// leader goroutine (so no request waits for batches after its own). The
// leader that finds the line empty ends the SKU's turn.
func (s *Service) serveLine(sku string) {
	batch := s.lines.take(sku, s.cfg.BatchMax)
	if batch == nil {
		return
	}
	s.runBatch(sku, batch)
	go s.serveLine(sku)
}

// placeAlone places d as a batch of its own (request combining off).
func (s *Service) placeAlone(ctx context.Context, d Deduction) (Order, error) {
	if !s.lines.enter(d.SKU, s.cfg.QueueMax) {
		return Order{}, errLineFull(s.cfg.QueueMax)
	}
	c := &call{ctx: ctx, d: d, done: make(chan struct{})}
	s.runBatch(d.SKU, []*call{c})
	s.lines.exit(d.SKU)
	return c.o, c.err
}

// runBatch places a batch under the SKU lock in one transaction: lock
// first, then read, insert, versioned UPDATE, COMMIT.
func (s *Service) runBatch(sku string, batch []*call) {
	s.metrics.Batch(len(batch))
	each := func(f func(c *call) (Order, error)) {
		var wg sync.WaitGroup
		for _, c := range batch {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.o, c.err = f(c)
				close(c.done)
			}()
		}
		wg.Wait()
	}
	fail := func(err error) {
		for _, c := range batch {
			c.err = err
			close(c.done)
		}
	}
	if s.skipLock() {
		each(func(c *call) (Order, error) { return s.placeWithoutRedis(c.ctx, c.d, nil) })
		return
	}

	// A batch of many requests waits on its own bounded context: no single
	// client's cancellation may stop it. A batch of one waits on its client's.
	lctx := context.Background()
	if len(batch) == 1 {
		lctx = batch[0].ctx
	}
	h, err := s.takeLock(lctx, sku)
	var down redisDown
	switch {
	case errors.As(err, &down):
		each(func(c *call) (Order, error) { return s.placeWithoutRedis(c.ctx, c.d, down.err) })
		return
	case err != nil:
		fail(err)
		return
	}
	defer s.releaseLock(h)

	b := Batch{SKU: sku, Fence: h.Fence(), Items: make([]BatchItem, len(batch))}
	for i, c := range batch {
		b.Items[i] = BatchItem{Buyer: c.d.Buyer, Key: c.d.Key, RequestHash: c.d.RequestHash, Quantity: c.d.Quantity}
	}
	b.BeforeCommit = func() error {
		if hook := s.cfg.CriticalSectionHook; hook != nil {
			hook()
		}
		// Err also checks the lease deadline, so a pause past the lease is
		// seen here even before the watchdog runs again.
		if h.Err() != nil { // the lock's Lost hook has counted it
			return ErrLockLost
		}
		return nil
	}
	// The write's bound starts now, after the wait in line and for the lock.
	wctx, cancel := context.WithTimeout(context.Background(), s.cfg.WriteTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		orders, errs, err := s.store.DeductBatch(wctx, b)
		if errors.Is(err, ErrConflict) {
			s.metrics.Conflict(string(s.cfg.Strategy))
			if attempt < s.cfg.VersionRetries {
				continue // in a new transaction
			}
			err = fmt.Errorf("%w: %d version conflicts in a row", ErrBusy, attempt+1)
		}
		if err != nil {
			fail(err)
			return
		}
		for i, c := range batch {
			c.o, c.err = orders[i], errs[i]
			close(c.done)
		}
		return
	}
}
