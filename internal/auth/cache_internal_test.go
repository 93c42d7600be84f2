package auth

import (
	"testing"
	"time"
)

// A remembered token is answered from the cache: with the verifier's secret
// changed, only a hit can still accept it. The previous generation answers
// too, and moves the entry forward.
func TestTokenCacheHits(t *testing.T) {
	secret := []byte("auth-test-secret-at-least-32-bytes-long")
	v, err := NewVerifier(Config{Secret: secret, CacheSize: 2}) // generations of 1
	if err != nil {
		t.Fatal(err)
	}
	a, _ := Mint(secret, "u-a", time.Hour, "", "")
	b, _ := Mint(secret, "u-b", time.Hour, "", "")
	for _, tok := range []string{a, b} { // b's put moves a to the previous generation
		if _, err := v.Verify(tok); err != nil {
			t.Fatal(err)
		}
	}
	v.cfg.Secret = []byte("another-secret-at-least-32-bytes-long!!")
	if sub, err := v.Verify(b); err != nil || sub != "u-b" {
		t.Fatalf("current generation: %q, %v; want a hit for u-b", sub, err)
	}
	if sub, err := v.Verify(a); err != nil || sub != "u-a" {
		t.Fatalf("previous generation: %q, %v; want a hit for u-a", sub, err)
	}
	if _, ok := v.cache.cur[keyOf(a)]; !ok {
		t.Fatal("a hit in the previous generation did not move the entry to the current one")
	}
	c, _ := Mint(secret, "u-c", time.Hour, "", "")
	if _, err := v.Verify(c); err == nil {
		t.Fatal("a token never seen was accepted under a secret that did not sign it")
	}
}
