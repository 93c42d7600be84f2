package handler_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// A token whose sub holds a format character (Unicode Cf: zero-width
// spaces and joiners, the byte order mark, bidi controls, the soft hyphen)
// or a space other than U+0020 prints like another buyer's id: it is
// refused (401) and writes nothing. Ids in any script, with plain spaces
// inside, are still buyers.
func TestLookalikeBuyerIDsAreRefused(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	in := newInstance(t, d, instanceOpts{})
	in.setStock(t, "LOOK", 100)
	for i, sub := range []string{"al\u200bice", "\ufeffalice", "ali\u2060ce", "\u202ealice", "alice\u200d", "a\u00adlice",
		"al\u200eice", "al\u00a0ice", "ali\u2028ce", "al\u3000ice", "alice\U000e0001"} {
		tok := "Bearer " + sign(t, jwt.SigningMethodHS256, jwtSecret, jwt.MapClaims{"sub": sub, "exp": time.Now().Add(time.Hour).Unix()})
		r := do(t, "POST", in.url+"/v1/orders", jsonHeader("Idempotency-Key", fmt.Sprint("look-", i), "Authorization", tok), `{"sku":"LOOK","quantity":1}`)
		if r.status != http.StatusUnauthorized || r.problemType() != "invalid-token" {
			t.Errorf("POST /v1/orders with sub %+q = %d %s; want 401 invalid-token", sub, r.status, r.body)
		}
	}
	if n := len(d.ordersOf(t, "LOOK")); n != 0 {
		t.Fatalf("orders of LOOK = %d after lookalike buyers only; want 0", n)
	}
	for i, sub := range []string{"ünal", "李雷", "مريم", "jane doe"} {
		if r := in.orderAs(t, sub, fmt.Sprint("fine-", i), "LOOK", 1); r.status != http.StatusCreated {
			t.Errorf("POST /v1/orders as %q = %d %s; want 201", sub, r.status, r.body)
		}
	}
}

// A token issued in the future (past the 30 s leeway) is refused, as the
// API document says, and so is one valid for longer than
// STOCK_JWT_MAX_LIFETIME (24h by default): exp - iat, or exp - now
// without iat.
func TestTokenIssuedAtAndLifetime(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	in := newInstance(t, d, instanceOpts{})
	in.setStock(t, "LIFE", 100)
	now := time.Now()
	at := func(d time.Duration) int64 { return now.Add(d).Unix() }
	for i, c := range []struct {
		name   string
		claims jwt.MapClaims
		want   int
	}{
		{"iat an hour ahead", jwt.MapClaims{"sub": "b1", "iat": at(time.Hour), "exp": at(2 * time.Hour)}, 401},
		{"iat 2 minutes ahead", jwt.MapClaims{"sub": "b1", "iat": at(2 * time.Minute), "exp": at(time.Hour)}, 401},
		{"iat 10 s ahead (within the leeway)", jwt.MapClaims{"sub": "b1", "iat": at(10 * time.Second), "exp": at(time.Hour)}, 201},
		{"exp - iat 25h", jwt.MapClaims{"sub": "b1", "iat": at(-time.Hour), "exp": at(24 * time.Hour)}, 401},
		{"exp - iat 10 years", jwt.MapClaims{"sub": "b1", "iat": at(0), "exp": at(10 * 365 * 24 * time.Hour)}, 401},
		{"no iat, exp in 25h", jwt.MapClaims{"sub": "b1", "exp": at(25 * time.Hour)}, 401},
		{"exp - iat 23h", jwt.MapClaims{"sub": "b1", "iat": at(-time.Hour), "exp": at(22 * time.Hour)}, 201},
		{"no iat, exp in 23h", jwt.MapClaims{"sub": "b1", "exp": at(23 * time.Hour)}, 201},
	} {
		tok := "Bearer " + sign(t, jwt.SigningMethodHS256, jwtSecret, c.claims)
		r := do(t, "POST", in.url+"/v1/orders", jsonHeader("Idempotency-Key", fmt.Sprint("life-", i), "Authorization", tok), `{"sku":"LIFE","quantity":1}`)
		if r.status != c.want || c.want == 401 && r.problemType() != "invalid-token" {
			t.Errorf("%s (claims %v): %d %s; want %d", c.name, c.claims, r.status, r.body, c.want)
		}
	}
}
