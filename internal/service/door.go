package service

import (
	"hash/maphash"
	"sync"
)

// door counts the orders of each SKU in progress at this instance (in
// Place, pre-check included), so the per-SKU cap (Config.QueueMax) holds
// before any MySQL or Redis work: a flood is refused at the door, not
// queued for the pool. It is safe for concurrent use.
type door struct {
	seed   maphash.Seed
	shards [64]doorShard // SKUs spread over mutexes
}

type doorShard struct {
	mu sync.Mutex
	in map[string]int
}

func newDoor() *door {
	d := &door{seed: maphash.MakeSeed()}
	for i := range d.shards {
		d.shards[i].in = make(map[string]int)
	}
	return d
}

func (d *door) shard(sku string) *doorShard {
	return &d.shards[maphash.String(d.seed, sku)%uint64(len(d.shards))]
}

// admit counts one more order of sku; it reports false (and counts
// nothing) when limit are in already.
func (d *door) admit(sku string, limit int) bool {
	sh := d.shard(sku)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.in[sku] >= limit {
		return false
	}
	sh.in[sku]++
	return true
}

// release ends what admit began.
func (d *door) release(sku string) {
	sh := d.shard(sku)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.in[sku]--; sh.in[sku] <= 0 {
		delete(sh.in, sku)
	}
}

// admitted returns the orders of sku in progress.
func (d *door) admitted(sku string) int {
	sh := d.shard(sku)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.in[sku]
}
