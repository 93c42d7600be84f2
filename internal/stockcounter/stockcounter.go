// Package stockcounter keeps a SKU's stock as a counter in Redis, in front of
// MySQL: the design most flash-sale systems use (the counter strategies of
// internal/service). One hash per SKU, at "<prefix>stock:counter:{<sku>}",
// holds the units left ("available"), the per-buyer limit ("limit", 0:
// none) and each buyer's units ("b:<buyer>"); every change is one Lua
// script, so a take checks and decrements the stock and the buyer's count
// together.
//
// The counter is not the stock: Redis replication is asynchronous and a
// restart without persistence forgets it. The service seeds it from MySQL,
// gives back what MySQL refused and repairs drift; the scripts give it the
// guards that makes safe: a seed never overwrites a counter, a give-back
// or a repair never creates one.
package stockcounter

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/service"
)

// Counter is the counters of one deployment in one Redis. It implements
// service.StockCounter and is safe for concurrent use.
type Counter struct {
	rdb    redis.UniversalClient
	prefix string
}

// New returns the counters of rdb; prefix separates deployments sharing a
// Redis, as the lock's does.
func New(rdb redis.UniversalClient, prefix string) *Counter {
	return &Counter{rdb: rdb, prefix: prefix}
}

// Key is the Redis key of sku's counter.
func (c *Counter) Key(sku string) string { return c.prefix + "stock:counter:{" + sku + "}" }

func buyerField(buyer string) string { return "b:" + buyer }

// takeSrc: KEYS[1] the counter; ARGV[1] the buyer's field, ARGV[2] units.
// {0} missing, {1} taken, {2} not enough left, {3, limit, held} over the
// buyer's limit.
const takeSrc = `
local avail = redis.call('HGET', KEYS[1], 'available')
if not avail then return {0} end
local q = tonumber(ARGV[2])
if tonumber(avail) < q then return {2} end
local limit = tonumber(redis.call('HGET', KEYS[1], 'limit') or '0')
local held = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if limit > 0 and held + q > limit then return {3, limit, held} end
redis.call('HINCRBY', KEYS[1], 'available', -q)
redis.call('HINCRBY', KEYS[1], ARGV[1], q)
return {1}
`

// giveSrc: KEYS[1] the counter; ARGV[1] the buyer's field ("" for none),
// ARGV[2] units. 0 missing (nothing done), 1 given back.
const giveSrc = `
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local q = tonumber(ARGV[2])
redis.call('HINCRBY', KEYS[1], 'available', q)
if ARGV[1] ~= '' then
  local had = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
  if had <= q then redis.call('HDEL', KEYS[1], ARGV[1]) else redis.call('HINCRBY', KEYS[1], ARGV[1], -q) end
end
return 1
`

// seedSrc: KEYS[1] the counter; ARGV[1] available, ARGV[2] the limit.
// 0 it existed (nothing done), 1 seeded.
const seedSrc = `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'available', ARGV[1], 'limit', ARGV[2])
return 1
`

// repairSrc: KEYS[1] the counter; ARGV[1] the available count expected,
// ARGV[2] the one to set. 0 missing or moved (nothing done), 1 set.
const repairSrc = `
local avail = redis.call('HGET', KEYS[1], 'available')
if not avail or avail ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'available', ARGV[2])
return 1
`

var (
	takeScript   = redis.NewScript(takeSrc)
	giveScript   = redis.NewScript(giveSrc)
	seedScript   = redis.NewScript(seedSrc)
	repairScript = redis.NewScript(repairSrc)
)

// Take takes q units of sku for buyer when the counter has them and the
// buyer stays within its limit, both in one step.
func (c *Counter) Take(ctx context.Context, sku, buyer string, q int) (service.TakeResult, error) {
	r, err := takeScript.Run(ctx, c.rdb, []string{c.Key(sku)}, buyerField(buyer), q).Int64Slice()
	switch {
	case err != nil:
		return service.TakeResult{}, fmt.Errorf("stockcounter: take: %w", err)
	case len(r) == 0:
		return service.TakeResult{}, errors.New("stockcounter: take: an empty reply")
	}
	switch r[0] {
	case 1:
		return service.TakeResult{Answer: service.Taken}, nil
	case 2:
		return service.TakeResult{Answer: service.TakeSoldOut}, nil
	case 3:
		if len(r) == 3 {
			return service.TakeResult{Answer: service.TakeOverLimit, Limit: r[1], Held: r[2]}, nil
		}
	}
	return service.TakeResult{Answer: service.TakeMissing}, nil
}

// Give gives q units back to sku's counter, and to buyer's count unless
// buyer is ""; a missing counter stays missing (false).
func (c *Counter) Give(ctx context.Context, sku, buyer string, q int64) (bool, error) {
	field := ""
	if buyer != "" {
		field = buyerField(buyer)
	}
	n, err := giveScript.Run(ctx, c.rdb, []string{c.Key(sku)}, field, q).Int()
	if err != nil {
		return false, fmt.Errorf("stockcounter: give back: %w", err)
	}
	return n == 1, nil
}

// Seed creates sku's counter with available units and the per-buyer limit,
// unless it exists (false): of two instances seeding at once, one seeds.
func (c *Counter) Seed(ctx context.Context, sku string, available, limit int64) (bool, error) {
	n, err := seedScript.Run(ctx, c.rdb, []string{c.Key(sku)}, available, limit).Int()
	if err != nil {
		return false, fmt.Errorf("stockcounter: seed: %w", err)
	}
	return n == 1, nil
}

// Repair sets sku's available count to to if it is still expect (false
// when it moved or the counter is missing): a repair never undoes a take
// it did not see.
func (c *Counter) Repair(ctx context.Context, sku string, expect, to int64) (bool, error) {
	n, err := repairScript.Run(ctx, c.rdb, []string{c.Key(sku)}, expect, to).Int()
	if err != nil {
		return false, fmt.Errorf("stockcounter: repair: %w", err)
	}
	return n == 1, nil
}

// Available returns sku's available count, or ok false when the counter is
// missing.
func (c *Counter) Available(ctx context.Context, sku string) (n int64, ok bool, err error) {
	n, err = c.rdb.HGet(ctx, c.Key(sku), "available").Int64()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("stockcounter: read: %w", err)
	}
	return n, true, nil
}

// Drop deletes sku's counter (a restock seeds it again).
func (c *Counter) Drop(ctx context.Context, sku string) error {
	if err := c.rdb.Del(ctx, c.Key(sku)).Err(); err != nil {
		return fmt.Errorf("stockcounter: drop: %w", err)
	}
	return nil
}
