package service

import "sync"

// Refusals stay final across instances. A sold-out or over-the-limit answer
// is decided from MySQL's state; only a change that makes room (a restock, a
// higher or no per-buyer limit) can let the same order through later, and
// each such change bumps the SKU's restock sequence (Stock.RestockSeq). An
// order carries the sequence this instance knew before the order arrived
// (Deduction.Admitted), and the store refuses it with a *RestockedError
// when the SKU's sequence is larger by the time it is written. So an
// attempt that arrived anywhere before a refusal of its key was decided is
// never placed after a room-making change that came later: it is answered
// "retry" instead, and its retry finds the refusal's key free and the new
// stock.

// restockSeqs is what this instance knows of each SKU's restock sequence:
// the largest value it has read. A SKU it has not read counts as 0, which
// is never above the store's, so an order of a SKU restocked before this
// instance read it is told to retry once, and the answer teaches it the
// sequence.
type restockSeqs struct {
	mu sync.RWMutex // every order reads; only a restock writes
	m  map[string]int64
}

// known returns the largest sequence of sku read so far (0 if none).
func (r *restockSeqs) known(sku string) int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.m[sku]
}

// learn records a sequence of sku read from the store.
func (r *restockSeqs) learn(sku string, seq int64) {
	if r.known(sku) >= seq { // the usual case: nothing new, no write lock
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if seq > r.m[sku] {
		if r.m == nil {
			r.m = make(map[string]int64)
		}
		r.m[sku] = seq
	}
}
