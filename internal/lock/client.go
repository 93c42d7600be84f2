package lock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

var (
	// ErrNotObtained is returned by Lock and TryLock when the wait ran out. When
	// the caller's context ended it is joined with ctx.Err().
	ErrNotObtained = errors.New("lock: not obtained")
	// ErrNotHeld is returned by Unlock for a hold that expired, was taken over
	// or was already fully released (Redisson's IllegalMonitorStateException).
	ErrNotHeld = errors.New("lock: not held")
	// ErrLockLost is the cause of a hold's context when ownership was lost.
	ErrLockLost = errors.New("lock: lost")
	// ErrClosed is returned by a Client after Close.
	ErrClosed = errors.New("lock: client closed")
)

var (
	//go:embed acquire.lua
	acquireSrc string
	//go:embed reenter.lua
	reenterSrc string
	//go:embed release.lua
	releaseBody string
	//go:embed wakefair.lua
	wakeFairSrc string
	releaseSrc  = wakeFairSrc + releaseBody
	//go:embed renew.lua
	renewSrc string
	//go:embed force.lua
	forceBody string
	forceSrc  = wakeFairSrc + forceBody
	//go:embed leave.lua
	leaveSrc string
	//go:embed transfer.lua
	transferSrc string

	acquireScript  = redis.NewScript(acquireSrc)
	reenterScript  = redis.NewScript(reenterSrc)
	releaseScript  = redis.NewScript(releaseSrc)
	renewScript    = redis.NewScript(renewSrc)
	forceScript    = redis.NewScript(forceSrc)
	leaveScript    = redis.NewScript(leaveSrc)
	transferScript = redis.NewScript(transferSrc)
)

// latchTTL is how long a full release is remembered, so that a resend of the
// same release call is answered "released" rather than "not held".
const latchTTL = 10 * time.Second

// compensateTimeout bounds the clean-up of an acquire whose outcome is unknown.
const compensateTimeout = time.Second

// Hooks receive what the lock observes, for metrics. Each func may be nil and
// must be fast and safe for concurrent use.
type Hooks struct {
	// Renewed reports one watchdog script call: holds renewed, holds found lost,
	// and the call's error (nil on success; then renewed+lost is the batch size).
	Renewed func(renewed, lost int, err error)
	// Lost reports a hold of the named lock whose ownership was lost.
	Lost func(name string)
}

// Option configures a Client.
type Option func(*Client)

// WithWatchdogTimeout sets the lease of watchdog holds (default 30s); it is
// renewed every third of it. Values under 30ms are raised to 30ms.
func WithWatchdogTimeout(d time.Duration) Option {
	return func(c *Client) { c.watchdog = max(d, 30*time.Millisecond) }
}

// WithRenewBatchSize sets how many holds one renewal script call extends
// (default 100). Values under 1 mean 1.
func WithRenewBatchSize(n int) Option {
	return func(c *Client) { c.batch = max(n, 1) }
}

// WithClientID sets the client id used in owner fields (default a random
// UUID). Two live Clients must never share an id.
func WithClientID(id string) Option {
	return func(c *Client) { c.id = id }
}

// WithPrefix puts prefix in front of every lock name, so deployments that
// share one Redis (or one Redis DB) keep apart their locks, fencing counters,
// lines of waiters and channels: Mutex("x") is the hash "<prefix>x", and its
// companion keys derive from that name as Redisson derives them from a name
// mapped by its NameMapper. The default is no prefix, which keeps Redisson's
// names; a Java service sharing the locks must map its names the same way.
func WithPrefix(prefix string) Option {
	return func(c *Client) { c.prefix = prefix }
}

// WithClassicPubSub makes a Client on a Redis Cluster publish its unlock
// messages with PUBLISH only and its waiters listen with SUBSCRIBE only, as
// a Redisson client with shardedSubscriptionMode=OFF does. By default (as
// Redisson's AUTO) a cluster with sharded pub/sub (Redis 7+) gets SPUBLISH
// as well, and waiters listen with SSUBSCRIBE; a Java service in OFF mode
// publishes by PUBLISH alone, which those waiters would not hear. Without a
// cluster it changes nothing.
func WithClassicPubSub() Option {
	return func(c *Client) { c.classicPubSub = true }
}

// WithHooks sets the metric hooks.
func WithHooks(h Hooks) Option {
	return func(c *Client) { c.hooks = h }
}

// Client makes Mutexes that share one Redis connection pool, one watchdog and
// its pub/sub connections. Create one per process. It is safe for concurrent
// use.
type Client struct {
	rdb      redis.UniversalClient
	id       string
	prefix   string
	watchdog time.Duration
	batch    int
	hooks    Hooks
	cluster  bool
	epoch    time.Time // monotonic base of lease deadlines

	classicPubSub bool // WithClassicPubSub

	seq atomic.Int64

	mu       sync.Mutex
	closed   bool
	closeCh  chan struct{}
	lines    map[string]*line    // by lock name
	channels map[string]*line    // by unlock channel
	leases   map[*lease]struct{} // every live hold chain
	wdTimer  *time.Timer         // the watchdog tick; no goroutine exists between ticks
	wdArmed  bool
	ticks    sync.WaitGroup // renewal ticks in progress, waited for by Close
	wg       sync.WaitGroup // the pub/sub dispatcher

	sub subscriber
	// shard caches whether this cluster has sharded pub/sub (see
	// Client.sharded); shardMu serializes the one question to Redis.
	shard   atomic.Int32
	shardMu sync.Mutex
}

// New returns a Client on rdb, which may be a *redis.Client, a
// *redis.ClusterClient or a Sentinel failover client. The Client does not own
// rdb: Close leaves it open.
func New(rdb redis.UniversalClient, opts ...Option) *Client {
	c := &Client{
		rdb:      rdb,
		id:       uuid.NewString(),
		watchdog: 30 * time.Second,
		batch:    100,
		epoch:    time.Now(),
		closeCh:  make(chan struct{}),
		lines:    make(map[string]*line),
		channels: make(map[string]*line),
		leases:   make(map[*lease]struct{}),
	}
	_, c.cluster = rdb.(*redis.ClusterClient)
	for _, o := range opts {
		o(c)
	}
	c.sub.c = c
	return c
}

// ID returns the client id that prefixes this Client's owner fields.
func (c *Client) ID() string { return c.id }

// Close stops the watchdog and the pub/sub subscription. Locks still held are
// not released: their leases lapse within one watchdog timeout, and their hold
// contexts are cancelled with ErrLockLost now, since nothing renews them any
// more. Waiting Lock calls return ErrClosed. Close is idempotent; it returns nil.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.closeCh)
	leases := make([]*lease, 0, len(c.leases))
	for l := range c.leases {
		leases = append(leases, l)
	}
	if c.wdTimer != nil {
		c.wdTimer.Stop()
	}
	c.mu.Unlock()
	for _, l := range leases {
		l.lose()
	}
	c.sub.close()
	c.ticks.Wait()
	c.wg.Wait()
	return nil
}

// Mutex returns the lock called name (with the Client's prefix, if any, in
// front). Mutex values are cheap; any number may exist for one name, and they
// all name the same lock.
func (c *Client) Mutex(name string) *Mutex {
	name = c.prefix + name
	m := &Mutex{
		c:       c,
		name:    name,
		token:   prefixed("redisson_lock_token", name),
		channel: prefixed("redisson_lock__channel", name),
		// The line of waiting clients has key names of its own: its entries
		// and scores are not RedissonFairLock's ("redisson_lock_queue",
		// "redisson_lock_timeout"), so the two lines never touch each
		// other's keys on a name both use.
		line:    prefixed("golock_line", name),
		timeout: prefixed("golock_line_deadline", name),
		latch:   prefixed("redisson_unlock_latch", name) + ":",
		// RedissonFairLock's line, read by a full release to wake its first
		// thread.
		fairLine:     prefixed("redisson_lock_queue", name),
		fairTimeouts: prefixed("redisson_lock_timeout", name),
	}
	m.acquireKeys = []string{m.name, m.token, m.line, m.timeout}
	return m
}

func (c *Client) nextOwner() string {
	b := make([]byte, 0, len(c.id)+21)
	b = append(append(b, c.id...), ':')
	return string(strconv.AppendInt(b, c.seq.Add(1), 10))
}

// now is the monotonic time since the Client's epoch.
func (c *Client) now() time.Duration { return time.Since(c.epoch) }

// register tracks a live lease and arms the watchdog when it needs one.
func (c *Client) register(l *lease) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	c.leases[l] = struct{}{}
	if l.watchdog && !c.wdArmed {
		c.wdArmed = true
		if c.wdTimer == nil {
			c.wdTimer = time.AfterFunc(c.watchdog/3, c.tick)
		} else {
			c.wdTimer.Reset(c.watchdog / 3)
		}
	}
	return nil
}

func (c *Client) unregister(l *lease) {
	c.mu.Lock()
	delete(c.leases, l)
	c.mu.Unlock()
}

// enter counts one more background run on wg, which Close waits for, unless
// the Client is closed; it reports whether it did.
func (c *Client) enter(wg *sync.WaitGroup) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	wg.Add(1)
	return true
}

// tick renews every watchdog lease, and re-arms itself while any remain. It
// runs on the timer's own goroutine, so between ticks, and once no lease
// needs renewing, the watchdog holds no goroutine at all.
func (c *Client) tick() {
	if !c.enter(&c.ticks) {
		return
	}
	defer c.ticks.Done()
	c.renewAll()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	for l := range c.leases {
		if l.watchdog {
			c.wdTimer.Reset(c.watchdog / 3)
			return
		}
	}
	c.wdArmed = false
}

// retryRelease keeps releasing owner's hold of m after an Unlock that Redis
// did not answer, until it is gone, the lease could have lapsed anyway
// (deadline, in Client.now() time, plus one lease for a server whose clock
// started late), or the Client closes. Release is a compare-and-set on the
// owner's count, so a repeat never touches another owner's hold.
func (c *Client) retryRelease(m *Mutex, owner string, fence, count int64, dur, deadline time.Duration) {
	c.retry(deadline+dur, func(ctx context.Context) error {
		for count > 0 {
			v, err := m.releaseCall(ctx, owner, fence, count, dur)
			switch {
			case err != nil:
				return err
			case v == 1:
				count-- // one level released; the chain is lost, release them all
			default:
				return nil // released (2), or no longer ours (0, -1)
			}
		}
		return nil
	})
}

// retry runs f in the background, with a backoff from 50ms to 1s, until it
// returns nil, c.now() passes until, or the Client closes. Close waits for it.
func (c *Client) retry(until time.Duration, f func(ctx context.Context) error) {
	if !c.enter(&c.wg) {
		return
	}
	go func() {
		defer c.wg.Done()
		wait := 50 * time.Millisecond
		t := time.NewTimer(wait)
		defer t.Stop()
		for c.now() < until {
			select {
			case <-c.closeCh:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), compensateTimeout)
			err := f(ctx)
			cancel()
			if err == nil {
				return
			}
			wait = min(2*wait, time.Second)
			t.Reset(wait)
		}
	}()
}

// renewAll extends every watchdog lease, one script call per batch of holds
// in one hash slot. A failing batch does not stop the others.
func (c *Client) renewAll() {
	c.mu.Lock()
	groups := make(map[int][]*lease)
	for l := range c.leases {
		if !l.watchdog {
			continue
		}
		s := 0
		if c.cluster {
			s = slot(l.name)
		}
		groups[s] = append(groups[s], l)
	}
	c.mu.Unlock()
	for _, g := range groups {
		for len(g) > 0 {
			n := min(len(g), c.batch)
			c.renewBatch(g[:n])
			g = g[n:]
		}
	}
}

func (c *Client) renewBatch(ls []*lease) {
	keys := make([]string, len(ls))
	args := make([]any, len(ls)+1)
	args[0] = c.watchdog.Milliseconds()
	for i, l := range ls {
		keys[i] = l.name
		args[i+1] = l.owner
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.watchdog/3)
	defer cancel()
	sent := c.now()
	gonePos, err := renewScript.Run(ctx, c.rdb, keys, args...).Int64Slice()
	gone := make([]bool, len(ls))
	for _, p := range gonePos {
		if p < 1 || p > int64(len(ls)) {
			err = fmt.Errorf("lock: renew: position %d in the reply for %d holds", p, len(ls))
			break
		}
		gone[p-1] = true
	}
	if err != nil {
		if c.hooks.Renewed != nil {
			c.hooks.Renewed(0, 0, err)
		}
		return // each lease's own deadline decides when it is lost
	}
	renewed, lost := 0, 0
	for i, l := range ls {
		if !gone[i] {
			if l.extend(sent) {
				renewed++
			}
			continue
		}
		// Gone from Redis. If an Unlock or re-entry of this chain is in
		// flight, its own reply decides (a release that landed before this
		// renewal is not a loss); the lease deadline still bounds the hold.
		if !l.op.TryLock() {
			l.gone.Store(true)
			continue
		}
		if l.lose() {
			lost++
		}
		l.op.Unlock()
	}
	if c.hooks.Renewed != nil {
		c.hooks.Renewed(renewed, lost, nil)
	}
}
