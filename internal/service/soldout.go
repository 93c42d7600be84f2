package service

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// soldOut is an instance's sold-out fast path: the SKUs that MySQL said
// were sold out within the last SoldOutTTL. Their orders skip the queue and
// the lock: each is answered from a read of the stock row and of its own
// key (check), exact at that moment. A replay gets its order, a key reused
// with another body is refused, and stock found again (a restock this
// instance has not heard of yet) ends the entry: the order goes the usual
// way. So an entry never answers anything MySQL would not; a stale one only
// costs the orders of a restocked SKU that read until it is dropped.
type soldOut struct {
	ttl         time.Duration
	max         int // SKUs kept at most
	readTimeout time.Duration
	now         func() time.Time

	mu    sync.Mutex
	until map[string]time.Time
	reads map[string]*soldOutReads // by SKU, while its reads run
}

// soldOutReads are the orders of one SKU waiting for the next read, and
// the goroutines reading for them.
type soldOutReads struct {
	waiting []*soldOutRead
	readers int
}

// soldOutRead is one order's read: its key, then what was read.
type soldOutRead struct {
	key  BuyerKey
	done chan struct{}
	st   Stock
	prev *Order
	err  error
}

// soldOutReadMax bounds the keys one read takes; soldOutReaders bounds the
// reads of one SKU at once; soldOutLinger is how long a read waits for more
// orders under a flood.
const (
	soldOutReadMax = 128
	soldOutReaders = 4
	soldOutLinger  = time.Millisecond
)

// soldOutMaxSKUs bounds the SKUs the fast path holds; past it a sold-out
// SKU's orders take the usual way.
const soldOutMaxSKUs = 100_000

func newSoldOut(ttl, readTimeout time.Duration) *soldOut {
	return &soldOut{ttl: ttl, max: soldOutMaxSKUs, readTimeout: readTimeout, now: time.Now,
		until: make(map[string]time.Time), reads: make(map[string]*soldOutReads)}
}

// check reads sku's stock row and the order of key (nil for none), as
// Store.Precheck does. The orders of a SKU that arrive while its read is
// in flight share the next one (Store.PrecheckKeys, up to soldOutReadMax
// keys; several at once under a flood), so a flood costs a fraction of a
// read per order, and every answer still comes from a read that began after
// its order arrived. When ctx ends
// first it returns an error wrapping ErrUnavailable (the read goes on).
func (c *soldOut) check(ctx context.Context, store Store, sku string, key BuyerKey) (Stock, *Order, error) {
	r := &soldOutRead{key: key, done: make(chan struct{})}
	c.mu.Lock()
	l := c.reads[sku]
	if l == nil {
		l = &soldOutReads{}
		c.reads[sku] = l
	}
	l.waiting = append(l.waiting, r)
	// One reader, and more while a full read's worth waits (a flood), up
	// to soldOutReaders. Each ends when no order of sku waits; its reads
	// serve many requests, so none of theirs may cancel them.
	if l.readers == 0 || len(l.waiting) >= soldOutReadMax && l.readers < soldOutReaders {
		l.readers++
		go c.readAll(store, sku) //nolint:gosec // G118: shared by the SKU's orders, bounded by readTimeout
	}
	c.mu.Unlock()
	select {
	case <-r.done:
		return r.st, r.prev, r.err
	case <-ctx.Done():
		return Stock{}, nil, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	}
}

// readAll reads for the orders of sku waiting, batch by batch, until none
// waits.
func (c *soldOut) readAll(store Store, sku string) {
	last := 0 // keys in the last read
	for {
		c.mu.Lock()
		l := c.reads[sku]
		// Under a flood (the last read took several keys), let more orders
		// join this read before it is sent: a read costs MySQL about as
		// much for a hundred keys as for ten. A lone order is read at once.
		if last > 1 && len(l.waiting) < soldOutReadMax/4 {
			c.mu.Unlock()
			time.Sleep(soldOutLinger)
			c.mu.Lock()
		}
		n := min(len(l.waiting), soldOutReadMax)
		last = n
		if n == 0 {
			if l.readers--; l.readers == 0 {
				delete(c.reads, sku)
			}
			c.mu.Unlock()
			return
		}
		batch := l.waiting[:n:n]
		l.waiting = l.waiting[n:]
		c.mu.Unlock()
		keys := make([]BuyerKey, n)
		for i, r := range batch {
			keys[i] = r.key
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.readTimeout)
		st, orders, err := store.PrecheckKeys(ctx, sku, keys)
		cancel()
		for i, r := range batch {
			r.st, r.err = st, err
			if err == nil {
				r.prev = orders[i]
			}
			close(r.done)
		}
	}
}

// known reports whether sku was sold out within the TTL (false for a nil
// fast path, which is off).
func (c *soldOut) known(sku string) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	until, ok := c.until[sku]
	if ok && !c.now().Before(until) {
		delete(c.until, sku)
		return false
	}
	return ok
}

// mark records that MySQL said sku is sold out. It reports whether sku
// was not held before (or its entry had expired) and is now.
func (c *soldOut) mark(sku string) (added bool) {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	until, ok := c.until[sku]
	if !ok && len(c.until) >= c.max {
		for s, until := range c.until { // full: make room from the expired
			if !now.Before(until) {
				delete(c.until, s)
			}
		}
	}
	if ok || len(c.until) < c.max {
		c.until[sku] = now.Add(c.ttl)
		return !ok || !now.Before(until)
	}
	return false
}

// drop forgets sku (its stock changed).
func (c *soldOut) drop(sku string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.until, sku)
}

// dropAll forgets every SKU (stock changes may have been missed).
func (c *soldOut) dropAll() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.until)
}
