package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

const (
	stateHeld int32 = iota
	stateReleased
	stateLost
)

// lease is one acquisition chain: the owner field in Redis, its reentry count
// and its local deadline. Every Hold of the chain shares it.
type lease struct {
	c        *Client
	m        *Mutex
	name     string
	owner    string
	fence    int64
	dur      time.Duration // lease set on every acquire, re-entry and renewal
	watchdog bool
	parent   *lease // the hold this one was acquired under, for re-entry lookup
	turns    int    // consecutive local hand-offs that led to this chain

	ctx    *holdCtx
	cancel context.CancelCauseFunc

	// op serializes the script calls that change the count, so each one knows
	// the count it compares against.
	op    sync.Mutex
	count int64

	state    atomic.Int32
	deadline atomic.Int64 // Client.now() in ns after which the lease may have lapsed
	// gone is set by a renewal that found the owner gone from Redis while a
	// re-entry or Unlock of the chain was in flight; that call's own outcome
	// then decides, and an outcome that is unknown counts as lost.
	gone atomic.Bool

	smu   sync.Mutex // guards timer and state transitions
	timer *time.Timer
}

func newLease(ctx context.Context, m *Mutex, owner string, fence int64, dur time.Duration, watchdog bool, sent time.Duration) *lease {
	l := &lease{c: m.c, m: m, name: m.name, owner: owner, fence: fence, dur: dur, watchdog: watchdog, count: 1}
	l.parent, _ = ctx.Value(leaseKey{}).(*lease)
	inner, cancel := context.WithCancelCause(ctx)
	l.ctx = &holdCtx{Context: inner, l: l}
	l.cancel = cancel
	l.deadline.Store(int64(sent + dur))
	l.smu.Lock() // the timer may fire before AfterFunc returns
	l.timer = time.AfterFunc(dur-(l.c.now()-sent), l.checkDeadline)
	l.smu.Unlock()
	return l
}

// expired says whether the local deadline has passed; it then marks the lease lost.
func (l *lease) expired() bool {
	if l.state.Load() != stateHeld {
		return l.state.Load() == stateLost
	}
	if l.c.now() < time.Duration(l.deadline.Load()) {
		return false
	}
	l.lose()
	return true
}

func (l *lease) checkDeadline() {
	l.smu.Lock()
	if l.state.Load() != stateHeld {
		l.smu.Unlock()
		return
	}
	if left := time.Duration(l.deadline.Load()) - l.c.now(); left > 0 {
		l.timer.Reset(left)
		l.smu.Unlock()
		return
	}
	l.smu.Unlock()
	l.lose()
}

// extend moves the deadline to sent+dur after Redis confirmed a lease set at
// sent. It reports false when the lease is no longer held, including when its
// old deadline passed before the confirmation arrived: once the lease may have
// lapsed, it stays lost.
func (l *lease) extend(sent time.Duration) bool {
	if l.expired() {
		return false
	}
	l.smu.Lock()
	defer l.smu.Unlock()
	if l.state.Load() != stateHeld {
		return false
	}
	if d := int64(sent + l.dur); d > l.deadline.Load() {
		l.deadline.Store(d)
	}
	return true
}

// lose marks the lease lost and cancels its context with ErrLockLost. It
// reports whether this call made the transition.
func (l *lease) lose() bool {
	if !l.end(stateLost) {
		return false
	}
	if l.c.hooks.Lost != nil {
		l.c.hooks.Lost(l.name)
	}
	l.cancel(ErrLockLost)
	return true
}

// release marks the lease fully released and cancels its context.
func (l *lease) release() {
	if l.end(stateReleased) {
		l.cancel(context.Canceled)
	}
}

func (l *lease) end(to int32) bool {
	l.smu.Lock()
	ok := l.state.CompareAndSwap(stateHeld, to)
	if ok {
		l.timer.Stop()
	}
	l.smu.Unlock()
	if ok {
		l.c.unregister(l)
	}
	return ok
}

// reenter adds one level to the chain.
func (l *lease) reenter(ctx context.Context) (*Hold, error) {
	l.op.Lock()
	defer l.op.Unlock()
	if l.expired() || l.state.Load() != stateHeld {
		return nil, errors.Join(ErrNotObtained, ErrLockLost)
	}
	sent := l.c.now()
	v, err := reenterScript.Run(ctx, l.c.rdb, []string{l.name}, l.dur.Milliseconds(), l.owner, l.count).Int64()
	switch {
	case err != nil:
		// The increment may have landed; undo it if it did (a compare-and-set
		// against count+1 is a no-op when it did not). An undo that finds the
		// owner gone, or that cannot be sent after a renewal found it gone,
		// means the lock was lost: say so now, not at the next renewal.
		if v, uerr := l.undo(ctx, l.count+1); (uerr == nil && v == 0) || (uerr != nil && l.gone.Load()) {
			l.lose()
		}
		return nil, acquireErr(ctx, l.name, err)
	case v == 0:
		l.lose()
		return nil, errors.Join(ErrNotObtained, ErrLockLost)
	case v < 0:
		return nil, fmt.Errorf("lock: re-enter %q: reentry count out of step", l.name)
	}
	l.count = v
	l.extend(sent)
	return &Hold{l: l}, nil
}

// undo releases one level whose acquisition had an unknown outcome and
// returns the release script's answer. When it cannot be sent, Redis may keep
// one level more than the chain counts; Unlock then finds the count out of
// step and releases the owner fully.
func (l *lease) undo(ctx context.Context, want int64) (int64, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), compensateTimeout)
	defer cancel()
	return l.m.releaseCall(ctx, l.owner, l.fence, want, l.dur)
}

// drop deletes the lock if this chain's owner still holds it, whatever its
// count (a compare-and-set on the owner), and wakes the waiters. It is the
// way out when Redis holds a count the chain did not see; when Redis does not
// answer, it goes on in the background while the lease could be alive.
func (l *lease) drop(ctx context.Context) error {
	call := l.owner + ":drop"
	keys := []string{l.name, l.m.channel, l.m.latch + "force:" + call, l.m.fairLine, l.m.fairTimeouts}
	f := func(ctx context.Context) error {
		_, err := l.c.forceCall(ctx, keys, l.owner, call)
		return err
	}
	err := f(ctx)
	if err != nil {
		l.c.retry(time.Duration(l.deadline.Load())+l.dur, f)
	}
	return err
}

// Hold is one acquisition of a lock: a fresh acquire or a re-entry. It is
// safe for concurrent use; Unlock takes effect once.
type Hold struct {
	l    *lease
	done atomic.Bool
}

// Context returns the context for the critical section. It carries the
// ownership (m.Lock(h.Context()) re-enters, in any goroutine), and it is
// cancelled with cause ErrLockLost (see context.Cause) when the lock is lost,
// or with context.Canceled once the chain is fully released. Its Err method
// also checks the lease deadline, so calling it before each step of the
// critical section notices a lapse at once, even right after a process pause.
// All holds of one chain share this context.
func (h *Hold) Context() context.Context { return h.l.ctx }

// Fence returns the fencing token of the chain: a number INCR'd in Redis on
// every fresh acquire of this lock name and shared by its re-entries. A store
// that remembers the largest token it accepted can reject a stale holder.
func (h *Hold) Fence() int64 { return h.l.fence }

// Err reports the state of the chain: nil while it is held, ErrLockLost once
// ownership was lost (or its lease deadline passed), ErrNotHeld once it was
// fully released. Unlike Context().Err() it does not depend on the context
// the lock was taken with, so it is the check to make just before a write.
func (h *Hold) Err() error {
	if h.l.expired() {
		return ErrLockLost
	}
	switch h.l.state.Load() {
	case stateLost:
		return ErrLockLost
	case stateReleased:
		return ErrNotHeld
	}
	return nil
}

// Name returns the lock name.
func (h *Hold) Name() string { return h.l.name }

// Unlock releases this hold: one reentry level, or the lock when it is the
// last. It returns ErrNotHeld when the lock expired, was taken over or this
// hold was already unlocked, and a wrapped Redis error when Redis could not
// be reached (the lease then lapses on its own: renewal stops).
// Pass a context that outlives the request, e.g. context.WithoutCancel.
func (h *Hold) Unlock(ctx context.Context) error {
	if !h.done.CompareAndSwap(false, true) {
		return ErrNotHeld
	}
	l := h.l
	l.op.Lock()
	defer l.op.Unlock()
	if l.state.Load() == stateReleased {
		return ErrNotHeld
	}
	sent := l.c.now()
	if l.count == 1 && l.turns < maxLocalTurns-1 {
		if w := l.c.claimHead(l.name); w != nil {
			return l.handOff(ctx, w, sent)
		}
	}
	v, err := l.m.releaseCall(ctx, l.owner, l.fence, l.count, l.dur)
	switch {
	case err != nil:
		// Redis did not answer (a failover, a restart): keep trying in the
		// background while the lease could still be alive, so the lock does
		// not sit out its whole lease on a server that is back.
		deadline := time.Duration(l.deadline.Load())
		l.lose()
		l.c.retryRelease(l.m, l.owner, l.fence, l.count, l.dur, deadline)
		return fmt.Errorf("lock: unlock %q: %w", l.name, err)
	case v == 1:
		l.count--
		l.extend(sent)
		return nil
	case v == 2:
		l.count = 0
		l.release()
		return nil
	case v == 0:
		l.lose()
		return ErrNotHeld
	default:
		// Redis holds more levels than the chain counts: a re-entry landed
		// but its reply was lost and its undo could not be sent. Release the
		// owner fully rather than leave the lock held for a lease. For the
		// outermost hold that is just the release asked for.
		outer := l.count == 1
		if outer {
			l.count = 0
			l.release()
		} else {
			l.lose()
		}
		if err := l.drop(ctx); err != nil {
			return fmt.Errorf("lock: unlock %q: %w", l.name, err)
		}
		if outer {
			return nil
		}
		return fmt.Errorf("lock: unlock %q: reentry count out of step; the chain was released", l.name)
	}
}

type leaseKey struct{}

// holdCtx carries the lease for re-entry and checks its deadline in Err.
type holdCtx struct {
	context.Context
	l *lease
}

func (c *holdCtx) Value(key any) any {
	if key == (leaseKey{}) {
		return c.l
	}
	return c.Context.Value(key)
}

func (c *holdCtx) Err() error {
	c.l.expired()
	return c.Context.Err()
}

func (c *holdCtx) String() string { return "lock.Hold(" + c.l.name + ").Context" }
