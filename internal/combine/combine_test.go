package combine

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"
)

func newCalls(n int) []*Call[int, int] {
	cs := make([]*Call[int, int], n)
	for i := range cs {
		cs[i] = &Call[int, int]{Ctx: context.Background(), Item: i, done: make(chan struct{})}
	}
	return cs
}

// Calls that leave are skipped, the rest are taken in arrival order, the
// cap counts live calls only, and an idle queue is forgotten.
func TestQueueLeaveTakeAndCap(t *testing.T) {
	cs := newCalls(10_000)
	c := New[int, int](64, len(cs), nil)
	for i, call := range cs {
		ok, lead := c.join("sku", call)
		if !ok || lead != (i == 0) {
			t.Fatalf("join %d = %v, %v; want ok, lead only for the first", i, ok, lead)
		}
	}
	if ok, _ := c.join("sku", newCalls(1)[0]); ok {
		t.Fatal("join past the cap succeeded")
	}
	for i, call := range cs {
		if i%2 == 1 && !c.leave("sku", call) {
			t.Fatalf("leave %d = false; want true (not taken)", i)
		}
	}
	if n := c.Waiting("sku"); n != 5000 {
		t.Fatalf("waiting after 5000 of 10000 left = %d; want 5000", n)
	}
	if ok, _ := c.join("sku", newCalls(1)[0]); !ok {
		t.Fatal("join with 5000 live under a cap of 10000 refused; the cap must not count calls that left")
	}
	want := 0
	for {
		b := c.takeCalls("sku", 64, true)
		if b == nil {
			break
		}
		for _, call := range b {
			if want < 10_000 && call.Item != want {
				t.Fatalf("took call %d; want %d (arrival order, skipping those that left)", call.Item, want)
			}
			if c.leave("sku", call) {
				t.Fatal("a taken call could leave")
			}
			want += 2
		}
	}
	if want != 10_002 {
		t.Fatalf("took up to %d; want every live call", want)
	}
	if n := c.keys(); n != 0 {
		t.Fatalf("%d queues left after the last take; want the idle queue forgotten", n)
	}
}

// Concurrent submissions of one key are served in batches of at most
// batchMax, one batch at a time, and each caller gets its own answer. The
// first batch is held until every other submission waits, so the rest are
// combined however the goroutines are scheduled.
func TestSubmitCombinesAndAnswersEach(t *testing.T) {
	const n, batchMax = 500, 16
	var mu sync.Mutex
	serving, batches := 0, 0
	var c *Combiner[int, int]
	c = New(batchMax, n, func(key string, batch []*Call[int, int]) {
		mu.Lock()
		first := batches == 0
		mu.Unlock()
		for first && c.Waiting(key) < n-len(batch) {
			time.Sleep(time.Millisecond)
		}
		mu.Lock()
		serving++
		batches++
		if serving > 1 || len(batch) > batchMax {
			t.Errorf("%d batches served at once, this one of %d; want one at a time, at most %d", serving, len(batch), batchMax)
		}
		mu.Unlock()
		for _, call := range batch {
			call.Answer(call.Item*2, nil)
		}
		mu.Lock()
		serving--
		mu.Unlock()
	})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if got, err := c.Submit(context.Background(), "hot", i); err != nil || got != 2*i {
				t.Errorf("Submit(%d) = %d, %v; want %d", i, got, err, 2*i)
			}
		})
	}
	wg.Wait()
	if want := 1 + (n-2)/batchMax + 1; batches > want {
		t.Errorf("%d batches for %d submissions; want them combined into at most %d", batches, n, want)
	}
	t.Logf("%d submissions in %d batches", n, batches)
}

// A caller that gives up while waiting gets ErrGaveUp and is never served;
// past the limit, Submit and Alone answer ErrFull at once.
func TestSubmitGiveUpAndFull(t *testing.T) {
	release, entered := make(chan struct{}), make(chan struct{}, 1)
	var mu sync.Mutex
	var served []int
	c := New(8, 2, func(key string, batch []*Call[int, int]) {
		select {
		case entered <- struct{}{}:
			<-release // the first batch waits
		default:
		}
		for _, call := range batch {
			mu.Lock()
			served = append(served, call.Item)
			mu.Unlock()
			call.Answer(call.Item, nil)
		}
	})
	submit := func(ctx context.Context, item int) chan error {
		ch := make(chan error, 1)
		go func() {
			got, err := c.Submit(ctx, "k", item)
			if err == nil && got != item {
				err = errors.New("wrong answer")
			}
			ch <- err
		}()
		return ch
	}
	first := submit(context.Background(), 0)
	<-entered // the leader serves its own call and waits
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := submit(ctx, 1)
	for c.Waiting("k") != 1 {
		runtime.Gosched()
	}
	third := submit(context.Background(), 2)
	for c.Waiting("k") != 2 {
		runtime.Gosched()
	}
	if _, err := c.Submit(context.Background(), "k", 3); !errors.Is(err, ErrFull) {
		t.Errorf("Submit past the limit = %v; want ErrFull", err)
	}
	if _, err := c.Alone(context.Background(), "k", 3); !errors.Is(err, ErrFull) {
		t.Errorf("Alone past the limit = %v; want ErrFull", err)
	}
	cancel()
	if err := <-gaveUp; !errors.Is(err, ErrGaveUp) || !errors.Is(err, context.Canceled) {
		t.Errorf("Submit whose caller gave up = %v; want ErrGaveUp and context.Canceled", err)
	}
	close(release)
	if err := errors.Join(<-first, <-third); err != nil {
		t.Fatalf("the served calls = %v; want their answers", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(served) != 2 || served[0] != 0 || served[1] != 2 {
		t.Fatalf("served %v; want [0 2]: the call that gave up is never served", served)
	}
}

// BenchmarkLeave is the cost of one request giving up while 10,000 of its
// key wait.
func BenchmarkLeave(b *testing.B) {
	const n = 10_000
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		c := New[int, int](64, n, nil)
		cs := newCalls(n)
		for _, call := range cs {
			c.join("sku", call)
		}
		b.StartTimer()
		for _, call := range cs {
			c.leave("sku", call)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/leave")
}

// BenchmarkFull is the cost of refusing a request past the cap.
func BenchmarkFull(b *testing.B) {
	c := New[int, int](64, 2000, nil)
	for _, call := range newCalls(2000) {
		c.join("sku", call)
	}
	extra := newCalls(1)[0]
	b.ReportAllocs()
	for b.Loop() {
		if ok, _ := c.join("sku", extra); ok {
			b.Fatal("joined past the cap")
		}
	}
}
