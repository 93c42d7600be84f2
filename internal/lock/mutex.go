package lock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"
)

// Mutex is a named lock (Redisson's RLock). It holds no state of its own:
// ownership is in the context of a Hold, so goroutines sharing one *Mutex but
// not a hold context exclude each other. It is safe for concurrent use.
type Mutex struct {
	c       *Client
	name    string
	token   string
	channel string
	line    string // list of waiting client ids, first in line first
	timeout string // zset: each waiting client's deadline
	latch   string // prefix of the unlock latch keys

	fairLine, fairTimeouts string // RedissonFairLock's line of threads, read on release

	acquireKeys []string
}

// Name returns the lock name (the Redis key of the lock hash).
func (m *Mutex) Name() string { return m.name }

// Lock waits until it holds the lock, with a watchdog lease, or until ctx ends.
// When ctx carries a live hold of this lock (a hold's Context, or a context
// derived from it) Lock re-enters it instead. It returns ErrNotObtained joined
// with ctx.Err() when ctx ended first, ErrClosed after Client.Close, and a
// wrapped Redis error when Redis could not be asked.
func (m *Mutex) Lock(ctx context.Context) (*Hold, error) {
	return m.acquire(ctx, -1, 0)
}

// TryLock is Lock with a bound on the wait and an optional fixed lease. wait
// == 0 makes one attempt; wait < 0 waits as long as ctx allows. lease <= 0
// means a watchdog lease; lease > 0 sets a fixed lease that is never renewed,
// after which the lock lapses even if not unlocked (Redisson's rule); on
// re-entry the chain's lease applies. It returns ErrNotObtained when the wait
// ran out, plus the errors of Lock.
func (m *Mutex) TryLock(ctx context.Context, wait, leaseDur time.Duration) (*Hold, error) {
	return m.acquire(ctx, wait, leaseDur)
}

// State reports whether the lock is held by anyone and its remaining TTL
// (-1 when the key has no TTL). It returns a wrapped Redis error on failure.
func (m *Mutex) State(ctx context.Context) (locked bool, ttl time.Duration, err error) {
	d, err := m.c.rdb.PTTL(ctx, m.name).Result()
	if err != nil {
		return false, 0, fmt.Errorf("lock: state %q: %w", m.name, err)
	}
	if d == -2 || d == -2*time.Millisecond {
		return false, 0, nil
	}
	return true, d, nil
}

// ForceUnlock deletes the lock whoever holds it and wakes its waiters. It
// reports whether a lock was held. The holder's context is cancelled with
// ErrLockLost at its next renewal (or its deadline, for a fixed lease).
//
// It reads the owner, then deletes the lock only if that owner still holds
// it (a compare-and-set), so a resend of the delete after a lost reply can
// never remove a lock that a waiter took meanwhile. If the owner changed
// between the read and the delete, it reads again, a few times at most. It
// returns a wrapped Redis error on failure.
func (m *Mutex) ForceUnlock(ctx context.Context) (bool, error) {
	call := m.c.nextOwner() // unique per call: names the latch of a resend
	latch := m.latch + "force:" + call
	for range 4 {
		owners, err := m.c.rdb.HKeys(ctx, m.name).Result()
		if err != nil {
			return false, fmt.Errorf("lock: force unlock %q: %w", m.name, err)
		}
		if len(owners) == 0 {
			return false, nil
		}
		n, err := m.c.forceCall(ctx, []string{m.name, m.channel, latch, m.fairLine, m.fairTimeouts}, owners[0], call)
		if err != nil {
			return false, fmt.Errorf("lock: force unlock %q: %w", m.name, err)
		}
		if n == 1 {
			return true, nil
		}
	}
	return false, fmt.Errorf("lock: force unlock %q: the owner kept changing", m.name)
}

func (m *Mutex) acquire(ctx context.Context, wait, leaseDur time.Duration) (*Hold, error) {
	if err := ctx.Err(); err != nil {
		return nil, errors.Join(ErrNotObtained, err)
	}
	if l := m.heldIn(ctx); l != nil {
		return l.reenter(ctx)
	}
	c := m.c
	owner := c.nextOwner()
	dur, watchdog := leaseDur, false
	if dur <= 0 {
		dur, watchdog = c.watchdog, true
	}
	if wait == 0 {
		h, _, err := m.attempt(ctx, owner, dur, watchdog, 0)
		if err == nil && h == nil {
			err = ErrNotObtained
		}
		return h, err
	}

	var deadline time.Time
	if wait > 0 {
		deadline = time.Now().Add(wait)
	}
	// Fast path: when no waiter of this Client is in line for the lock, try
	// at once; that overtakes no one here, and the line in Redis guards the
	// other clients' turn.
	fastBusy := false
	if !c.hasLine(m.name) {
		h, _, err := m.attempt(ctx, owner, dur, watchdog, lineEntryTTL)
		if err != nil || h != nil {
			return h, err
		}
		fastBusy = true
	}
	return m.waitInLine(ctx, owner, dur, watchdog, deadline, fastBusy)
}

// heldIn returns the lease of this lock that ctx carries (a hold's context,
// or one derived from it), or nil.
func (m *Mutex) heldIn(ctx context.Context) *lease {
	for l, _ := ctx.Value(leaseKey{}).(*lease); l != nil; l = l.parent {
		if l.c == m.c && l.name == m.name {
			return l
		}
	}
	return nil
}

// busy is the answer to an attempt on a held lock: the longest sleep before
// looking again, and how many unlocks go to clients ahead in line (-1:
// unknown).
type busy struct {
	wait time.Duration
	skip int64
}

// attempt runs the acquire script once. It returns a hold when acquired, the
// holder's PTTL when busy, or an error. An attempt whose reply was lost or
// unreadable is undone, so an error never leaves a hold behind.
func (m *Mutex) attempt(ctx context.Context, owner string, dur time.Duration, watchdog bool, inLine time.Duration) (*Hold, busy, error) {
	c := m.c
	sent := c.now()
	res, err := acquireScript.Run(ctx, c.rdb, m.acquireKeys, msArg(dur), owner, msArg(inLine)).Result()
	var fence int64
	if err == nil {
		switch v := res.(type) {
		case int64: // a plain PTTL, as Redisson's script answers
			return nil, busy{wait: time.Duration(v) * time.Millisecond, skip: -1}, nil
		case []any:
			if len(v) == 1 {
				if f, ok := v[0].(int64); ok {
					fence = f
					break
				}
			}
			if len(v) == 2 {
				w, ok1 := v[0].(int64)
				p, ok2 := v[1].(int64)
				if ok1 && ok2 {
					return nil, busy{wait: time.Duration(w) * time.Millisecond, skip: p}, nil
				}
			}
			err = fmt.Errorf("unexpected reply %v", res)
		default:
			err = fmt.Errorf("unexpected reply %T %v", res, res)
		}
	}
	if err != nil {
		m.undoAcquire(ctx, owner, dur, sent, err)
		return nil, busy{}, acquireErr(ctx, m.name, err)
	}
	l := newLease(ctx, m, owner, fence, dur, watchdog, sent)
	if err := c.register(l); err != nil {
		l.end(stateLost)
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), compensateTimeout)
		// Best effort: the Client is closed, so nothing could retry it, and
		// the lease lapses on its own.
		_, _ = m.releaseCall(uctx, owner, fence, 1, dur)
		cancel()
		return nil, busy{}, err
	}
	return &Hold{l: l}, busy{}, nil
}

// undoAcquire releases owner after an acquire whose outcome is unknown.
// go-redis reports the error of its last try only: a first send may have run
// in Redis and lost its reply, and a resend then failed to dial. So whatever
// the error, the acquire may have landed, and it is undone (a compare-and-set
// on an owner minted for this one call: a no-op when it never landed). The
// undo runs at once, unless the last try could not even dial (Redis is
// unreachable now: waiting a second for the same answer helps no one), and
// then in the background until it is answered or the lease it could have
// set has lapsed anyway.
func (m *Mutex) undoAcquire(ctx context.Context, owner string, dur, sent time.Duration, err error) {
	if !dialFailed(err) {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), compensateTimeout)
		_, uerr := m.releaseCall(uctx, owner, 0, 1, dur)
		cancel()
		if uerr == nil {
			return
		}
	}
	m.c.retryRelease(m, owner, 0, 1, dur, sent+dur)
}

// dialFailed reports an error from a try that could not connect to Redis.
func dialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func acquireErr(ctx context.Context, name string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return errors.Join(ErrNotObtained, ctxErr)
	}
	return fmt.Errorf("lock: acquire %q: %w", name, err)
}

// releaseCall runs the release script for owner, expecting count want. fence
// is the chain's fencing token (0 when unknown); it names the unlock latch,
// which holds owner, so a short key tells a resend apart.
func (m *Mutex) releaseCall(ctx context.Context, owner string, fence, want int64, dur time.Duration) (int64, error) {
	var buf [128]byte // on the stack for names of usual length
	latch := string(strconv.AppendInt(append(buf[:0], m.latch...), fence, 10))
	keys := []string{m.name, m.channel, latch, m.fairLine, m.fairTimeouts}
	if m.c.sharded(ctx) {
		return releaseScript.Run(ctx, m.c.rdb, keys, msArg(dur), owner, want, latchMsArg, spublishArg).Int64()
	}
	return releaseScript.Run(ctx, m.c.rdb, keys, msArg(dur), owner, want, latchMsArg).Int64()
}

// forceCall runs the force unlock script: it deletes the lock if owner holds
// it and remembers call in the latch.
func (c *Client) forceCall(ctx context.Context, keys []string, owner, call string) (int64, error) {
	if c.sharded(ctx) {
		return forceScript.Run(ctx, c.rdb, keys, owner, call, latchMsArg, spublishArg).Int64()
	}
	return forceScript.Run(ctx, c.rdb, keys, owner, call, latchMsArg).Int64()
}

var (
	latchMsArg   any = latchTTL.Milliseconds()
	spublishArg  any = "1" // last argument of a publishing script: SPUBLISH as well as PUBLISH
	commonMsArgs     = map[time.Duration]any{}
	commonMsMu   sync.RWMutex
)

// msArg is d in milliseconds as a script argument, boxed once per distinct
// duration (leases are few: the watchdog timeout and the fixed leases used).
func msArg(d time.Duration) any {
	commonMsMu.RLock()
	v, ok := commonMsArgs[d]
	commonMsMu.RUnlock()
	if ok {
		return v
	}
	commonMsMu.Lock()
	defer commonMsMu.Unlock()
	if len(commonMsArgs) > 64 {
		return d.Milliseconds() // many distinct leases: do not grow without bound
	}
	v = d.Milliseconds()
	commonMsArgs[d] = v
	return v
}
