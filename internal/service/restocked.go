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

// RestockSeqAfter is a SKU's restock sequence after its row changed from
// before to after, returned telling whether orders gave units back (and
// with them their buyers' allowance, while the SKU has a per-buyer limit).
// It is before.RestockSeq + 1 when the change can let through an order
// refused before it, and before.RestockSeq otherwise. Room is made by more
// units where fewer than maxQuantity were left (a refusal for stock needs
// fewer left than an order may ask for), by a per-buyer limit raised or
// removed, by any return on a SKU with a limit (a buyer refused for the
// limit may now fit), and by a sale's end moved later or removed (a
// sale-ended refusal may now be placed; sale-not-started is not final: it
// says when to retry). One change, one bump: a store calls it once per SKU
// per transaction, however many orders it returns.
func RestockSeqAfter(before, after Stock, returned bool, maxQuantity int64) int64 {
	moreUnits := after.Available > before.Available && before.Available < maxQuantity
	limitRaised := before.PerBuyerLimit > 0 && (after.PerBuyerLimit == 0 || after.PerBuyerLimit > before.PerBuyerLimit)
	allowanceBack := returned && before.PerBuyerLimit > 0
	reopened := !before.SaleEndsAt.IsZero() && (after.SaleEndsAt.IsZero() || after.SaleEndsAt.After(before.SaleEndsAt.Time))
	if moreUnits || limitRaised || allowanceBack || reopened {
		return before.RestockSeq + 1
	}
	return before.RestockSeq
}

// AfterReturn is st after reserved orders of it give units back: the units
// go from reserved to available, and the restock sequence moves as
// RestockSeqAfter says for a return. Both stores apply a return through it,
// once per SKU per transaction.
func AfterReturn(st Stock, units, maxQuantity int64) Stock {
	after := st
	after.Available += units
	after.Reserved -= units
	after.RestockSeq = RestockSeqAfter(st, after, true, maxQuantity)
	return after
}

// StockChanged forgets what the sold-out fast path knows of sku and learns
// its restock sequence, seq, so that orders arriving from now on are not
// refused as admitted before the change (restocked.go); the wiring calls it
// for every change another instance publishes. An empty sku forgets every
// SKU (after changes may have been missed, such as a reconnect of the
// subscription); their sequences are learnt from the next orders' answers.
func (s *Service) StockChanged(sku string, seq int64) {
	if sku == "" {
		s.soldOut.dropAll()
		return
	}
	s.soldOut.drop(sku)
	s.seqs.learn(sku, seq)
}

// knownSeq is the restock sequence of sku this instance knows (0 if none).
func (s *Service) knownSeq(sku string) int64 { return s.seqs.known(sku) }
