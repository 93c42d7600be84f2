package service

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// The per-SKU line of one instance. Orders of one SKU that arrive while the
// SKU is being served wait here for a leader, which takes up to BatchMax of
// them into one batch (request combining, lock+version). Without combining
// the line only counts the requests waiting for the SKU lock. Either way it
// is capped (Config.QueueMax): a request past the cap is answered ErrBusy at
// once, touching neither Redis nor MySQL, so a flood of one SKU costs memory
// bounded by the cap, not by the flood.
//
// A request that gives up while still in line (not yet in a batch) marks
// itself abandoned, in O(1); the leader skips abandoned calls when it forms
// a batch, and the line is compacted once they outnumber the live ones.

// lines maps SKUs to their lines, sharded so that SKUs do not share a mutex
// (a hot SKU contends only with the SKUs of its own shard).
type lines struct {
	seed   maphash.Seed
	shards [64]lineShard
}

type lineShard struct {
	mu sync.Mutex
	m  map[string]*line
}

// line is one SKU's line. Its fields are guarded by its shard's mutex.
type line struct {
	pending []*call // oldest first; may hold abandoned calls
	live    int     // calls in pending that still wait, plus lock waiters without combining
	dead    int     // abandoned calls still in pending
	active  bool    // a leader is serving the SKU
	// admitted counts the requests of the SKU anywhere in Place at this
	// instance (pre-check included), so the cap holds before any MySQL or
	// Redis work: a flood is refused at the door, not queued for the pool.
	admitted int
}

const (
	callWaiting   int32 = iota
	callTaken           // in a batch: its outcome is the answer
	callAbandoned       // its client gave up before a batch took it
)

type call struct {
	ctx   context.Context // the request's, for nothing but a batch of one's lock wait
	d     Deduction
	state atomic.Int32
	done  chan struct{}
	o     Order
	err   error
}

func newLines() *lines {
	l := &lines{seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].m = make(map[string]*line)
	}
	return l
}

func (ls *lines) shard(sku string) *lineShard {
	return &ls.shards[maphash.String(ls.seed, sku)%uint64(len(ls.shards))]
}

// join puts c at the back of the SKU's line. It reports false when the line
// is full (limit live calls), and whether c's goroutine must lead (no leader is
// serving the SKU).
func (ls *lines) join(sku string, c *call, limit int) (ok, lead bool) {
	sh := ls.shard(sku)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	l := sh.get(sku)
	if l.live >= limit {
		l.forget(sh, sku)
		return false, false
	}
	l.pending = append(l.pending, c)
	l.live++
	lead = !l.active
	l.active = true
	return true, lead
}

// leave marks c abandoned if no batch has taken it yet; it reports whether
// it did (then nothing was or will be written for c).
func (ls *lines) leave(sku string, c *call) bool {
	if !c.state.CompareAndSwap(callWaiting, callAbandoned) {
		return false
	}
	sh := ls.shard(sku)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	l := sh.m[sku]
	l.live--
	l.dead++
	if l.dead > 64 && l.dead > l.live {
		l.compact()
	}
	return true
}

func (l *line) compact() {
	kept := make([]*call, 0, l.live+l.live/2)
	for _, c := range l.pending {
		if c.state.Load() == callWaiting {
			kept = append(kept, c)
		}
	}
	l.pending, l.dead = kept, 0
}

// take removes up to n waiting calls from the front of the SKU's line and
// marks them taken; abandoned calls on the way are dropped. It returns nil
// and ends the leader's turn when none is left.
func (ls *lines) take(sku string, n int) []*call { return ls.takeCalls(sku, n, true) }

// more is take for a leader that holds a batch already: it never ends the
// leader's turn, even when it finds none.
func (ls *lines) more(sku string, n int) []*call { return ls.takeCalls(sku, n, false) }

func (ls *lines) takeCalls(sku string, n int, endTurn bool) []*call {
	sh := ls.shard(sku)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	l := sh.m[sku]
	var batch []*call
	i := 0
	for ; i < len(l.pending) && len(batch) < n; i++ {
		c := l.pending[i]
		l.pending[i] = nil
		if c.state.CompareAndSwap(callWaiting, callTaken) {
			batch = append(batch, c)
			l.live--
		} else {
			l.dead--
		}
	}
	l.pending = l.pending[i:]
	if len(batch) == 0 && endTurn {
		l.active = false
		l.forget(sh, sku)
	}
	return batch
}

// get returns the SKU's line, made if there is none. The caller holds sh.mu.
func (sh *lineShard) get(sku string) *line {
	l := sh.m[sku]
	if l == nil {
		l = &line{}
		sh.m[sku] = l
	}
	return l
}

// enter counts a request waiting for the SKU lock outside a batch (no
// combining). It reports false when the line is full.
func (ls *lines) enter(sku string, limit int) bool {
	sh := ls.shard(sku)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	l := sh.get(sku)
	if l.live >= limit {
		return false
	}
	l.live++
	return true
}

// exit ends what enter began.
func (ls *lines) exit(sku string) {
	sh := ls.shard(sku)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	l := sh.m[sku]
	l.live--
	l.forget(sh, sku)
}

// admit counts one more request of sku at this instance; it reports false
// (and counts nothing) when limit are in already.
func (ls *lines) admit(sku string, limit int) bool {
	sh := ls.shard(sku)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	l := sh.get(sku)
	if l.admitted >= limit {
		return false
	}
	l.admitted++
	return true
}

// release ends what admit began.
func (ls *lines) release(sku string) {
	sh := ls.shard(sku)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	l := sh.m[sku]
	l.admitted--
	l.forget(sh, sku)
}

// forget drops an idle line from the map, so SKUs no longer ordered cost nothing.
func (l *line) forget(sh *lineShard, sku string) {
	if !l.active && l.live == 0 && l.admitted == 0 && len(l.pending) == 0 {
		delete(sh.m, sku)
	}
}

// waiting returns the live calls in the SKU's line (for tests and metrics).
func (ls *lines) waiting(sku string) int {
	sh := ls.shard(sku)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if l := sh.m[sku]; l != nil {
		return l.live
	}
	return 0
}
