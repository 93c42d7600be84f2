package skulock

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/service"
)

var (
	//go:embed setnx_acquire.lua
	setnxAcquireSrc string
	//go:embed setnx_release.lua
	setnxReleaseSrc string

	setnxAcquire = redis.NewScript(setnxAcquireSrc)
	setnxRelease = redis.NewScript(setnxReleaseSrc)
)

// SetNX is the service.Locker of the bare Redis gate: SET key token NX PX
// lease with a random token, released by a compare-and-delete script (never
// GET then DEL, which frees the next holder's lock when the lease ran out
// between the two). No re-entry, no watchdog, no wake-up on release: a
// waiter polls with a jittered, bounded backoff. It is safe for concurrent
// use; Close waits for its background clean-up.
type SetNX struct {
	rdb    redis.Scripter
	prefix string
	lease  time.Duration // the lease of TryLock's lease 0
	lost   func()
	bg     background
}

// NewSetNX returns the SET NX PX locker on rdb. Keys are
// prefix+"setnx:"+Name(sku) (the lock) and prefix+"setnx_fence:"+Name(sku)
// (its fencing counter, which never expires); lease is what TryLock's lease
// 0 means (there is no watchdog); lost, if set, is called once per hold that
// reached its deadline unreleased.
func NewSetNX(rdb redis.Scripter, prefix string, lease time.Duration, lost func()) *SetNX {
	return &SetNX{rdb: rdb, prefix: prefix, lease: lease, lost: lost}
}

func (l *SetNX) keys(sku string) []string {
	return []string{l.prefix + "setnx:" + Name(sku), l.prefix + "setnx_fence:" + Name(sku)}
}

// TryLock takes sku's lock within wait, for lease (0: the locker's
// default). Errors: service.ErrLockNotObtained (joined with ctx's error
// when ctx ended), or a wrapped Redis error.
func (l *SetNX) TryLock(ctx context.Context, sku string, wait, lease time.Duration) (service.Hold, error) {
	if lease <= 0 {
		lease = l.lease
	}
	keys := l.keys(sku)
	token := newToken()
	return poll(ctx, wait, func() (service.Hold, bool, error) {
		sent := time.Now()
		fence, err := setnxAcquire.Run(ctx, l.rdb, keys, token, lease.Milliseconds()).Int64()
		if err != nil {
			// The SET may have landed with its reply lost: undo it (a
			// compare-and-delete on a token no one else has is harmless).
			l.bg.run(func() {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
				defer cancel()
				_ = setnxRelease.Run(cctx, l.rdb, keys[:1], token).Err()
			})
			return nil, false, fmt.Errorf("skulock: setnx %q: %w", keys[0], err)
		}
		if fence == 0 {
			return nil, false, nil
		}
		release := func(ctx context.Context) (bool, error) {
			n, err := setnxRelease.Run(ctx, l.rdb, keys[:1], token).Int64()
			if err != nil {
				return false, fmt.Errorf("skulock: setnx unlock %q: %w", keys[0], err)
			}
			return n == 1, nil
		}
		return newLeaseHold(ctx, sent.Add(lease), fence, l.lost, release), true, nil
	})
}

// Close waits for the clean-up of acquires whose outcome was unknown.
func (l *SetNX) Close() error {
	l.bg.wait()
	return nil
}

// newToken returns 128 random bits in hex: a hold's identity in the store.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
