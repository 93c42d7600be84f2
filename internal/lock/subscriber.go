package lock

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// subscriber is a Client's one pub/sub connection, shared by all its waiters:
// a channel is subscribed while a queue of waiters needs it, and the
// connection is closed when no channel is left.
type subscriber struct {
	c      *Client
	mu     sync.Mutex // serializes SUBSCRIBE and UNSUBSCRIBE, so they reach Redis in order
	ps     *redis.PubSub
	refs   map[string]int
	closed bool
	idle   *time.Timer // closes the connection after idleClose without waiters
	gen    int         // invalidates an idle timer that fired late
}

const (
	subscribeTimeout = time.Second
	// idleClose keeps the connection (with no channel subscribed) for a
	// moment after the last waiter left, so a lock that is waited for again
	// and again does not dial a connection each time.
	idleClose = 250 * time.Millisecond
)

func (s *subscriber) subscribe(channel string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if s.refs == nil {
		s.refs = make(map[string]int)
	}
	if s.idle != nil {
		s.idle.Stop()
		s.idle = nil
		s.gen++
	}
	s.refs[channel]++
	if s.refs[channel] > 1 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), subscribeTimeout)
	defer cancel()
	if s.ps == nil {
		s.ps = s.c.rdb.Subscribe(ctx)
		ch := s.ps.ChannelWithSubscriptions(redis.WithChannelSize(256))
		s.c.wg.Add(1)
		go s.dispatch(ch)
	}
	// On error go-redis keeps the channel and subscribes again when it
	// reconnects; meanwhile waiters fall back on the holder's PTTL.
	_ = s.ps.Subscribe(ctx, channel)
}

func (s *subscriber) unsubscribe(channel string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.refs[channel]--
	if s.refs[channel] > 0 {
		return
	}
	delete(s.refs, channel)
	if s.ps == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), subscribeTimeout)
	defer cancel()
	_ = s.ps.Unsubscribe(ctx, channel)
	if len(s.refs) == 0 {
		gen := s.gen
		s.idle = time.AfterFunc(idleClose, func() { s.closeIdle(gen) })
	}
}

// closeIdle drops the connection and its goroutines when no one has waited
// since the timer was set.
func (s *subscriber) closeIdle(gen int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.gen || len(s.refs) != 0 || s.ps == nil {
		return
	}
	_ = s.ps.Close()
	s.ps = nil
	s.idle = nil
}

func (s *subscriber) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idle != nil {
		s.idle.Stop()
		s.idle = nil
	}
	s.gen++
	if s.ps != nil {
		_ = s.ps.Close()
		s.ps = nil
	}
	s.refs = nil
	s.closed = true
}

// dispatch wakes the waiters of a channel on each unlock message, and on each
// subscribe confirmation (the first, and after a reconnect, when messages may
// have been missed).
func (s *subscriber) dispatch(ch <-chan any) {
	defer s.c.wg.Done()
	for msg := range ch {
		switch m := msg.(type) {
		case *redis.Message:
			s.c.poke(m.Channel, true)
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				s.c.poke(m.Channel, false)
			}
		}
	}
}
