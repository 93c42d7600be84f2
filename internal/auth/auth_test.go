package auth_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
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
