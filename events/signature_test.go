package events_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill/stock/events"
)

const (
	secret    = "0123456789abcdef0123456789abcdef"
	newSecret = "fedcba9876543210fedcba9876543210"
	tolerance = 5 * time.Minute
)

var body = []byte(`{"id":"ev-1"}`)

func TestSignVector(t *testing.T) {
	// Worked out independently: HMAC-SHA256 of `1764669600.{"id":"ev-1"}`
	// keyed by secret. The half second is dropped: t is whole seconds.
	at := time.Unix(1764669600, 500_000_000)
	want := "t=1764669600,v1=1f8ef48b6c50bb8a20116938d8cb77a7f34490d8a992bd9befce2bd3f6bcaefb"
	if got := events.Sign(secret, body, at); got != want {
		t.Errorf("Sign(secret, %s, %v) = %q; want %q", body, at, got, want)
	}
}

func TestVerifyRoundTrip(t *testing.T) {
	for _, b := range [][]byte{body, {}, []byte(strings.Repeat("x", 1<<16))} {
		h := events.Sign(secret, b, time.Now())
		if err := events.Verify(secret, h, b, tolerance); err != nil {
			t.Errorf("Verify(Sign(%.20q)) = %v; want nil", b, err)
		}
	}
}

// withT returns header with its timestamp replaced by sec, the v1 kept.
func withT(header string, sec int64) string {
	_, v1, _ := strings.Cut(header, ",")
	return "t=" + strconv.FormatInt(sec, 10) + "," + v1
}

// v1 returns the v1 part of header.
func v1(header string) string {
	_, v, _ := strings.Cut(header, ",")
	return v
}

func TestVerify(t *testing.T) {
	now := time.Now()
	good := events.Sign(secret, body, now)
	ts := "t=" + strconv.FormatInt(now.Unix(), 10)
	hex64 := strings.Repeat("ab", 32)
	tests := []struct {
		name      string
		secret    string
		header    string
		body      []byte
		tolerance time.Duration
		want      error
	}{
		{"signed now", secret, good, body, tolerance, nil},
		{"spaces after commas", secret, strings.ReplaceAll(good, ",", ", "), body, tolerance, nil},
		{"changed body", secret, good, []byte(`{"id":"ev-2"}`), tolerance, events.ErrBadSignature},
		{"body with a byte more", secret, good, append([]byte(`{"id":"ev-1"}`), ' '), tolerance, events.ErrBadSignature},
		{"wrong secret", newSecret, good, body, tolerance, events.ErrBadSignature},
		{"timestamp changed, signature kept", secret, withT(good, now.Unix()-1), body, tolerance, events.ErrBadSignature},
		{"v1 of another body", secret, ts + ",v1=" + hex64, body, tolerance, events.ErrBadSignature},
		{"v1 cut short", secret, good[:len(good)-2], body, tolerance, events.ErrBadSignature},
		// An empty v1 is valid hex for no bytes, which match nothing.
		{"empty v1", secret, ts + ",v1=", body, tolerance, events.ErrBadSignature},

		{"stale", secret, events.Sign(secret, body, now.Add(-tolerance-time.Minute)), body, tolerance, events.ErrStale},
		{"future", secret, events.Sign(secret, body, now.Add(tolerance+time.Minute)), body, tolerance, events.ErrStale},
		{"old, within tolerance", secret, events.Sign(secret, body, now.Add(-tolerance+time.Minute)), body, tolerance, nil},
		{"ahead, within tolerance", secret, events.Sign(secret, body, now.Add(tolerance-time.Minute)), body, tolerance, nil},
		{"tolerance 0, years old", secret, events.Sign(secret, body, time.Unix(946684800, 0)), body, 0, nil},
		{"tolerance 0, years ahead", secret, events.Sign(secret, body, now.AddDate(10, 0, 0)), body, 0, nil},
		{"tolerance 0 still checks the signature", newSecret, events.Sign(secret, body, time.Unix(946684800, 0)), body, 0, events.ErrBadSignature},
		// Stale is decided before the signature: an old header is refused
		// as stale whoever signed it.
		{"stale and wrong secret", newSecret, events.Sign(secret, body, now.Add(-time.Hour)), body, tolerance, events.ErrStale},

		{"empty", secret, "", body, tolerance, events.ErrMalformed},
		{"garbage", secret, "garbage", body, tolerance, events.ErrMalformed},
		{"missing t", secret, v1(good), body, tolerance, events.ErrMalformed},
		{"missing v1", secret, ts, body, tolerance, events.ErrMalformed},
		{"bad hex", secret, ts + ",v1=" + strings.Repeat("zz", 32), body, tolerance, events.ErrMalformed},
		{"odd hex", secret, ts + ",v1=abc", body, tolerance, events.ErrMalformed},
		{"t not a number", secret, "t=yesterday," + v1(good), body, tolerance, events.ErrMalformed},
		{"t empty", secret, "t=," + v1(good), body, tolerance, events.ErrMalformed},
		{"a part without =", secret, good + ",junk", body, tolerance, events.ErrMalformed},
		{"semicolons", secret, strings.ReplaceAll(good, ",", ";"), body, tolerance, events.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := events.Verify(tt.secret, tt.header, tt.body, tt.tolerance)
			if !errors.Is(err, tt.want) {
				t.Errorf("Verify(%q, %s, %v) = %v; want %v", tt.header, tt.body, tt.tolerance, err, tt.want)
			}
		})
	}
}

// A secret being rotated: the sender signs with both, and a receiver
// holding either (or both) accepts.
func TestVerifyRotation(t *testing.T) {
	now := time.Now()
	header := events.Sign(secret, body, now) + "," + v1(events.Sign(newSecret, body, now))
	for _, s := range []string{secret, newSecret} {
		if err := events.Verify(s, header, body, tolerance); err != nil {
			t.Errorf("Verify(%q) with one of its two v1 values matching = %v; want nil", header, err)
		}
	}
	other := strings.Repeat("z", events.MinSecretLen)
	if err := events.Verify(other, header, body, tolerance); !errors.Is(err, events.ErrBadSignature) {
		t.Errorf("Verify(%q) with neither v1 matching = %v; want %v", header, err, events.ErrBadSignature)
	}
	// A bad v1 makes the whole header malformed, even beside a good one.
	bad := header + ",v1=nothex"
	if err := events.Verify(secret, bad, body, tolerance); !errors.Is(err, events.ErrMalformed) {
		t.Errorf("Verify(%q) = %v; want %v", bad, err, events.ErrMalformed)
	}
}
