package servicetest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill/stock/internal/service"
)

// Errors of the fake lock.
var (
	// ErrLost is a Hold's Err (and its context's cause) once the lock was
	// lost: Lose was called or the fixed lease ran out.
	ErrLost = errors.New("servicetest: lock lost")
	// ErrNotHeld is a Hold's Err once it was unlocked, and Unlock's answer
	// for a hold that was lost or unlocked already.
	ErrNotHeld = errors.New("servicetest: lock not held")
)

// Locker is an in-process service.Locker: one mutex per SKU, taken with the
// wait of a real lock (wait 0: one attempt; < 0: as long as ctx allows),
// fencing tokens that increase with every acquisition of a SKU, and an
// optional fixed lease after which the hold is lost and the SKU free. SetDown
// makes TryLock fail as if Redis did not answer; Hold.Lose loses a held lock.
// It is safe for concurrent use.
type Locker struct {
	mu    sync.Mutex
	skus  map[string]*skuLock
	down  error
	calls atomic.Int64
}

type skuLock struct {
	sem     chan struct{} // holds a token while the SKU is locked
	fence   int64
	holder  *Hold
	waiting int
}

// NewLocker returns a Locker with every SKU free.
func NewLocker() *Locker { return &Locker{skus: make(map[string]*skuLock)} }

var _ service.Locker = (*Locker)(nil)

func (l *Locker) sku(sku string) *skuLock {
	s := l.skus[sku]
	if s == nil {
		s = &skuLock{sem: make(chan struct{}, 1)}
		l.skus[sku] = s
	}
	return s
}

// SetDown makes every TryLock fail at once with err, as a lock whose store
// cannot be asked; nil brings the lock back.
func (l *Locker) SetDown(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = err
}

// Calls returns how many times TryLock was called.
func (l *Locker) Calls() int { return int(l.calls.Load()) }

// Waiting returns how many TryLock calls wait for sku's lock now.
func (l *Locker) Waiting(sku string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sku(sku).waiting
}

// Holder returns sku's current hold, or nil when it is free.
func (l *Locker) Holder(sku string) *Hold {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sku(sku).holder
}

// Lock takes sku's lock, waiting as long as it takes, as another instance
// would; it fails only while the lock is down.
func (l *Locker) Lock(sku string) (*Hold, error) {
	h, err := l.TryLock(context.Background(), sku, -1, 0)
	if err != nil {
		return nil, err
	}
	return h.(*Hold), nil
}

// TryLock takes sku's lock within wait, with a fixed lease when lease > 0
// (none otherwise: the hold lasts until Unlock or Lose). It returns
// service.ErrLockNotObtained when the wait ran out (joined with ctx's error
// when ctx ended first), and SetDown's error while the lock is down.
func (l *Locker) TryLock(ctx context.Context, sku string, wait, lease time.Duration) (service.Hold, error) {
	l.calls.Add(1)
	l.mu.Lock()
	if l.down != nil {
		err := l.down
		l.mu.Unlock()
		return nil, err
	}
	s := l.sku(sku)
	s.waiting++
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		s.waiting--
		l.mu.Unlock()
	}()

	got := false
	select {
	case s.sem <- struct{}{}:
		got = true
	default:
	}
	if !got && wait != 0 {
		var timeout <-chan time.Time
		if wait > 0 {
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case s.sem <- struct{}{}:
			got = true
		case <-timeout:
		case <-ctx.Done():
			return nil, errors.Join(service.ErrLockNotObtained, ctx.Err())
		}
	}
	if !got {
		return nil, service.ErrLockNotObtained
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s.fence++
	hctx, cancel := context.WithCancelCause(context.Background())
	h := &Hold{l: l, s: s, fence: s.fence, ctx: hctx, cancel: cancel}
	if lease > 0 {
		h.deadline = time.Now().Add(lease)
		h.mu.Lock()
		h.timer = time.AfterFunc(lease, func() { h.end(ErrLost) })
		h.mu.Unlock()
	}
	s.holder = h
	return h, nil
}

// Hold is a held lock of a Locker. It is safe for concurrent use.
type Hold struct {
	l        *Locker
	s        *skuLock
	fence    int64
	ctx      context.Context
	cancel   context.CancelCauseFunc
	deadline time.Time // zero: no lease
	mu       sync.Mutex
	timer    *time.Timer // the lease's; nil without one
	state    error       // nil while held; ErrLost or ErrNotHeld once it ended
}

var _ service.Hold = (*Hold)(nil)

// Context is cancelled, with cause ErrLost, when the hold is lost, and with
// context.Canceled when it is unlocked.
func (h *Hold) Context() context.Context { return h.ctx }

// Fence returns the hold's fencing token.
func (h *Hold) Fence() int64 { return h.fence }

// Err returns nil while the lock is held, ErrLost once it was lost (its
// lease deadline passing counts, even before the lease's timer ran) and
// ErrNotHeld once it was unlocked.
func (h *Hold) Err() error {
	if !h.deadline.IsZero() && !time.Now().Before(h.deadline) {
		h.end(ErrLost)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state
}

// Lose loses the lock, as a lapsed lease or a failover would: Err and the
// context report it, and the SKU is free for the next taker.
func (h *Hold) Lose() { h.end(ErrLost) }

// Unlock releases the lock; it returns ErrNotHeld when the hold was lost or
// unlocked already.
func (h *Hold) Unlock(context.Context) error {
	if !h.end(ErrNotHeld) {
		return ErrNotHeld
	}
	return nil
}

// end moves a held lock to state and frees the SKU; it reports whether this
// call ended it.
func (h *Hold) end(state error) bool {
	h.mu.Lock()
	if h.state != nil {
		h.mu.Unlock()
		return false
	}
	h.state = state
	timer := h.timer
	h.mu.Unlock()
	if timer != nil {
		timer.Stop()
	}
	h.l.mu.Lock()
	if h.s.holder == h {
		h.s.holder = nil
	}
	h.l.mu.Unlock()
	<-h.s.sem
	if errors.Is(state, ErrLost) {
		h.cancel(ErrLost)
	} else {
		h.cancel(context.Canceled)
	}
	return true
}
