// Package gate holds what the SKU lock's gates share: the lock name of a
// SKU, the hold of a gate on a lease (fixed, or renewed by etcd's
// watchdog), and the jittered Poll of a gate without wake-ups.
package gate

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill/stock/internal/lock"
	"github.com/seckill/stock/internal/service"
)

var (
	// ErrNotHeld is returned by Unlock of a hold whose lock had expired, was
	// taken over or was already released. It is lock.ErrNotHeld, so one
	// errors.Is covers every gate.
	ErrNotHeld = lock.ErrNotHeld
	// ErrLockLost is the cause of a hold's context (and its Err) once the
	// lock may be held by someone else: when its lease ran out unrenewed,
	// or the store said it is gone. It is lock.ErrLockLost.
	ErrLockLost = lock.ErrLockLost
)

// LeaseHold is a hold on a lease: held until its deadline, measured on
// this process's monotonic clock from just before the acquire was sent
// (minus the drift allowance for redlock), and lost then. The gates
// without a watchdog (setnx, dbtable, redlock) never move the deadline; the
// etcd gate's watchdog moves it with each renewal (Extend) and loses the
// hold when the store says the lease is gone (Lose). Its context is
// cancelled with ErrLockLost by a timer at the deadline, and Err compares
// the clock itself, so a process resumed after a SIGSTOP past the deadline
// sees the loss at its next check even before the late timer has run.
type LeaseHold struct {
	ctx      context.Context
	cancel   context.CancelCauseFunc
	deadline atomic.Pointer[time.Time] // carries the monotonic reading
	fence    int64
	timer    *time.Timer
	release  func(ctx context.Context) (held bool, err error)
	lost     func() // hook, may be nil

	state atomic.Int32 // stateHeld, stateReleased, stateLost
	once  sync.Once    // Unlock takes effect once
}

const (
	stateHeld int32 = iota
	stateReleased
	stateLost
)

// NewLeaseHold returns a hold lost at deadline. The hold's context derives
// from ctx without its cancellation: the caller's request may end while a
// batch it started still writes under the lock.
func NewLeaseHold(ctx context.Context, deadline time.Time, fence int64, lost func(), release func(context.Context) (bool, error)) *LeaseHold {
	h := &LeaseHold{fence: fence, lost: lost, release: release}
	h.deadline.Store(&deadline)
	h.ctx, h.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	h.timer = time.AfterFunc(time.Until(deadline), h.expire)
	return h
}

// Extend moves the deadline of a hold still held to deadline (a renewal
// that succeeded: the etcd gate's watchdog). It never revives a lost hold.
func (h *LeaseHold) Extend(deadline time.Time) {
	if h.state.Load() != stateHeld {
		return
	}
	h.deadline.Store(&deadline)
	h.timer.Reset(time.Until(deadline))
}

// Lose marks the hold lost now (the store said the lease is gone) and
// cancels its context with ErrLockLost; nothing once released.
func (h *LeaseHold) Lose() { h.lose() }

// expire is the timer's: lost if the deadline passed, unless an Extend
// moved it (the timer was then reset).
func (h *LeaseHold) expire() {
	if time.Now().Before(*h.deadline.Load()) {
		return
	}
	h.lose()
}

func (h *LeaseHold) lose() {
	// Not h.timer.Stop(): lose may run on the timer's goroutine before
	// NewLeaseHold has stored it; a timer that fires later finds the state.
	if h.state.CompareAndSwap(stateHeld, stateLost) {
		if h.lost != nil {
			h.lost()
		}
		h.cancel(ErrLockLost)
	}
}

// Context is cancelled with cause ErrLockLost at the lease deadline or on
// Lose, or with context.Canceled once the hold is released.
func (h *LeaseHold) Context() context.Context { return h.ctx }

// Fence is the hold's fencing token (see the package documentation for
// what each gate's token promises).
func (h *LeaseHold) Fence() int64 { return h.fence }

// Err is nil while held, ErrLockLost once the deadline passed, ErrNotHeld
// once released.
func (h *LeaseHold) Err() error {
	if h.state.Load() == stateHeld && !time.Now().Before(*h.deadline.Load()) {
		h.lose()
	}
	switch h.state.Load() {
	case stateLost:
		return ErrLockLost
	case stateReleased:
		return ErrNotHeld
	}
	return nil
}

// Unlock releases the lock if this hold still owns it (a compare-and-delete
// on the hold's token, so it never frees another holder's lock). It returns
// ErrNotHeld when the deadline had passed, the lock was taken over or the
// hold was already unlocked, and the store's error when it could not be
// reached (the lock then expires at its lease).
func (h *LeaseHold) Unlock(ctx context.Context) error {
	err := ErrNotHeld
	h.once.Do(func() {
		expired := h.Err() != nil
		held, rerr := h.release(ctx)
		if h.state.CompareAndSwap(stateHeld, stateReleased) {
			h.timer.Stop()
			h.cancel(context.Canceled)
		}
		switch {
		case rerr != nil:
			err = rerr
		case expired || !held:
			err = ErrNotHeld
		default:
			err = nil
		}
	})
	return err
}

// Poll calls try until it obtains the lock, fails, the wait runs out or ctx
// ends, sleeping a jittered, exponentially growing pause between tries
// (minPoll doubling to maxPoll, never past the end of the wait). try
// reports obtained=false for "held by someone else"; an error ends the
// Poll at once. A wait of 0 tries once.
func Poll[T any](ctx context.Context, wait time.Duration, try func() (T, bool, error)) (T, error) {
	var zero T
	end := time.Now().Add(wait)
	pause := minPoll
	for {
		v, ok, err := try()
		switch {
		case err != nil && ctx.Err() != nil:
			return zero, errors.Join(service.ErrLockNotObtained, ctx.Err())
		case err != nil:
			return zero, err
		case ok:
			return v, nil
		}
		left := time.Until(end)
		if left <= 0 {
			return zero, service.ErrLockNotObtained
		}
		// Full jitter over [pause/2, pause): waiters of one SKU spread out
		// instead of arriving together when the holder lets go.
		d := min(pause/2+rand.N(pause/2), left) //nolint:gosec // G404: Poll jitter, not a secret; nothing to guess
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return zero, errors.Join(service.ErrLockNotObtained, ctx.Err())
		case <-t.C:
		}
		pause = min(2*pause, maxPoll)
	}
}

// The bounds of the pause between polls of a held lock. A batch holds a
// SKU lock for a few milliseconds, so the first retries come soon; the cap
// keeps a waiter that lost many rounds from sleeping through free turns.
const (
	minPoll = 2 * time.Millisecond
	maxPoll = 32 * time.Millisecond
)

// Background runs clean-up that must outlive the call that started it (the
// undo of an acquire whose outcome is unknown); Close waits for it.
type Background struct{ wg sync.WaitGroup }

// Run runs f on a goroutine of b's.
func (b *Background) Run(f func()) {
	b.wg.Add(1)
	go func() { defer b.wg.Done(); f() }()
}

// Wait waits for every f that Run started.
func (b *Background) Wait() { b.wg.Wait() }

// CleanupTimeout bounds one clean-up call (an undo, or a release on
// Unlock's own context being already done).
const CleanupTimeout = time.Second

// Name is the lock of sku: "stock:{<sku>}" (the braces keep the lock's
// companion keys in one Redis Cluster slot).
func Name(sku string) string { return "stock:{" + sku + "}" }

// NewToken returns 128 random bits in hex: a hold's identity in the store.
func NewToken() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
