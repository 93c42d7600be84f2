package app

import (
	"crypto/subtle"
	"errors"
	"fmt"
)

// MinToken is the shortest admin or payment token serve accepts, in bytes:
// what `openssl rand -hex 32` prints is twice that.
const MinToken = 32

// ErrWeakSecret is wrapped by CheckSecrets' errors.
var ErrWeakSecret = errors.New("app: weak secret")

// shippedSecrets are the secret values this repository's files carry or
// have carried (deployment placeholders, development defaults, the
// secrets of its tests and load runs). Anyone can read them, so serve
// refuses every one of them; the list only grows.
var shippedSecrets = []string{
	"change-me",
	"change-me-too",
	"dev-admin-token",
	"dev-payment-token",
	"change-me-to-at-least-32-random-bytes",
	"dev-jwt-secret-change-me-0123456789",
	"secret",
	"admin-secret",
	"admin-token",
	"jwt-secret",
	"test-admin-token",
	"test-payment-token",
	"chaos-pay",
	"tok",
	"t0ken",
	"load-test-jwt-secret-not-for-production",
	"test-jwt-secret-of-at-least-32-bytes!",
	"cmd-test-jwt-secret-at-least-32-bytes",
	"auth-test-secret-at-least-32-bytes-long",
	"composecheck-jwt-secret-0123456789abcdef",
	"another-secret-of-at-least-32-bytes!!",
	"another-secret-at-least-32-bytes-long!!",
}

// goodSecretHint says how to make a secret serve accepts.
const goodSecretHint = "make one with `openssl rand -hex 32`"

// CheckSecrets returns an error wrapping ErrWeakSecret, naming the
// variable, when a set admin or payment token is shorter than MinToken
// bytes, or when either token, the JWT secret or the webhook's secret is a
// value this repository ships or has shipped. An empty token is not
// checked: its routes are off.
func (c Auth) CheckSecrets(webhookSecret string) error {
	for _, s := range []struct{ name, value string }{
		{"STOCK_ADMIN_TOKEN", c.AdminToken},
		{"STOCK_PAYMENT_TOKEN", c.PaymentToken},
		{"STOCK_JWT_SECRET", c.JWTSecret},
		{"STOCK_WEBHOOK_SECRET", webhookSecret},
	} {
		if s.value == "" {
			continue
		}
		if shipped(s.value) {
			return fmt.Errorf("%w: %s is a value published in this repository; %s", ErrWeakSecret, s.name, goodSecretHint)
		}
		if (s.name == "STOCK_ADMIN_TOKEN" || s.name == "STOCK_PAYMENT_TOKEN") && len(s.value) < MinToken {
			return fmt.Errorf("%w: %s must be at least %d bytes; %s", ErrWeakSecret, s.name, MinToken, goodSecretHint)
		}
	}
	return nil
}

// shipped reports whether v is one of shippedSecrets.
func shipped(v string) bool {
	for _, s := range shippedSecrets {
		if subtle.ConstantTimeCompare([]byte(v), []byte(s)) == 1 {
			return true
		}
	}
	return false
}
