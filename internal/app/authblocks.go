package app

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/redissub"
)

// Refused clients, told to every instance. The failed-token count lives in
// Redis; a client is refused once its count reaches the limit. Every
// failure at or past the limit adds the client to a set in Redis and
// publishes it, and every instance keeps what it heard in authBlocks. While
// an instance's subscription is up (and it has read the set since it last
// subscribed), a right token of a client it has not heard of is answered
// without reading the count; a client it has heard of is checked against
// the count itself, so a window shortened or ended is seen at once. A
// refusal reaches the other instances within the message's delivery; while
// the subscription is down, every check reads the count.

// authBlocks is what this instance knows of the refused clients: each
// until the end of its window. Safe for concurrent use.
type authBlocks struct {
	mu    sync.Mutex
	until map[string]time.Time
	live  atomic.Bool // subscribed, and the set read since: nothing missed
}

// add records key refused for ttl from now.
func (b *authBlocks) add(key string, ttl time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.until[key] = time.Now().Add(ttl)
}

// drop forgets key.
func (b *authBlocks) drop(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.until, key)
}

// clear reports whether key may be let through without reading its count:
// the list is live and key is not on it (or its window has ended).
func (b *authBlocks) clear(key string) bool {
	if !b.live.Load() {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	until, ok := b.until[key]
	if ok && !time.Now().Before(until) {
		delete(b.until, key)
		ok = false
	}
	return !ok
}

// prune forgets the clients whose window has ended.
func (b *authBlocks) prune() {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	for k, until := range b.until {
		if !now.Before(until) {
			delete(b.until, k)
		}
	}
}

// channel and setKey are where refusals are published and kept (a sorted
// set of clients by the end of their window, in Unix milliseconds).
func (t *authThrottle) channel() string { return t.prefix + "blocked" }
func (t *authThrottle) setKey() string  { return t.prefix + "blocked:set" }

// noteCount updates this instance's list from a count read or raised by a
// check of key: at the limit the client is refused for ttl, and every
// failure from then on tells every instance (again: one lost message is
// made good by the next failure); below it, the client is cleared.
func (t *authThrottle) noteCount(ctx context.Context, key string, n int64, ttl time.Duration, failed bool) {
	if n < t.limit {
		t.blocks.drop(key)
		return
	}
	t.blocks.add(key, ttl)
	if failed {
		t.announce(context.WithoutCancel(ctx), key, ttl)
	}
}

// announce adds key to the set of refused clients (the set kept a window,
// its ended entries trimmed) and publishes it with the rest of its window.
// Best effort: an instance that misses it reads the count only for failed
// tokens, which the count still refuses, until the client's next failure.
func (t *authThrottle) announce(ctx context.Context, key string, ttl time.Duration) {
	now := time.Now()
	_, _ = t.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRemRangeByScore(ctx, t.setKey(), "-inf", strconv.FormatInt(now.UnixMilli(), 10))
		p.ZAdd(ctx, t.setKey(), redis.Z{Score: float64(now.Add(ttl).UnixMilli()), Member: key})
		p.PExpire(ctx, t.setKey(), t.window)
		p.Publish(ctx, t.channel(), strconv.FormatInt(ttl.Milliseconds(), 10)+" "+key)
		return nil
	})
}

// load reads the set of refused clients and records those whose count is
// still at the limit, for the rest of their window.
func (t *authThrottle) load(ctx context.Context) error {
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	keys, err := t.rdb.ZRangeByScore(ctx, t.setKey(), &redis.ZRangeBy{Min: "(" + now, Max: "+inf"}).Result()
	if err != nil || len(keys) == 0 {
		return err
	}
	counts := make([]*redis.StringCmd, len(keys))
	ttls := make([]*redis.DurationCmd, len(keys))
	if _, err := t.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			counts[i], ttls[i] = p.Get(ctx, t.prefix+k), p.PTTL(ctx, t.prefix+k)
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	for i, k := range keys {
		n, _ := counts[i].Int64()
		if ttl := ttls[i].Val(); n >= t.limit && ttl > 0 {
			t.blocks.add(k, ttl)
		}
	}
	return nil
}

// Listen keeps this instance's list of refused clients from what the
// others publish until ctx ends. The list is live only while a
// subscription is up and the set has been read since it was made.
func (t *authThrottle) Listen(ctx context.Context) {
	defer t.blocks.live.Store(false)
	subscribed := false
	load := func() {
		if subscribed && !t.blocks.live.Load() && t.load(ctx) == nil {
			t.blocks.live.Store(true)
		}
	}
	redissub.Follow(ctx, t.rdb, t.channel(), redissub.Handler{
		Subscribed: func() {
			t.blocks.live.Store(false) // messages may have been missed: read the set again
			subscribed = true
			load()
		},
		Message: func(payload string) {
			ms, key, ok := strings.Cut(payload, " ")
			if n, err := strconv.ParseInt(ms, 10, 64); ok && err == nil {
				t.blocks.add(key, time.Duration(n)*time.Millisecond)
			}
			load()
		},
		Lost: func() {
			t.blocks.live.Store(false)
			subscribed = false
		},
		Idle: func() {
			t.blocks.prune()
			load() // a read of the set that failed is tried again
		},
	})
}
