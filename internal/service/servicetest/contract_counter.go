package servicetest

import (
	"context"
	"sync"
	"testing"

	"github.com/seckill/stock/internal/service"
)

// CounterContract is what every service.StockCounter must do, run against
// the Redis counter and MemCounter alike; newCounter returns an empty one
// (every SKU missing).
func CounterContract(t *testing.T, newCounter func(t *testing.T) service.StockCounter) {
	t.Run("take", func(t *testing.T) { counterTake(t, newCounter(t)) })
	t.Run("limit", func(t *testing.T) { counterLimit(t, newCounter(t)) })
	t.Run("guards", func(t *testing.T) { counterGuards(t, newCounter(t)) })
	t.Run("concurrent takes", func(t *testing.T) { counterConcurrent(t, newCounter(t)) })
}

func wantTake(t *testing.T, c service.StockCounter, what, sku, buyer string, q int, want service.Take) service.TakeResult {
	t.Helper()
	got, err := c.Take(context.Background(), sku, buyer, q)
	if err != nil || got.Answer != want {
		t.Fatalf("%s: Take(%s, %s, %d) = %+v, %v; want answer %d", what, sku, buyer, q, got, err, want)
	}
	return got
}

func wantAvailable(t *testing.T, c service.StockCounter, what, sku string, want int64) {
	t.Helper()
	n, ok, err := c.Available(context.Background(), sku)
	if err != nil || !ok || n != want {
		t.Fatalf("%s: Available(%s) = %d, %v, %v; want %d", what, sku, n, ok, err, want)
	}
}

// A missing counter answers TakeMissing; a seeded one gives units while it
// has them, and takes nothing when it has fewer than asked.
func counterTake(t *testing.T, c service.StockCounter) {
	ctx := context.Background()
	wantTake(t, c, "missing", "T", "b1", 1, service.TakeMissing)
	if n, ok, err := c.Available(ctx, "T"); ok || err != nil {
		t.Fatalf("Available of a missing counter = %d, %v, %v; want not ok", n, ok, err)
	}
	if ok, err := c.Seed(ctx, "T", 3, 0); !ok || err != nil {
		t.Fatalf("Seed = %v, %v; want seeded", ok, err)
	}
	wantTake(t, c, "first", "T", "b1", 2, service.Taken)
	wantTake(t, c, "more than left", "T", "b2", 2, service.TakeSoldOut)
	wantAvailable(t, c, "after a refusal", "T", 1)
	wantTake(t, c, "the last", "T", "b2", 1, service.Taken)
	wantTake(t, c, "sold out", "T", "b3", 1, service.TakeSoldOut)
	if ok, err := c.Give(ctx, "T", "b1", 2); !ok || err != nil {
		t.Fatalf("Give = %v, %v; want given", ok, err)
	}
	wantAvailable(t, c, "after a give-back", "T", 2)
	if err := c.Drop(ctx, "T"); err != nil {
		t.Fatal(err)
	}
	wantTake(t, c, "dropped", "T", "b1", 1, service.TakeMissing)
}

// The buyer's count is taken with the units and checked against the
// limit in the same step; a give-back returns it.
func counterLimit(t *testing.T, c service.StockCounter) {
	ctx := context.Background()
	if _, err := c.Seed(ctx, "L", 10, 2); err != nil {
		t.Fatal(err)
	}
	wantTake(t, c, "within", "L", "b1", 2, service.Taken)
	got := wantTake(t, c, "over", "L", "b1", 1, service.TakeOverLimit)
	if got.Limit != 2 || got.Held != 2 {
		t.Fatalf("over the limit = %+v; want limit 2, held 2", got)
	}
	wantAvailable(t, c, "after an over-limit refusal", "L", 8)
	wantTake(t, c, "another buyer", "L", "b2", 2, service.Taken)
	if _, err := c.Give(ctx, "L", "b1", 1); err != nil {
		t.Fatal(err)
	}
	wantTake(t, c, "after b1's give-back", "L", "b1", 1, service.Taken)
	if _, err := c.Give(ctx, "L", "", 1); err != nil { // a return: units only
		t.Fatal(err)
	}
	wantAvailable(t, c, "after a return", "L", 7)
	wantTake(t, c, "a return leaves the buyer's count", "L", "b1", 1, service.TakeOverLimit)
}

// A seed never overwrites, a give-back or a repair never creates, and a
// repair of a counter that moved does nothing.
func counterGuards(t *testing.T, c service.StockCounter) {
	ctx := context.Background()
	if ok, err := c.Give(ctx, "G", "b1", 5); ok || err != nil {
		t.Fatalf("Give to a missing counter = %v, %v; want nothing done", ok, err)
	}
	if ok, err := c.Repair(ctx, "G", 0, 5); ok || err != nil {
		t.Fatalf("Repair of a missing counter = %v, %v; want nothing done", ok, err)
	}
	wantTake(t, c, "still missing", "G", "b1", 1, service.TakeMissing)
	if _, err := c.Seed(ctx, "G", 4, 0); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.Seed(ctx, "G", 100, 0); ok || err != nil {
		t.Fatalf("a second Seed = %v, %v; want nothing done", ok, err)
	}
	wantAvailable(t, c, "seeded twice", "G", 4)
	if ok, err := c.Repair(ctx, "G", 3, 9); ok || err != nil {
		t.Fatalf("Repair expecting 3 of 4 = %v, %v; want nothing done", ok, err)
	}
	if ok, err := c.Repair(ctx, "G", 4, 9); !ok || err != nil {
		t.Fatalf("Repair expecting 4 of 4 = %v, %v; want done", ok, err)
	}
	wantAvailable(t, c, "repaired", "G", 9)
}

// Concurrent takes hand out exactly the units seeded.
func counterConcurrent(t *testing.T, c service.StockCounter) {
	ctx := context.Background()
	if _, err := c.Seed(ctx, "C", 50, 0); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	taken := 0
	for i := range 200 {
		wg.Go(func() {
			got, err := c.Take(ctx, "C", "b"+string(rune('a'+i%26)), 1)
			if err != nil {
				t.Error(err)
				return
			}
			if got.Answer == service.Taken {
				mu.Lock()
				taken++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if taken != 50 {
		t.Fatalf("200 concurrent takes of 50 units took %d", taken)
	}
	wantAvailable(t, c, "after the takes", "C", 0)
}
