package service

import (
	"sync"
	"time"
)

// soldOut is an instance's sold-out fast path: the SKUs that MySQL said
// were sold out within the last SoldOutTTL. Their orders skip the line and
// the lock: each is answered from one read of the stock row and of its own
// key (Store.Precheck), exact at that moment. A replay gets its order, a key
// reused with another body is refused, and stock found again (a restock this
// instance has not heard of yet) ends the entry: the order goes the usual
// way. So an entry never answers anything MySQL would not; a stale one only
// costs the orders of a restocked SKU that read until it is dropped.
type soldOut struct {
	ttl time.Duration
	max int // SKUs kept at most
	now func() time.Time

	mu    sync.Mutex
	until map[string]time.Time
}

// soldOutMaxSKUs bounds the SKUs the fast path holds; past it a sold-out
// SKU's orders take the usual way.
const soldOutMaxSKUs = 100_000

func newSoldOut(ttl time.Duration) *soldOut {
	return &soldOut{ttl: ttl, max: soldOutMaxSKUs, now: time.Now, until: make(map[string]time.Time)}
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

// mark records that MySQL said sku is sold out.
func (c *soldOut) mark(sku string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.until[sku]; ok || len(c.until) < c.max {
		c.until[sku] = c.now().Add(c.ttl)
	}
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
