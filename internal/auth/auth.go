// Package auth verifies and mints the buyers' bearer tokens: JWTs (RFC 7519)
// whose sub is the buyer id, signed with HS256 (a shared secret) or EdDSA /
// RS256 (a public key of the identity provider), on github.com/golang-jwt/jwt.
package auth

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// ErrInvalidToken is wrapped by every verification failure.
var ErrInvalidToken = errors.New("auth: invalid token")

// MinSecret is the shortest HS256 secret accepted (RFC 7518: a key at least
// as long as the hash output).
const MinSecret = 32

// MaxSubject bounds a buyer id.
const MaxSubject = 128

// Config says which tokens a Verifier accepts.
type Config struct {
	Secret    []byte           // HS256 when set
	PublicKey crypto.PublicKey // ed25519.PublicKey (EdDSA) or *rsa.PublicKey (RS256) when set
	Issuer    string           // required iss, if set
	Audience  string           // required in aud, if set
	Leeway    time.Duration    // clock skew allowed on exp, nbf and iat (default 30s)
}

// Verifier checks buyers' tokens. It is safe for concurrent use.
type Verifier struct {
	cfg    Config
	parser *jwt.Parser
}

// NewVerifier returns a Verifier, or an error when no key is configured or
// the secret is too short.
func NewVerifier(cfg Config) (*Verifier, error) {
	if cfg.Leeway == 0 {
		cfg.Leeway = 30 * time.Second
	}
	var methods []string
	if cfg.Secret != nil {
		if len(cfg.Secret) < MinSecret {
			return nil, fmt.Errorf("auth: the HS256 secret must be at least %d bytes", MinSecret)
		}
		methods = append(methods, jwt.SigningMethodHS256.Alg())
	}
	switch cfg.PublicKey.(type) {
	case nil:
	case ed25519.PublicKey:
		methods = append(methods, jwt.SigningMethodEdDSA.Alg())
	case *rsa.PublicKey:
		methods = append(methods, jwt.SigningMethodRS256.Alg())
	default:
		return nil, fmt.Errorf("auth: unsupported public key type %T (want Ed25519 or RSA)", cfg.PublicKey)
	}
	if len(methods) == 0 {
		return nil, errors.New("auth: no key to verify tokens with")
	}
	opts := []jwt.ParserOption{jwt.WithValidMethods(methods), jwt.WithLeeway(cfg.Leeway), jwt.WithExpirationRequired()}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	return &Verifier{cfg: cfg, parser: jwt.NewParser(opts...)}, nil
}

// Verify checks token and returns its subject, the buyer. The errors wrap
// ErrInvalidToken; their text says why, for the log.
func (v *Verifier) Verify(token string) (string, error) {
	var claims jwt.RegisteredClaims
	_, err := v.parser.ParseWithClaims(token, &claims, v.key)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	if claims.Subject == "" || len(claims.Subject) > MaxSubject {
		return "", fmt.Errorf("%w: sub must be 1-%d bytes", ErrInvalidToken, MaxSubject)
	}
	return claims.Subject, nil
}

func (v *Verifier) key(t *jwt.Token) (any, error) {
	switch t.Method.(type) {
	case *jwt.SigningMethodHMAC:
		return v.cfg.Secret, nil
	case *jwt.SigningMethodEd25519, *jwt.SigningMethodRSA:
		return v.cfg.PublicKey, nil
	}
	return nil, fmt.Errorf("unexpected signing method %v", t.Header["alg"])
}

// Mint returns an HS256 token for buyer, valid for ttl, with iss and aud if
// not empty: for local use, the examples and the load tests.
func Mint(secret []byte, buyer string, ttl time.Duration, issuer, audience string) (string, error) {
	if len(secret) < MinSecret {
		return "", fmt.Errorf("auth: the HS256 secret must be at least %d bytes", MinSecret)
	}
	now := time.Now()
	claims := jwt.RegisteredClaims{Subject: buyer, Issuer: issuer, IssuedAt: jwt.NewNumericDate(now),
		NotBefore: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(ttl))}
	if audience != "" {
		claims.Audience = jwt.ClaimStrings{audience}
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
}

// ParsePublicKey reads a PEM "PUBLIC KEY" (PKIX) block: Ed25519 or RSA.
func ParsePublicKey(pemBytes []byte) (crypto.PublicKey, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return nil, errors.New("auth: no PEM block in the public key file")
	}
	key, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("auth: public key: %w", err)
	}
	return key, nil
}
