package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/seckill/stock/internal/lock"
)

// Request combining for lock+version. Orders of one SKU that arrive at an
// instance while the SKU is being served wait in line here; the next leader
// takes up to BatchMax of them, takes the Redis lock once and places them all
// in one transaction with one versioned UPDATE. The lock hand-off, the read,
// the UPDATE and the COMMIT are then paid once per batch rather than once per
// order, which is what bounds a hot SKU's throughput under a lock. Each order
// still gets its own answer: placed, sold out (the batch is filled in arrival
// order), or a replay of its key.

// combiner is the per-SKU line of orders waiting for a leader.
type combiner struct {
	mu      sync.Mutex
	pending map[string][]*call
	active  map[string]bool // a leader is serving the SKU
}

type call struct {
	ctx  context.Context // the request's, for nothing but the single-order path's lock wait
	wctx context.Context // the write context, detached from the request
	d    Deduction
	done chan struct{}
	o    Order
	err  error
}

// combined places d through the SKU's line of orders and returns its own
// outcome. A request whose client gives up while it is still in line (not
// yet in a batch) leaves the line.
func (s *Service) combined(ctx, wctx context.Context, d Deduction) (Order, error) {
	c := &call{ctx: ctx, wctx: wctx, d: d, done: make(chan struct{})}
	s.comb.mu.Lock()
	s.comb.pending[d.SKU] = append(s.comb.pending[d.SKU], c)
	lead := !s.comb.active[d.SKU]
	s.comb.active[d.SKU] = true
	s.comb.mu.Unlock()
	if lead {
		s.lead(d.SKU)
	}
	select {
	case <-c.done:
		return c.o, c.err
	case <-ctx.Done():
	}
	s.comb.mu.Lock()
	q := s.comb.pending[d.SKU]
	for i, x := range q {
		if x == c { // not taken into a batch yet: nothing was written
			s.comb.pending[d.SKU] = append(q[:i:i], q[i+1:]...)
			s.comb.mu.Unlock()
			return Order{}, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
		}
	}
	s.comb.mu.Unlock()
	<-c.done // in a batch already: its outcome is the answer
	return c.o, c.err
}

// lead serves one batch of the SKU's line, then hands the line to a new
// leader goroutine if more orders arrived meanwhile (so no request waits for
// batches after its own). The last leader to find the line empty ends.
func (s *Service) lead(sku string) {
	s.comb.mu.Lock()
	q := s.comb.pending[sku]
	n := min(len(q), s.cfg.BatchMax)
	batch := q[:n:n]
	s.comb.pending[sku] = q[n:]
	s.comb.mu.Unlock()

	s.runBatch(sku, batch)

	s.comb.mu.Lock()
	defer s.comb.mu.Unlock()
	if len(s.comb.pending[sku]) > 0 {
		go s.lead(sku)
		return
	}
	delete(s.comb.pending, sku)
	delete(s.comb.active, sku)
}

// alone places d as a batch of its own (request combining off).
func (s *Service) alone(ctx, wctx context.Context, d Deduction) (Order, error) {
	c := &call{ctx: ctx, wctx: wctx, d: d, done: make(chan struct{})}
	s.runBatch(d.SKU, []*call{c})
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
		each(func(c *call) (Order, error) { return s.withoutRedis(c.wctx, c.d, nil) })
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
		each(func(c *call) (Order, error) { return s.withoutRedis(c.wctx, c.d, down.err) })
		return
	case err != nil:
		fail(err)
		return
	}
	defer s.releaseLock(h)

	b := Batch{SKU: sku, Fence: h.Fence(), Items: make([]BatchItem, len(batch))}
	for i, c := range batch {
		b.Items[i] = BatchItem{Key: c.d.Key, RequestHash: c.d.RequestHash, Quantity: c.d.Quantity}
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
	wctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
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

// heldLock is a held SKU lock and when it was taken.
type heldLock struct {
	Hold
	sku string
	at  time.Time
}

// redisDown wraps the error of a lock that could not be asked for.
type redisDown struct{ err error }

func (e redisDown) Error() string { return "service: redis unreachable: " + e.err.Error() }
func (e redisDown) Unwrap() error { return e.err }

// takeLock takes the SKU lock within LockWait, counting the outcome. It
// returns ErrBusy (wait ran out), ErrUnavailable (ctx ended) or a redisDown.
func (s *Service) takeLock(ctx context.Context, sku string) (*heldLock, error) {
	start := time.Now()
	h, err := s.locks.TryLock(ctx, sku, s.cfg.LockWait, s.cfg.LockLease)
	wait := time.Since(start)
	switch {
	case errors.Is(err, lock.ErrNotObtained):
		s.metrics.Lock("timeout", wait)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
		}
		return nil, fmt.Errorf("%w: lock not obtained within %v", ErrBusy, s.cfg.LockWait)
	case err != nil:
		s.metrics.Lock("error", wait)
		return nil, redisDown{err}
	}
	s.metrics.Lock("acquired", wait)
	s.redisUp()
	return &heldLock{Hold: h, sku: sku, at: time.Now()}, nil
}

// releaseLock unlocks on a context of its own, so a cancelled request does
// not leave the lock held.
func (s *Service) releaseLock(h *heldLock) {
	s.metrics.Held(time.Since(h.at))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := h.Unlock(ctx); err != nil {
		s.log.Warn("unlock failed", "sku", h.sku, "err", err)
	}
}
