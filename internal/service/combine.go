package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/seckill/stock/internal/combine"
)

// Request combining for lock+version: orders of one SKU wait in the SKU's
// queue (internal/combine), and each batch of them is placed under one
// hold of the SKU lock in one transaction with one versioned UPDATE. The
// counter's winners (counter+conditional) are combined the same way, with
// no lock: the versioned UPDATE alone decides, retried on a conflict. The
// lock hand-off, the read, the UPDATE and the COMMIT are then paid once per
// batch rather than once per order, which is what bounds a hot SKU's
// throughput under a lock. Each order still gets its own answer: placed,
// sold out (the batch is filled in arrival order), or a replay of its key.

// call is one order in a batch.
type call = combine.Call[Deduction, Order]

// errQueueFull is the answer past the per-SKU cap.
func errQueueFull(limit int) error {
	return fmt.Errorf("%w: more than %d orders of this SKU are waiting at this instance", ErrBusy, limit)
}

// placeBatched is lock+version: d placed in a batch under the SKU lock,
// combined with the SKU's other orders when BatchMax allows. A request
// whose client gives up before a batch took it was not placed.
func (s *Service) placeBatched(ctx context.Context, d Deduction) (Order, error) {
	var o Order
	var err error
	if s.cfg.BatchMax > 1 {
		o, err = s.queues.Submit(ctx, d.SKU, d)
	} else {
		o, err = s.queues.Alone(ctx, d.SKU, d)
	}
	switch {
	case errors.Is(err, combine.ErrFull):
		return Order{}, errQueueFull(s.cfg.QueueMax)
	case errors.Is(err, combine.ErrGaveUp):
		return Order{}, fmt.Errorf("%w: %w: %w", ErrUnavailable, errNotQueued, ctx.Err())
	}
	return o, err
}

// runBatch places a batch under the SKU lock (the counter's winners: with
// no lock) in one transaction: the batch's keys read first (while replays
// are coming: replayWatch), then the lock, then the stock read, the orders
// that joined the queue meanwhile (withJoined), the inserts, the versioned
// UPDATE and COMMIT. A SKU found sold out first
// (here, or at another instance whose notice ends the lock's wait) is
// answered from reads of the keys instead. Every call of the batch gets
// its answer (c.done closed) before it returns.
func (s *Service) runBatch(sku string, batch []*call) {
	// The batch's span is a child of its first order's, linked to the
	// others' (and they to it), so each order's trace shows the batch that
	// placed it.
	bctx, span := s.trace.batchSpan(sku, batch)
	var failed error // the batch's own error, if any
	defer func() { endSpan(span, "", failed) }()
	if s.info.Counted { // the counter's winners: no lock, the versioned UPDATE decides
		seq := s.seqs.known(sku) // as runLocked's: the notice's, read before the write
		var soldOut bool
		if soldOut, failed = s.commitBatch(span, s.batchOf(sku, batch, unlocked{}, 0), batch); soldOut {
			s.tellSoldOut(bctx, sku, seq)
		}
		return
	}
	if s.soldOut.known(sku) {
		s.drainQueue(sku, batch)
		return
	}
	if s.redis.skip() {
		s.metrics.Batch(len(batch))
		eachWithoutRedis(s, batch, nil)
		return
	}
	keysChecked := false
	if len(batch) > 1 && s.replays.recent() {
		if batch, keysChecked = s.answerReplays(bctx, batch); len(batch) == 0 {
			return
		}
	}
	failed = s.runLocked(bctx, span, sku, batch, keysChecked)
}

// runLocked is runBatch from the lock on: it returns the batch's own
// error, if any. The first len(batch) keys were read if keysChecked.
func (s *Service) runLocked(bctx context.Context, span trace.Span, sku string, batch []*call, keysChecked bool) error {
	// A batch of many requests waits on its own bounded context (bctx): no
	// single client's cancellation may stop it. A batch of one waits on its
	// client's.
	lctx, waited := s.waits.start(bctx, sku)
	h, err := s.locks.take(lctx, sku)
	waited(err == nil)
	if s.soldOut.known(sku) { // meanwhile: the lock has nothing left to decide
		if err == nil {
			s.locks.release(bctx, h)
		}
		s.drainQueue(sku, batch)
		return nil
	}
	var down redisDown
	switch {
	case errors.As(err, &down):
		eachWithoutRedis(s, batch, down.err)
		return nil
	case err != nil:
		answerAll(batch, err)
		return err
	}
	// The notice carries the restock sequence known before the write read
	// the row, never a newer one learnt before it is published (a return
	// meanwhile): it must not outdate that return at the listeners.
	soldOut, seq := false, s.seqs.known(sku)
	defer func() { // told once the lock is free: the publish is no part of the hold
		if soldOut {
			s.tellSoldOut(bctx, sku, seq)
		}
	}()
	defer s.locks.release(bctx, h)
	checked := 0
	if keysChecked {
		checked = len(batch)
	}
	soldOut, err = s.commitBatch(span, s.batchOf(sku, batch, h, checked), batch)
	return err
}

// drainQueue answers the batch, and every order of its SKU queued behind
// it, on the sold-out fast path (drainSoldOut: reads of their keys, no
// lock, no transaction each).
func (s *Service) drainQueue(sku string, batch []*call) {
	s.drainSoldOut(sku, append(batch, s.queues.More(sku, s.cfg.QueueMax)...))
}

// drainReadMax bounds the keys one read of drainSoldOut takes.
const drainReadMax = 1000

// drainSoldOut answers calls of a SKU on the sold-out fast path from
// reads of the stock row and their keys, drainReadMax keys a read, each
// read begun after every call it answers arrived: a key with an order gets
// ErrDuplicateKey (Place answers its order), one without is sold out as of
// the read. Stock found again (a restock) sends a call back to Place's
// fast path (errQueuedPastSoldOut), where a restock is handled.
func (s *Service) drainSoldOut(sku string, calls []*call) {
	for len(calls) > 0 {
		part := calls[:min(len(calls), drainReadMax)]
		calls = calls[len(part):]
		keys := make([]BuyerKey, len(part))
		for i, c := range part {
			keys[i] = BuyerKey{Buyer: c.Item.Buyer, Key: c.Item.Key}
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.WriteTimeout)
		st, prev, err := s.store.PrecheckKeys(ctx, sku, keys)
		cancel()
		if err == nil {
			s.seqs.learn(sku, st.RestockSeq)
		}
		for i, c := range part {
			switch {
			case err != nil:
				c.Answer(Order{}, err)
			case prev[i] != nil:
				c.Answer(Order{}, ErrDuplicateKey)
			case st.Available < int64(c.Item.Quantity):
				c.Answer(Order{}, errSoldOutKeyRead)
			default:
				c.Answer(Order{}, errQueuedPastSoldOut)
			}
		}
	}
}

// unlocked is the Hold of a batch placed without the lock (the counter's
// winners): fence 0, never lost.
type unlocked struct{}

func (unlocked) Context() context.Context     { return context.Background() }
func (unlocked) Err() error                   { return nil }
func (unlocked) Fence() int64                 { return 0 }
func (unlocked) Unlock(context.Context) error { return nil }

// eachWithoutRedis places every call of the batch on the DB-only path, each
// on its own goroutine (cause: the lock's error, or nil while it is skipped).
func eachWithoutRedis(s *Service, batch []*call, cause error) {
	var wg sync.WaitGroup
	for _, c := range batch {
		wg.Go(func() {
			c.Answer(s.placeWithoutRedis(c.Ctx, c.Item, cause))
		})
	}
	wg.Wait()
}

// answerAll answers every call of the batch with err.
func answerAll(batch []*call, err error) {
	for _, c := range batch {
		c.Answer(Order{}, err)
	}
}

// batchOf is the Batch of the calls under hold h, the first checked of
// them with their keys read already, with the commit-time checks of the
// hold (and the critical-section hook).
func (s *Service) batchOf(sku string, batch []*call, h Hold, checked int) Batch {
	b := Batch{SKU: sku, Fence: h.Fence(), Items: make([]BatchItem, len(batch))}
	for i, c := range batch {
		b.Items[i] = itemOf(c, i < checked)
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
	return b
}

// itemOf is the batch item of call c; keyChecked: its key was read.
func itemOf(c *call, keyChecked bool) BatchItem {
	d := c.Item
	return BatchItem{Buyer: d.Buyer, Key: d.Key, RequestHash: d.RequestHash, Quantity: d.Quantity,
		Admitted: d.Admitted, KeyChecked: keyChecked}
}

// commitBatch writes b, retrying a version conflict (retryConflicts), and
// answers every call; it returns the batch's own error (nil when the store
// answered per order), and first whether the batch put the SKU on the
// sold-out fast path (for tellSoldOut).
func (s *Service) commitBatch(span trace.Span, b Batch, batch []*call) (soldOut bool, failed error) {
	// The write's bound starts now, after the wait in the queue and for the lock.
	wctx, cancel := context.WithTimeout(s.trace.withSpan(context.Background(), span), s.cfg.WriteTimeout)
	defer cancel()
	var orders []Order
	var errs []error
	err := s.writes.retryConflicts(wctx, func(n int) error {
		tctx, tspan := s.trace.span(wctx, "stock.transaction")
		if tspan.IsRecording() {
			tspan.SetAttributes(attrDBSystem.String("mysql"), attrSKU.String(b.SKU), attrWrite.String("versioned"),
				attrBatchSize.Int(len(batch)), attrAttempt.Int(n+1))
		}
		try := s.withJoined(span, b, &batch)
		var err error
		orders, errs, err = s.store.DeductBatch(tctx, try)
		if err == nil && (len(orders) != len(batch) || len(errs) != len(batch)) {
			err = fmt.Errorf("service: the store answered %d of a batch of %d orders", len(errs), len(batch))
		}
		endTx(tspan, err)
		return err
	})
	s.metrics.Batch(len(batch)) // the orders this hold served (replays answered before it left out)
	if err != nil {
		answerAll(batch, err)
		return false, err
	}
	replayed, refused := false, false
	for i, c := range batch {
		replayed = replayed || errors.Is(errs[i], ErrDuplicateKey)
		refused = refused || errors.Is(errs[i], ErrSoldOut)
		c.Answer(orders[i], errs[i])
	}
	// Marked here, before runBatch returns and the SKU's next batch starts,
	// not where the answer is taken (Place): that runs on the waiter's
	// goroutine and could come after the next batch has decided whether to
	// read its keys, or to take the lock at all (runBatch).
	if replayed {
		s.replays.saw()
	}
	return refused && s.soldOut.mark(b.SKU), nil
}

// withJoined is b for a try of the batch's write: its items are those of
// every call in *batch (the calls joined in an earlier try included), and
// its Join takes the SKU's queued orders up to BatchMax into *batch, so the
// orders that came while the batch waited for the lock and its stock read
// are placed in this hold, not a whole round of the lock later. Their keys
// are unread; the store checks them.
func (s *Service) withJoined(span trace.Span, b Batch, batch *[]*call) Batch {
	for _, c := range (*batch)[len(b.Items):] {
		b.Items = append(slices.Clip(b.Items), itemOf(c, false))
	}
	b.Join = func() []BatchItem {
		more := s.queues.More(b.SKU, s.cfg.BatchMax-len(*batch))
		if len(more) == 0 {
			return nil
		}
		linkSpans(span, more)
		*batch = append(*batch, more...)
		if span.IsRecording() {
			span.SetAttributes(attrBatchSize.Int(len(*batch)))
		}
		items := make([]BatchItem, len(more))
		for i, c := range more {
			items[i] = itemOf(c, false)
		}
		return items
	}
	return b
}

// replayWindow is how long after a batch met a replay the batches read
// their keys before the lock (answerReplays).
const replayWindow = 10 * time.Second

// replayWatch remembers when a batch last met a replay (a key that had an
// order already). While none came within replayWindow, a batch leaves its
// keys to the store's unique index, so a flood of new keys pays no key read
// at all; the first batch with a replay pays for it under the lock (the
// store reads every key and plans again) and turns the reads before the
// lock back on. The read only saves work: the unique index is what makes
// a key place at most one order.
type replayWatch struct {
	last atomic.Int64 // unix nanos of the last replay met; 0: none yet
	now  func() time.Time
}

func (w *replayWatch) saw() { w.last.Store(w.now().UnixNano()) }

func (w *replayWatch) recent() bool {
	last := w.last.Load()
	return last != 0 && w.now().Sub(time.Unix(0, last)) < replayWindow
}

// answerReplays reads the batch's keys before the lock is taken (one read,
// outside the critical section, which then holds only the writes) and
// answers those that have an order already with ErrDuplicateKey, which
// Place turns into the replay of that order. It returns the calls left to
// place and whether the read succeeded, so the store need not read the keys
// again; when it fails, the batch is left whole and the store reads them
// itself, under the lock.
func (s *Service) answerReplays(ctx context.Context, batch []*call) ([]*call, bool) {
	keys := make([]BuyerKey, len(batch))
	for i, c := range batch {
		keys[i] = BuyerKey{Buyer: c.Item.Buyer, Key: c.Item.Key}
	}
	// Bounded by LockWait: the read is part of the wait before the write
	// (whose own bound starts after the lock), and only saves work.
	rctx, cancel := context.WithTimeout(ctx, s.cfg.LockWait)
	defer cancel()
	taken, err := s.store.KeysTaken(rctx, keys)
	if err != nil {
		s.log.WarnContext(ctx, "reading the batch's keys before the lock failed; the batch reads them under it", "err", err)
		return batch, false
	}
	rest := make([]*call, 0, len(batch))
	if slices.Contains(taken, true) {
		s.replays.saw()
	}
	for i, c := range batch {
		if taken[i] {
			c.Answer(Order{}, ErrDuplicateKey)
			continue
		}
		rest = append(rest, c)
	}
	return rest, true
}

// linkSpans links a batch's span to the spans of calls it serves, and
// theirs to it (nothing when the batch's span is not recorded).
func linkSpans(span trace.Span, calls []*call) {
	if !span.IsRecording() {
		return
	}
	link := trace.Link{SpanContext: span.SpanContext()}
	for _, c := range calls {
		ps := trace.SpanFromContext(c.Ctx)
		if sc := ps.SpanContext(); sc.IsSampled() {
			span.AddLink(trace.Link{SpanContext: sc})
		}
		if ps.IsRecording() {
			ps.AddLink(link)
		}
	}
}
