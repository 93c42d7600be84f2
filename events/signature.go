package events

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// The headers of a webhook POST.
const (
	HeaderID        = "Stock-Event-Id"
	HeaderSignature = "Stock-Signature"
)

// MinSecretLen is the shortest webhook secret the service accepts.
const MinSecretLen = 32

// Sign returns the Stock-Signature header of body sent at t:
// "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>" keyed by secret>".
func Sign(secret string, body []byte, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

// The errors of Verify.
var (
	ErrBadSignature = errors.New("events: signature does not match")
	ErrStale        = errors.New("events: signature timestamp outside the tolerance")
	ErrMalformed    = errors.New("events: malformed Stock-Signature header")
)

// Verify checks a webhook's Stock-Signature header against the raw body
// and the secret, and that its timestamp is within tolerance of now (0:
// any time). Several v1 values may be given (a secret being rotated): one
// match is enough. It returns nil, ErrMalformed, ErrStale or
// ErrBadSignature. Verify the raw bytes received, before any decoding.
func Verify(secret, header string, body []byte, tolerance time.Duration) error {
	var ts string
	var sigs [][]byte
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		switch {
		case !ok:
			return ErrMalformed
		case k == "t":
			ts = v
		case k == "v1":
			sig, err := hex.DecodeString(v)
			if err != nil {
				return ErrMalformed
			}
			sigs = append(sigs, sig)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return ErrMalformed
	}
	if tolerance > 0 {
		if age := time.Since(time.Unix(sec, 0)); age > tolerance || age < -tolerance {
			return ErrStale
		}
	}
	want := mac(secret, ts, body)
	for _, sig := range sigs {
		if hmac.Equal(sig, want) {
			return nil
		}
	}
	return ErrBadSignature
}

// mac is HMAC-SHA256 of "<ts>.<body>" keyed by secret.
func mac(secret, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}
