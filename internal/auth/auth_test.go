package auth_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/seckill/stock/internal/auth"
)

var secret = []byte("auth-test-secret-at-least-32-bytes-long")

func pemOf(t testing.TB, pub any) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func claims(sub string, exp time.Duration) jwt.RegisteredClaims {
	return jwt.RegisteredClaims{Subject: sub, ExpiresAt: jwt.NewNumericDate(time.Now().Add(exp)),
		Issuer: "idp", Audience: jwt.ClaimStrings{"stock"}}
}

// Asymmetric tokens verify against the identity provider's public key read
// from PEM; iss and aud are checked when configured.
func TestPublicKeysAndClaims(t *testing.T) {
	edPub, edPriv, _ := ed25519.GenerateKey(rand.Reader)
	rsaPriv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		pub    any
		method jwt.SigningMethod
		key    any
	}{
		{"EdDSA", edPub, jwt.SigningMethodEdDSA, edPriv},
		{"RS256", &rsaPriv.PublicKey, jwt.SigningMethodRS256, rsaPriv},
	} {
		pub, err := auth.ParsePublicKey(pemOf(t, c.pub))
		if err != nil {
			t.Fatal(err)
		}
		v, err := auth.NewVerifier(auth.Config{PublicKey: pub, Issuer: "idp", Audience: "stock"})
		if err != nil {
			t.Fatal(err)
		}
		tok, _ := jwt.NewWithClaims(c.method, claims("u-1", time.Hour)).SignedString(c.key)
		if sub, err := v.Verify(tok); err != nil || sub != "u-1" {
			t.Errorf("%s: Verify = %q, %v; want u-1", c.name, sub, err)
		}
		bad := claims("u-1", time.Hour)
		bad.Issuer = "someone-else"
		tok, _ = jwt.NewWithClaims(c.method, bad).SignedString(c.key)
		if _, err := v.Verify(tok); !errors.Is(err, auth.ErrInvalidToken) {
			t.Errorf("%s: wrong iss = %v; want ErrInvalidToken", c.name, err)
		}
		bad = claims("u-1", time.Hour)
		bad.Audience = jwt.ClaimStrings{"other"}
		tok, _ = jwt.NewWithClaims(c.method, bad).SignedString(c.key)
		if _, err := v.Verify(tok); !errors.Is(err, auth.ErrInvalidToken) {
			t.Errorf("%s: wrong aud = %v; want ErrInvalidToken", c.name, err)
		}
		// An HS256 token signed with the public key's bytes (the classic
		// algorithm confusion) is refused.
		tok, _ = jwt.NewWithClaims(jwt.SigningMethodHS256, claims("u-1", time.Hour)).SignedString(pemOf(t, c.pub))
		if _, err := v.Verify(tok); !errors.Is(err, auth.ErrInvalidToken) {
			t.Errorf("%s: HS256 signed with the public key = %v; want ErrInvalidToken", c.name, err)
		}
	}
	if _, err := auth.NewVerifier(auth.Config{}); err == nil {
		t.Error("a Verifier without keys was made")
	}
	if _, err := auth.NewVerifier(auth.Config{Secret: []byte("short")}); err == nil {
		t.Error("a Verifier with a 5-byte secret was made")
	}
	if _, err := auth.ParsePublicKey([]byte("not pem")); err == nil {
		t.Error("ParsePublicKey accepted garbage")
	}
}

// Mint's tokens verify, with the configured iss and aud.
func TestMintVerifies(t *testing.T) {
	v, err := auth.NewVerifier(auth.Config{Secret: secret, Issuer: "local", Audience: "stock"})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := auth.Mint(secret, "u-9", time.Minute, "local", "stock")
	if err != nil {
		t.Fatal(err)
	}
	if sub, err := v.Verify(tok); err != nil || sub != "u-9" {
		t.Fatalf("Verify(Mint) = %q, %v", sub, err)
	}
	if tok, _ := auth.Mint(secret, "u-9", -time.Minute, "local", "stock"); tok != "" {
		if _, err := v.Verify(tok); !errors.Is(err, auth.ErrInvalidToken) {
			t.Fatalf("a token expired a minute ago (past the 30s leeway) = %v; want ErrInvalidToken", err)
		}
	}
}

// BenchmarkVerify is the cost of checking one buyer's token, per request.
func BenchmarkVerify(b *testing.B) {
	edPub, edPriv, _ := ed25519.GenerateKey(rand.Reader)
	rsaPriv, _ := rsa.GenerateKey(rand.Reader, 2048)
	for _, c := range []struct {
		name   string
		cfg    auth.Config
		method jwt.SigningMethod
		key    any
	}{
		{"HS256", auth.Config{Secret: secret}, jwt.SigningMethodHS256, secret},
		{"HS256-cached", auth.Config{Secret: secret, CacheSize: 1024}, jwt.SigningMethodHS256, secret},
		{"EdDSA-cached", auth.Config{PublicKey: edPub, CacheSize: 1024}, jwt.SigningMethodEdDSA, edPriv},
		{"EdDSA", auth.Config{PublicKey: edPub}, jwt.SigningMethodEdDSA, edPriv},
		{"RS256", auth.Config{PublicKey: &rsaPriv.PublicKey}, jwt.SigningMethodRS256, rsaPriv},
	} {
		b.Run(c.name, func(b *testing.B) {
			v, err := auth.NewVerifier(c.cfg)
			if err != nil {
				b.Fatal(err)
			}
			cl := claims("u-1", time.Hour)
			cl.Issuer, cl.Audience = "", nil
			tok, _ := jwt.NewWithClaims(c.method, cl).SignedString(c.key)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Verify(tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The cache of verified tokens answers a token seen before, but never past
// its exp (plus the leeway), never before its nbf (minus the leeway) when
// the clock steps back, never for a token that differs in any byte, and it
// stays within its size.
func TestTokenCache(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	v, err := auth.NewVerifier(auth.Config{Secret: secret, CacheSize: 4, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	sign := func(sub string, nbf, exp time.Time) string {
		t.Helper()
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{Subject: sub,
			NotBefore: jwt.NewNumericDate(nbf), ExpiresAt: jwt.NewNumericDate(exp)}).SignedString(secret)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	tok := sign("u-1", now, now.Add(time.Minute))
	for i := range 2 {
		if sub, err := v.Verify(tok); err != nil || sub != "u-1" {
			t.Fatalf("verify %d = %q, %v; want u-1", i, sub, err)
		}
	}
	if !auth.Cached(v, tok) {
		t.Fatal("a verified token is not remembered")
	}
	// A byte changed in the signature: not the remembered token.
	flip := "A"
	if tok[len(tok)-2] == 'A' {
		flip = "B"
	}
	bad := tok[:len(tok)-2] + flip + tok[len(tok)-1:]
	if _, err := v.Verify(bad); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("a token with its signature changed = %v; want ErrInvalidToken", err)
	}
	if auth.Cached(v, bad) {
		t.Fatal("a token that failed is remembered")
	}
	// The clock stepping back before nbf - leeway: refused, cached or not.
	now = now.Add(-time.Minute)
	if _, err := v.Verify(tok); !errors.Is(err, jwt.ErrTokenNotValidYet) {
		t.Fatalf("before nbf - leeway = %v; want ErrTokenNotValidYet", err)
	}
	// Inside exp + leeway it is still taken; past it, refused.
	now = now.Add(time.Minute + time.Minute + 29*time.Second)
	if _, err := v.Verify(tok); err != nil {
		t.Fatalf("1s before exp + leeway = %v; want accepted", err)
	}
	now = now.Add(time.Second)
	if _, err := v.Verify(tok); !errors.Is(err, jwt.ErrTokenExpired) {
		t.Fatalf("at exp + leeway = %v; want ErrTokenExpired", err)
	}
	// Bounded: ten buyers through a cache of 4; the newest stays.
	var last string
	for i := range 10 {
		last = sign(fmt.Sprintf("u-%d", i), now, now.Add(time.Hour))
		if sub, err := v.Verify(last); err != nil || sub != fmt.Sprintf("u-%d", i) {
			t.Fatalf("buyer %d = %q, %v", i, sub, err)
		}
		if n := auth.CacheLen(v); n > 4 {
			t.Fatalf("the cache holds %d entries, past its size 4", n)
		}
	}
	if !auth.Cached(v, last) {
		t.Fatal("the newest token was dropped")
	}
	off, err := auth.NewVerifier(auth.Config{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	live, err := auth.Mint(secret, "u-1", time.Hour, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := off.Verify(live); err != nil || auth.Cached(off, live) {
		t.Fatalf("CacheSize 0: verify = %v, cached = %v; want no cache", err, auth.Cached(off, live))
	}
	if _, err := auth.NewVerifier(auth.Config{Secret: secret, CacheSize: -1}); err == nil {
		t.Fatal("a negative cache size was accepted")
	}
}

// Many buyers verifying at once through a small cache (run with -race).
func TestTokenCacheConcurrent(t *testing.T) {
	v, err := auth.NewVerifier(auth.Config{Secret: secret, CacheSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	toks := make([]string, 32)
	for i := range toks {
		if toks[i], err = auth.Mint(secret, fmt.Sprintf("u-%d", i), time.Hour, "", ""); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				j := (g*7 + i) % len(toks)
				if sub, err := v.Verify(toks[j]); err != nil || sub != fmt.Sprintf("u-%d", j) {
					t.Errorf("token %d = %q, %v", j, sub, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := auth.CacheLen(v); n > 8 {
		t.Fatalf("the cache holds %d entries, past its size 8", n)
	}
}
