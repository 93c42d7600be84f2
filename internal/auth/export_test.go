package auth

// Cached reports whether v remembers tok, and CacheLen how many entries its
// cache holds (a token in both generations counts twice).
func Cached(v *Verifier, tok string) bool {
	if v.cache == nil {
		return false
	}
	k := keyOf(tok)
	v.cache.mu.Lock()
	defer v.cache.mu.Unlock()
	_, cur := v.cache.cur[k]
	_, prev := v.cache.prev[k]
	return cur || prev
}

func CacheLen(v *Verifier) int {
	if v.cache == nil {
		return 0
	}
	return v.cache.len()
}
