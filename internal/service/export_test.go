package service

// Waiting returns the orders of sku waiting in s's line (for tests).
func Waiting(s *Service, sku string) int { return s.lines.waiting(sku) }
