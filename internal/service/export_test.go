package service

import "time"

// Waiting returns the orders of sku waiting in s's queue (for tests).
func Waiting(s *Service, sku string) int { return s.queues.Waiting(sku) }

// SetSoldOutClock sets the clock of s's sold-out fast path (for tests).
func SetSoldOutClock(s *Service, now func() time.Time) {
	if s.soldOut != nil {
		s.soldOut.now = now
	}
}

// SoldOutKnown reports whether s's sold-out fast path holds sku (for tests).
func SoldOutKnown(s *Service, sku string) bool {
	return s.soldOut.known(sku)
}

// Admitted returns the orders of sku in progress at s, counted against
// QueueMax (for tests).
func Admitted(s *Service, sku string) int { return s.queues.Admitted(sku) }

// RedisDownUntil returns when s takes the SKU lock again after Redis failed
// to answer (the zero time when it is not skipping it; for tests).
func RedisDownUntil(s *Service) time.Time {
	if n := s.redis.downUntil.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// EndRedisBackoff ends s's window of skipping the SKU lock now (for tests).
func EndRedisBackoff(s *Service) { s.redis.downUntil.Store(0) }

// SetReplayClock sets the clock of s's watch for replays, which decides
// whether a batch reads its keys before the lock (for tests).
func SetReplayClock(s *Service, now func() time.Time) { s.replays.now = now }

// SoldOutWaiting returns the orders of sku waiting for the fast path's next
// read at s (for tests).
func SoldOutWaiting(s *Service, sku string) int {
	s.soldOut.mu.Lock()
	defer s.soldOut.mu.Unlock()
	if l := s.soldOut.reads[sku]; l != nil {
		return len(l.waiting)
	}
	return 0
}

// KnownRestockSeq returns the restock sequence of sku that s knows (for tests).
func KnownRestockSeq(s *Service, sku string) int64 { return s.seqs.known(sku) }
