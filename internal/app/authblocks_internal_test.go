package app

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/testserver"
)

// commandCounter counts the commands a client sends.
type commandCounter struct{ n atomic.Int64 }

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); return next(ctx, cmd) }
}
func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.n.Add(int64(len(cmds))); return next(ctx, cmds) }
}

// listening starts th's Listen until the test ends and waits until its
// list is live.
func listening(t *testing.T, th *authThrottle) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); th.Listen(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "the list to be live", th.blocks.live.Load)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("no %s within 5 s", what)
		}
	}
}

// Instances share the refusals without a read per right token: a right
// token of a client nobody refused costs no command; a client refused at
// one instance is refused at another (which heard it, or read the set when
// it subscribed), right token or not, until its count's window ends.
func TestAuthBlocksShared(t *testing.T) {
	a := newTestThrottle(t, testserver.SharedRedis, 3, time.Minute, true)
	counter := &commandCounter{}
	rdbB := redis.NewClient(&redis.Options{Addr: testserver.SharedRedis})
	rdbB.AddHook(counter)
	t.Cleanup(func() { _ = rdbB.Close() })
	b := newAuthThrottle(rdbB, a.prefix[:len(a.prefix)-len("authfail:")], 3, time.Minute, true, nil)
	t.Cleanup(func() { _ = rdbB.Del(context.Background(), a.setKey(), a.channel()).Err() })
	listening(t, a)
	listening(t, b)

	before := counter.n.Load()
	for range 10 {
		if d, err := b.Check(t.Context(), "k", false); err != nil || !d.Allowed {
			t.Fatalf("a right token of a clear client = %+v, %v; want allowed", d, err)
		}
	}
	if n := counter.n.Load() - before; n != 0 {
		t.Fatalf("10 right tokens of a clear client sent %d commands; want 0", n)
	}
	for i := range 3 {
		if d, err := a.Check(t.Context(), "k", true); err != nil || !d.Allowed {
			t.Fatalf("failure %d of 3 at a = %+v, %v; want answered", i+1, d, err)
		}
	}
	waitFor(t, "refusal heard at b", func() bool { return !b.blocks.clear("k") })
	if d, err := b.Check(t.Context(), "k", false); err != nil || d.Allowed || d.RetryAfter <= 0 {
		t.Fatalf("a right token at b of a client refused at a = %+v, %v; want refused with RetryAfter", d, err)
	}

	late := newAuthThrottle(rdbB, a.prefix[:len(a.prefix)-len("authfail:")], 3, time.Minute, true, nil)
	listening(t, late)
	if late.blocks.clear("k") {
		t.Fatal("an instance that subscribed after the refusal does not know it; want it read from the set")
	}

	if err := rdbB.Del(t.Context(), a.prefix+"k").Err(); err != nil { // the window ends early
		t.Fatal(err)
	}
	if d, err := b.Check(t.Context(), "k", false); err != nil || !d.Allowed {
		t.Fatalf("a right token after the window ended = %+v, %v; want allowed", d, err)
	}
	if !b.blocks.clear("k") {
		t.Fatal("a client whose window ended is still on b's list; want it dropped")
	}
}
