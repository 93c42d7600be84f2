// Package auth verifies and mints the buyers' bearer tokens: JWTs (RFC 7519)
// whose sub is the buyer id, signed with HS256 (a shared secret) or EdDSA /
// RS256 (a public key of the identity provider), on github.com/golang-jwt/jwt.
package auth

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

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
	// MaxLifetime, when positive, refuses a token valid for longer: exp
	// minus iat, or exp minus now when the token has no iat. A token whose
	// iat is later than now plus Leeway is refused whatever this is.
	MaxLifetime time.Duration
	// CacheSize bounds the verified tokens remembered (0: none; at least 2
	// otherwise). A token seen again within its validity skips the parse
	// and the signature check: a buyer's retries and polls, and with EdDSA
	// or RS256 most of a request's CPU. Entries are keyed by the SHA-256 of
	// the whole token and hold its sub, nbf and exp, so a hit is still
	// refused once exp plus Leeway has passed (an entry stays until its
	// generation is dropped). Failures are never remembered.
	CacheSize int
	Now       func() time.Time // the clock (default time.Now); tests set it
}

// Verifier checks buyers' tokens. It is safe for concurrent use.
type Verifier struct {
	cfg    Config
	parser *jwt.Parser
	cache  *tokenCache // nil when Config.CacheSize is 0
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
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	opts := []jwt.ParserOption{jwt.WithValidMethods(methods), jwt.WithLeeway(cfg.Leeway), jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(), jwt.WithTimeFunc(cfg.Now)}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	v := &Verifier{cfg: cfg, parser: jwt.NewParser(opts...)}
	if cfg.CacheSize < 0 {
		return nil, errors.New("auth: the token cache size must not be negative")
	}
	if cfg.CacheSize > 0 {
		v.cache = newTokenCache(cfg.CacheSize)
	}
	return v, nil
}

// Verify checks token and returns its subject, the buyer. The errors wrap
// ErrInvalidToken; their text says why, for the log.
func (v *Verifier) Verify(token string) (string, error) {
	var key [sha256.Size]byte
	if v.cache != nil {
		key = keyOf(token)
		if sub, ok := v.cache.get(key, v.cfg.Now()); ok {
			return sub, nil
		}
	}
	var claims jwt.RegisteredClaims
	_, err := v.parser.ParseWithClaims(token, &claims, v.key)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	if err := ValidSubject(claims.Subject); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	if err := v.checkLifetime(claims); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	if v.cache != nil {
		// The window the parser accepted: exp is required; nbf is optional.
		e := verified{sub: claims.Subject, until: claims.ExpiresAt.Add(v.cfg.Leeway)}
		if claims.NotBefore != nil {
			e.from = claims.NotBefore.Add(-v.cfg.Leeway)
		}
		v.cache.put(key, e)
	}
	return claims.Subject, nil
}

// checkLifetime refuses a token valid for longer than MaxLifetime, from
// its iat or, without one, from now. A remembered token needs no second
// check: its remaining validity only shrinks.
func (v *Verifier) checkLifetime(c jwt.RegisteredClaims) error {
	if v.cfg.MaxLifetime <= 0 {
		return nil
	}
	from := v.cfg.Now()
	if c.IssuedAt != nil {
		from = c.IssuedAt.Time
	}
	if c.ExpiresAt.Sub(from) > v.cfg.MaxLifetime {
		return fmt.Errorf("the token is valid for longer than %v (exp - iat, or exp - now without iat)", v.cfg.MaxLifetime)
	}
	return nil
}

// keyOf is a token's key in the cache.
func keyOf(token string) [sha256.Size]byte { return sha256.Sum256([]byte(token)) }

// verified is a remembered token: its buyer and when it is accepted, as
// [from, until) on the Verifier's clock, the leeway included.
type verified struct {
	sub         string
	from, until time.Time
}

// tokenCache remembers up to size (at least 2) verified tokens in two
// generations of size/2, grown as tokens arrive: when the current one fills
// up it becomes the previous one (the older generation is dropped), and a
// hit in the previous one moves the entry forward. So tokens in use stay
// and the memory is bounded, without a list to keep in order.
type tokenCache struct {
	mu        sync.Mutex
	half      int
	cur, prev map[[sha256.Size]byte]verified
}

func newTokenCache(size int) *tokenCache {
	half := max(1, size/2)
	return &tokenCache{half: half, cur: map[[sha256.Size]byte]verified{}}
}

// get returns the buyer of a remembered token that is accepted at now.
func (c *tokenCache) get(key [sha256.Size]byte, now time.Time) (string, bool) {
	c.mu.Lock()
	e, ok := c.cur[key]
	if !ok {
		if e, ok = c.prev[key]; ok {
			c.putLocked(key, e)
		}
	}
	c.mu.Unlock()
	if !ok || now.Before(e.from) || !now.Before(e.until) {
		return "", false
	}
	return e.sub, true
}

func (c *tokenCache) put(key [sha256.Size]byte, e verified) {
	c.mu.Lock()
	c.putLocked(key, e)
	c.mu.Unlock()
}

func (c *tokenCache) putLocked(key [sha256.Size]byte, e verified) {
	if _, ok := c.cur[key]; !ok && len(c.cur) >= c.half {
		c.prev, c.cur = c.cur, map[[sha256.Size]byte]verified{}
	}
	c.cur[key] = e
}

// len is the number of tokens remembered, for tests.
func (c *tokenCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cur) + len(c.prev)
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

// ValidSubject returns an error saying why sub cannot be a buyer id: it
// must be 1-MaxSubject bytes of UTF-8, without leading or trailing white
// space, without control characters, without format characters (Unicode
// category Cf: zero-width spaces and joiners, bidi controls, the byte
// order mark) and without any space but U+0020 (no-break and other
// spaces, line and paragraph separators). Buyer ids are compared byte for
// byte, so "alice " or "al\u200bice" would be another buyer than "alice"
// while looking the same in every log and admin screen; such ids are
// refused, not cleaned.
func ValidSubject(sub string) error {
	switch {
	case sub == "" || len(sub) > MaxSubject:
		return fmt.Errorf("sub must be 1-%d bytes", MaxSubject)
	case !utf8.ValidString(sub):
		return errors.New("sub must be UTF-8")
	case strings.TrimSpace(sub) != sub:
		return errors.New("sub must not start or end with white space")
	case strings.ContainsFunc(sub, unicode.IsControl):
		return errors.New("sub must not contain control characters")
	case strings.ContainsFunc(sub, invisible):
		return errors.New("sub must not contain format characters or spaces other than U+0020")
	}
	return nil
}

// invisible reports whether r prints as nothing, or as a space that is not
// U+0020: a format character (Cf) or a separator (Zs, Zl, Zp).
func invisible(r rune) bool {
	return r != ' ' && unicode.In(r, unicode.Cf, unicode.Zs, unicode.Zl, unicode.Zp)
}

// Mint returns an HS256 token for buyer, valid for ttl, with iss and aud if
// not empty: for local use, the examples and the load tests. A buyer that
// ValidSubject refuses is an error.
func Mint(secret []byte, buyer string, ttl time.Duration, issuer, audience string) (string, error) {
	if len(secret) < MinSecret {
		return "", fmt.Errorf("auth: the HS256 secret must be at least %d bytes", MinSecret)
	}
	if err := ValidSubject(buyer); err != nil {
		return "", fmt.Errorf("auth: %w", err)
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
