// Package redissub follows one Redis pub/sub channel for as long as a
// context lasts: it resubscribes after a broken connection, replaces one
// that went silent, and tells its caller each (re)subscription, since
// pub/sub is at-most-once and messages sent in between are lost. The stock
// changes (internal/stockevents) and the refused clients of the
// failed-token count (internal/app) are carried on it.
package redissub

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// PingEvery is how long Follow waits for a message before it pings; a ping
// left unanswered for as long again means a dead connection.
const PingEvery = 5 * time.Second

// Handler is what Follow calls, always from Follow's goroutine; any field
// may be nil.
type Handler struct {
	// Subscribed: a subscription was made or restored; messages published
	// before it may have been missed.
	Subscribed func()
	// Message: one message's payload.
	Message func(payload string)
	// Lost: the connection broke or went silent; no message arrives until
	// the next Subscribed.
	Lost func()
	// Idle: a ping period passed without a message.
	Idle func()
}

// Follow subscribes to channel on rdb and calls h until ctx ends; it
// returns when ctx ends.
func Follow(ctx context.Context, rdb redis.UniversalClient, channel string, h Handler) {
	for ctx.Err() == nil {
		follow(ctx, rdb, channel, h)
	}
}

// follow follows one subscription until ctx ends or it goes silent.
func follow(ctx context.Context, rdb redis.UniversalClient, channel string, h Handler) {
	ps := rdb.Subscribe(ctx, channel)
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()
	defer func() { _ = ps.Close() }()
	call := func(f func()) {
		if f != nil {
			f()
		}
	}
	backoff, pinged := 100*time.Millisecond, false
	for ctx.Err() == nil {
		msg, err := ps.ReceiveTimeout(ctx, PingEvery)
		var ne net.Error
		switch {
		case err == nil:
			backoff, pinged = 100*time.Millisecond, false
		case errors.As(err, &ne) && ne.Timeout():
			call(h.Idle)
			if pinged { // no answer for a whole period: a dead connection
				call(h.Lost)
				return
			}
			_ = ps.Ping(ctx) // a failed ping reconnects and resubscribes
			pinged = true
			continue
		default: // Redis unreachable: the next Receive reconnects
			call(h.Lost)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				call(h.Subscribed)
			}
		case *redis.Message:
			if h.Message != nil {
				h.Message(m.Payload)
			}
		}
	}
}
