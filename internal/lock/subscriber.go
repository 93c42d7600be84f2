package lock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// subscriber holds a Client's pub/sub connections, shared by all its
// waiters: a channel is subscribed while a line of waiters needs it, and a
// connection is closed when no channel is left on it. There is one
// connection for plain SUBSCRIBE, and, on a cluster with sharded pub/sub, one
// per hash slot waited on for SSUBSCRIBE (go-redis binds a sharded
// connection to the node serving the slot of its first channel, so channels
// of different slots cannot share one).
type subscriber struct {
	c      *Client
	mu     sync.Mutex // serializes SUBSCRIBE and UNSUBSCRIBE, so they reach Redis in order
	refs   map[string]*subRef
	conns  map[int]*subConn // by hash slot; plainConn for the plain connection
	closed bool
}

// plainConn is the key in subscriber.conns of the connection for SUBSCRIBE.
const plainConn = -1

// subRef is one subscribed channel: its waiting lines and its connection.
type subRef struct {
	n    int
	conn int // key in subscriber.conns
}

type subConn struct {
	ps    *redis.PubSub
	n     int         // channels subscribed on it for waiters
	idle  *time.Timer // closes the connection after idleClose without channels
	gen   int         // invalidates an idle timer that fired late
	shard bool
	// pin is the last channel of an idle sharded connection, left subscribed
	// until the connection is used again or closed: a sharded go-redis PubSub
	// that reconnects without any channel dials a random node, and the next
	// SSUBSCRIBE there would be refused (MOVED).
	pin string
}

const (
	subscribeTimeout = time.Second
	// idleClose keeps a connection (with no channel subscribed) for a moment
	// after the last waiter on it left, so a lock that is waited for again
	// and again does not dial a connection each time.
	idleClose = 250 * time.Millisecond
)

func (s *subscriber) subscribe(channel string) {
	ctx, cancel := context.WithTimeout(context.Background(), subscribeTimeout)
	defer cancel()
	shard := s.c.sharded(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if r := s.refs[channel]; r != nil {
		r.n++
		return
	}
	if s.refs == nil {
		s.refs = make(map[string]*subRef)
		s.conns = make(map[int]*subConn)
	}
	key := plainConn
	if shard {
		key = slot(channel)
	}
	s.refs[channel] = &subRef{n: 1, conn: key}
	// On error go-redis keeps the channel and subscribes again when it
	// reconnects; meanwhile waiters fall back on looking at the lock again.
	sc := s.conns[key]
	switch {
	case sc == nil:
		// Subscribe before the receiving goroutine starts: it dials at once,
		// and a sharded PubSub dials the node serving the slot of its first
		// channel, or a random node when it has none yet.
		sc = &subConn{shard: shard}
		if shard {
			sc.ps = s.c.rdb.(*redis.ClusterClient).SSubscribe(ctx, channel)
		} else {
			sc.ps = s.c.rdb.Subscribe(ctx, channel)
		}
		s.conns[key] = sc
		ch := sc.ps.ChannelWithSubscriptions(redis.WithChannelSize(256))
		s.c.wg.Add(1)
		go s.dispatch(ch)
	case shard:
		// Subscribed again even when it is the pinned channel, for the
		// confirmation the waiters count on.
		_ = sc.ps.SSubscribe(ctx, channel)
		if sc.pin != "" && sc.pin != channel {
			_ = sc.ps.SUnsubscribe(ctx, sc.pin)
		}
		sc.pin = ""
	default:
		_ = sc.ps.Subscribe(ctx, channel)
	}
	if sc.idle != nil {
		sc.idle.Stop()
		sc.idle = nil
		sc.gen++
	}
	sc.n++
}

func (s *subscriber) unsubscribe(channel string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.refs[channel]
	if s.closed || r == nil {
		return
	}
	r.n--
	if r.n > 0 {
		return
	}
	delete(s.refs, channel)
	sc := s.conns[r.conn]
	if sc == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), subscribeTimeout)
	defer cancel()
	switch {
	case sc.shard && sc.n == 1:
		sc.pin = channel // see subConn.pin; closing the connection drops it
	case sc.shard:
		_ = sc.ps.SUnsubscribe(ctx, channel)
	default:
		_ = sc.ps.Unsubscribe(ctx, channel)
	}
	sc.n--
	if sc.n == 0 {
		key, gen := r.conn, sc.gen
		sc.idle = time.AfterFunc(idleClose, func() { s.closeIdle(key, sc, gen) })
	}
}

// closeIdle drops a connection and its goroutines when no one has waited on
// it since the timer was set.
func (s *subscriber) closeIdle(key int, sc *subConn, gen int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns[key] != sc || gen != sc.gen || sc.n != 0 {
		return
	}
	_ = sc.ps.Close()
	delete(s.conns, key)
}

func (s *subscriber) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sc := range s.conns {
		if sc.idle != nil {
			sc.idle.Stop()
		}
		sc.gen++
		_ = sc.ps.Close()
	}
	s.conns = nil
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
			if m.Kind == "subscribe" || m.Kind == "ssubscribe" {
				s.c.poke(m.Channel, false)
			}
		}
	}
}

// Whether the Client publishes and subscribes sharded (Client.shard).
const (
	shardUnknown int32 = iota
	shardOff
	shardOn
)

// sharded reports whether unlock messages go by sharded pub/sub too: only
// on a cluster that answers PUBSUB SHARDNUMSUB (Redis 7+), as Redisson
// decides by default, and never with WithClassicPubSub. The answer is asked once, the first time a channel is
// needed or a publishing script runs, and kept; when Redis could not be asked
// (a network error, ctx ended) this call answers no and the next one asks
// again.
func (c *Client) sharded(ctx context.Context) bool {
	if !c.cluster || c.classicPubSub {
		return false
	}
	switch c.shard.Load() {
	case shardOn:
		return true
	case shardOff:
		return false
	}
	c.shardMu.Lock()
	defer c.shardMu.Unlock()
	if v := c.shard.Load(); v != shardUnknown {
		return v == shardOn
	}
	ctx, cancel := context.WithTimeout(ctx, subscribeTimeout)
	defer cancel()
	err := c.rdb.PubSubShardNumSub(ctx).Err()
	if err == nil {
		c.shard.Store(shardOn)
		return true
	}
	if noSuchCommand(err) {
		c.shard.Store(shardOff)
	}
	return false
}

// noSuchCommand tells an error reply that will not change (an unknown
// subcommand before Redis 7, a command an ACL denies) from a network error
// or a passing state of the server (LOADING, CLUSTERDOWN, TRYAGAIN, ...).
func noSuchCommand(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	return strings.HasPrefix(msg, "ERR ") || strings.HasPrefix(msg, "NOPERM ")
}
