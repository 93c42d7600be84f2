package service

import (
	"context"
	"hash/maphash"
	"sync"
	"time"
)

// soldOut is an instance's sold-out fast path. Once MySQL says a SKU is
// sold out (available 0), it reads, in one snapshot, that the SKU is sold
// out and the buyer and key of every order it has, and for SoldOutTTL
// answers the SKU's orders from memory: a key it does not know is sold out
// without a MySQL query (no order can have been placed since: nothing was
// available), and a key it knows takes the usual path, whose read finds the
// order (a replay). A restock drops the SKU at once on the instance that
// made it, and on the others when its StockEvents message arrives; without
// the message (Redis down, none configured) the entry expires, so a stale
// "sold out" hides stock for at most SoldOutTTL. MySQL stays the truth: the
// fast path only ever answers "sold out", and only from a snapshot that said
// so.
type soldOut struct {
	ttl  time.Duration
	max  int // keys kept over all SKUs
	now  func() time.Time
	seed maphash.Seed

	mu    sync.Mutex
	skus  map[string]*soldOutSKU
	keys  int    // kept over all SKUs
	epoch uint64 // bumped by every drop: a load that raced one is not kept
}

type soldOutSKU struct {
	until time.Time
	keys  map[uint64]struct{} // hashes of buyer and key; nil while loading
}

// soldOutMaxKeys bounds the keys the fast path keeps in all (about 40 bytes
// each); a SKU with more orders than fit is answered the usual way.
const soldOutMaxKeys = 200_000

func newSoldOut(ttl time.Duration) *soldOut {
	return &soldOut{ttl: ttl, max: soldOutMaxKeys, now: time.Now, seed: maphash.MakeSeed(), skus: make(map[string]*soldOutSKU)}
}

func (c *soldOut) hash(buyer, key string) uint64 {
	var h maphash.Hash
	h.SetSeed(c.seed)
	h.WriteString(buyer)
	h.WriteByte(0)
	h.WriteString(key)
	return h.Sum64()
}

// soldOutFor reports whether an order of buyer's key for sku is sold out by
// what the fast path knows: the SKU is known sold out and the key had no
// order then. false means "ask MySQL".
func (c *soldOut) soldOutFor(sku, buyer, key string) bool {
	if c == nil {
		return false
	}
	h := c.hash(buyer, key)
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.skus[sku]
	if e == nil || e.keys == nil {
		return false
	}
	if !c.now().Before(e.until) {
		c.forget(sku, e)
		return false
	}
	_, known := e.keys[h]
	return !known
}

// load is called when MySQL said sku is sold out: it reads the SKU's keys
// in one snapshot and keeps them, unless another load of sku is under way,
// the snapshot says otherwise, or they do not fit. It costs the request
// that calls it one read.
func (c *soldOut) load(ctx context.Context, store Store, sku string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	if c.skus[sku] != nil || c.keys >= c.max {
		c.mu.Unlock()
		return
	}
	e := &soldOutSKU{}
	c.skus[sku] = e
	epoch, room := c.epoch, c.max-c.keys
	c.mu.Unlock()

	start := c.now()
	keys, complete, err := store.SoldOutKeys(ctx, sku, room)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.skus[sku] != e {
		return // dropped meanwhile
	}
	if err != nil || !complete || c.epoch != epoch || len(keys) > c.max-c.keys {
		delete(c.skus, sku)
		return
	}
	e.keys = make(map[uint64]struct{}, len(keys))
	for _, k := range keys {
		e.keys[c.hash(k.Buyer, k.Key)] = struct{}{}
	}
	e.until = start.Add(c.ttl)
	c.keys += len(e.keys)
}

// drop forgets sku (its stock changed), and any load that raced the change.
func (c *soldOut) drop(sku string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	if e := c.skus[sku]; e != nil {
		c.forget(sku, e)
	}
}

// dropAll forgets every SKU (stock changes may have been missed).
func (c *soldOut) dropAll() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	clear(c.skus)
	c.keys = 0
}

func (c *soldOut) forget(sku string, e *soldOutSKU) {
	c.keys -= len(e.keys)
	delete(c.skus, sku)
}
