// Package setnx is the SKU lock's bare Redis gate: SET key token NX PX.
package setnx

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/skulock/gate"
)

var (
	//go:embed acquire.lua
	acquireSrc string
	//go:embed release.lua
	releaseSrc string

	// AcquireScript is SET KEYS[1] ARGV[1] NX PX ARGV[2] and, when it set,
	// INCR KEYS[2]: it returns the fencing token, or 0 when another token
	// holds the lock (a resend of the same call gets its own token's fence).
	AcquireScript = redis.NewScript(acquireSrc)
	// ReleaseScript deletes KEYS[1] if it holds ARGV[1]: 1 deleted, 0 not.
	ReleaseScript = redis.NewScript(releaseSrc)
)

// Locker is the service.Locker of the bare Redis gate: SET key token NX PX
// lease with a random token, released by a compare-and-delete script (never
// GET then DEL, which frees the next holder's lock when the lease ran out
// between the two). No re-entry, no watchdog, no wake-up on release: a
// waiter polls with a jittered, bounded backoff. It is safe for concurrent
// use; Close waits for its gate.Background clean-up.
type Locker struct {
	rdb    redis.Scripter
	prefix string
	lease  time.Duration // the lease of TryLock's lease 0
	lost   func()
	bg     gate.Background
}

// New returns the SET NX PX locker on rdb. Keys are
// prefix+"setnx:"+gate.Name(sku) (the lock) and prefix+"setnx_fence:"+gate.Name(sku)
// (its fencing counter, which never expires); lease is what TryLock's lease
// 0 means (there is no watchdog); lost, if set, is called once per hold that
// reached its deadline unreleased.
func New(rdb redis.Scripter, prefix string, lease time.Duration, lost func()) *Locker {
	return &Locker{rdb: rdb, prefix: prefix, lease: lease, lost: lost}
}

func (l *Locker) keys(sku string) []string {
	return []string{l.prefix + "setnx:" + gate.Name(sku), l.prefix + "setnx_fence:" + gate.Name(sku)}
}

// TryLock takes sku's lock within wait, for lease (0: the locker's
// default). Errors: service.ErrLockNotObtained (joined with ctx's error
// when ctx ended), or a wrapped Redis error.
func (l *Locker) TryLock(ctx context.Context, sku string, wait, lease time.Duration) (service.Hold, error) {
	if lease <= 0 {
		lease = l.lease
	}
	keys := l.keys(sku)
	token := gate.NewToken()
	return gate.Poll(ctx, wait, func() (service.Hold, bool, error) {
		sent := time.Now()
		fence, err := AcquireScript.Run(ctx, l.rdb, keys, token, lease.Milliseconds()).Int64()
		if err != nil {
			// The SET may have landed with its reply lost: undo it (a
			// compare-and-delete on a token no one else has is harmless).
			l.bg.Run(func() {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), gate.CleanupTimeout)
				defer cancel()
				_ = ReleaseScript.Run(cctx, l.rdb, keys[:1], token).Err()
			})
			return nil, false, fmt.Errorf("setnx: %q: %w", keys[0], err)
		}
		if fence == 0 {
			return nil, false, nil
		}
		release := func(ctx context.Context) (bool, error) {
			n, err := ReleaseScript.Run(ctx, l.rdb, keys[:1], token).Int64()
			if err != nil {
				return false, fmt.Errorf("setnx: unlock %q: %w", keys[0], err)
			}
			return n == 1, nil
		}
		return gate.NewLeaseHold(ctx, sent.Add(lease), fence, l.lost, release), true, nil
	})
}

// Close waits for the clean-up of acquires whose outcome was unknown.
func (l *Locker) Close() error {
	l.bg.Wait()
	return nil
}
