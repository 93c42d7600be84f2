package stockcounter_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/service/servicetest"
	"github.com/seckill/stock/internal/stockcounter"
	"github.com/seckill/stock/internal/testserver"
)

// shared is a counter on the shared Redis, under a prefix of its own.
func shared(t *testing.T) (*stockcounter.Counter, *redis.Client) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: testserver.SharedRedis})
	prefix := "test:" + uuid.NewString() + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := rdb.Keys(ctx, prefix+"*").Result()
		if len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
		_ = rdb.Close()
	})
	return stockcounter.New(rdb, prefix), rdb
}

// The Redis counter keeps the contract MemCounter's unit tests rely on.
func TestContract(t *testing.T) {
	t.Parallel()
	servicetest.CounterContract(t, func(t *testing.T) service.StockCounter {
		c, _ := shared(t)
		return c
	})
}

// The counter is one hash at "<prefix>stock:counter:{<sku>}", so an
// operator can find it: the units left, the limit and each buyer's units.
func TestKeyAndLayout(t *testing.T) {
	t.Parallel()
	c, rdb := shared(t)
	ctx := context.Background()
	if _, err := c.Seed(ctx, "SKU-9", 5, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Take(ctx, "SKU-9", "alice", 2); err != nil {
		t.Fatal(err)
	}
	key := c.Key("SKU-9")
	got, err := rdb.HGetAll(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if got["available"] != "3" || got["limit"] != "2" || got["b:alice"] != "2" || len(got) != 3 {
		t.Fatalf("HGETALL %s = %v; want available 3, limit 2, b:alice 2", key, got)
	}
}

// A Redis that cannot be asked is an error, never an answer.
func TestRedisDown(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c := stockcounter.New(rdb, "")
	if got, err := c.Take(context.Background(), "X", "b", 1); err == nil {
		t.Fatalf("Take with Redis down = %+v, nil; want an error", got)
	}
	if _, _, err := c.Available(context.Background(), "X"); err == nil {
		t.Fatal("Available with Redis down = nil error")
	}
}
