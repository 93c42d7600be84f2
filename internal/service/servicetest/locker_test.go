package servicetest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/service/servicetest"
)

// The fake lock excludes, waits and times out like the real one, numbers
// each acquisition with a larger fence, fails while down, and reports a
// lost hold through Err and its context.
func TestLocker(t *testing.T) {
	ctx := context.Background()
	l := servicetest.NewLocker()
	h1, err := l.TryLock(ctx, "A", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryLock(ctx, "A", 0, 0); !errors.Is(err, service.ErrLockNotObtained) {
		t.Fatalf("TryLock(held, wait 0) = %v; want ErrLockNotObtained", err)
	}
	if _, err := l.TryLock(ctx, "A", 20*time.Millisecond, 0); !errors.Is(err, service.ErrLockNotObtained) {
		t.Fatalf("TryLock(held, wait 20ms) = %v; want ErrLockNotObtained", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.TryLock(cctx, "A", time.Second, 0); !errors.Is(err, service.ErrLockNotObtained) || !errors.Is(err, context.Canceled) {
		t.Fatalf("TryLock(held, ctx cancelled) = %v; want ErrLockNotObtained joined with context.Canceled", err)
	}
	hb, err := l.TryLock(ctx, "B", 0, 0)
	if err != nil {
		t.Fatalf("TryLock of another SKU while A is held = %v", err)
	}
	_ = hb.Unlock(ctx)

	got := make(chan service.Hold, 1)
	go func() {
		h, err := l.TryLock(ctx, "A", -1, 0)
		if err != nil {
			t.Error(err)
		}
		got <- h
	}()
	for l.Waiting("A") != 1 {
		time.Sleep(time.Millisecond)
	}
	if err := h1.Unlock(ctx); err != nil || !errors.Is(h1.Err(), servicetest.ErrNotHeld) {
		t.Fatalf("Unlock = %v, then Err = %v; want nil, ErrNotHeld", err, h1.Err())
	}
	if err := h1.Unlock(ctx); !errors.Is(err, servicetest.ErrNotHeld) {
		t.Fatalf("second Unlock = %v; want ErrNotHeld", err)
	}
	h2 := <-got
	if h2.Fence() <= h1.Fence() || l.Holder("A") == nil {
		t.Fatalf("fences %d then %d; want increasing, and A held", h1.Fence(), h2.Fence())
	}

	l.Holder("A").Lose()
	if !errors.Is(h2.Err(), servicetest.ErrLost) || !errors.Is(context.Cause(h2.Context()), servicetest.ErrLost) {
		t.Fatalf("after Lose: Err = %v, context cause = %v; want ErrLost", h2.Err(), context.Cause(h2.Context()))
	}
	if !errors.Is(h2.Unlock(ctx), servicetest.ErrNotHeld) {
		t.Fatal("Unlock of a lost hold succeeded; want ErrNotHeld")
	}
	h3, err := l.TryLock(ctx, "A", 0, 30*time.Millisecond)
	if err != nil {
		t.Fatalf("TryLock after the hold was lost = %v; want the SKU free", err)
	}
	time.Sleep(40 * time.Millisecond)
	if !errors.Is(h3.Err(), servicetest.ErrLost) {
		t.Fatalf("Err past a 30ms lease = %v; want ErrLost", h3.Err())
	}

	down := errors.New("redis: connection refused")
	l.SetDown(down)
	if _, err := l.TryLock(ctx, "A", time.Second, 0); !errors.Is(err, down) || errors.Is(err, service.ErrLockNotObtained) {
		t.Fatalf("TryLock while down = %v; want the down error, not ErrLockNotObtained", err)
	}
	l.SetDown(nil)
	h4, err := l.TryLock(ctx, "A", 0, 0)
	if err != nil || h4.Fence() <= h3.Fence() {
		t.Fatalf("TryLock after the lock came back = %v (fence %d after %d)", err, h4.Fence(), h3.Fence())
	}
	_ = h4.Unlock(ctx)
	if n := l.Calls(); n != 9 {
		t.Fatalf("Calls = %d; want 9", n)
	}
}
