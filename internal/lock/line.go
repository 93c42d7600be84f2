package lock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The line of waiters. Within a Client, the waiters of one lock name form a
// line served in arrival order: only the head contends in Redis, the others
// sleep until it leaves, and a full Unlock with a waiter behind it hands the
// lock straight over (at most maxLocalTurns in a row).
//
// Between clients the line is kept in Redis: a waiting client is an entry
// in the lock's line (one per client, for its oldest waiter), and a free
// lock goes to the client first in line. An entry that is not refreshed by a
// retry within lineEntryTTL is dropped, so a crashed waiter delays the
// others by at most that much.
const (
	lineEntryTTL = time.Second
	lineRefresh  = 400 * time.Millisecond
)

// line is one Client's waiters for one lock name, in arrival order.
type line struct {
	m          *Mutex
	waiters    []*waiter
	wake       chan struct{} // pokes the head: an unlock was published, or the subscription is live
	subscribed bool
	inLine     bool   // this client has an entry in the lock's line in Redis
	unlocks    uint64 // unlock messages seen
	confirms   uint64 // subscription confirmations seen (the first, and after reconnects)
}

type waiter struct {
	turn      chan struct{} // closed when this waiter becomes the head
	head      bool
	skipFirst bool // it became the head because the one before acquired

	// A local hand-off: an Unlock of this Client claims the head waiter and
	// sends it the lock (a *Hold) or nil (the hand-off failed; carry on).
	ctx      context.Context
	dur      time.Duration
	watchdog bool
	grant    chan *Hold
	claimed  bool // guarded by Client.mu
	received bool // the waiter took what grant sent
	// abandoned: the waiter left (its context ended) while an Unlock was
	// handing it the lock; that Unlock releases what it would have sent.
	abandoned bool
}

// maxLocalTurns bounds the consecutive local hand-offs of one Client, after
// which the lock goes back to the line of clients (as sync.Mutex bounds
// barging with its starvation mode).
const maxLocalTurns = 4

// waitInLine puts in line a Lock call that found the lock busy (fastBusy: its
// fast attempt did, which put this client in line in Redis) or found other
// waiters of this Client ahead of it, and waits until it holds the lock, the
// deadline (if not zero) passes, ctx ends or the Client closes.
func (m *Mutex) waitInLine(ctx context.Context, owner string, dur time.Duration, watchdog bool,
	deadline time.Time, fastBusy bool) (h *Hold, err error) {
	c := m.c
	p := &turn{m: m, owner: owner, dur: dur, watchdog: watchdog, deadline: deadline, timer: time.NewTimer(time.Hour)}
	defer p.timer.Stop()
	if p.ln, p.w, err = c.joinLine(ctx, m, dur, watchdog); err != nil {
		return nil, err
	}
	defer func() { c.leaveLine(p.ln, p.w, h != nil) }()
	if fastBusy {
		if h, err = p.afterFastAttempt(ctx); err != nil || h != nil {
			return h, err
		}
	}
	if h, err = p.awaitHead(ctx); err != nil || h != nil {
		return h, err
	}
	return p.contend(ctx)
}

// turn is one waiting Lock call: its waiter in its Client's line, the owner
// and lease it acquires with, and the bound on its wait. Each step below
// returns a hold (acquired, or handed over by an Unlock of this Client) or
// an error to end the wait with, or neither to go on waiting.
type turn struct {
	m        *Mutex
	owner    string
	dur      time.Duration
	watchdog bool
	deadline time.Time // zero: no bound but ctx
	timer    *time.Timer
	ln       *line
	w        *waiter
}

// afterFastAttempt runs after the fast attempt found the lock busy: that
// put this client in line in Redis. The head waiter subscribes and looks
// again once the subscription is live.
func (p *turn) afterFastAttempt(ctx context.Context) (*Hold, error) {
	c := p.m.c
	c.mu.Lock()
	p.ln.inLine = true
	c.mu.Unlock()
	if !p.w.head {
		return nil, nil
	}
	c.subscribe(p.ln)
	return p.sleep(ctx, lineRefresh, p.ln.wake)
}

// awaitHead waits for this waiter's turn: only the oldest waiter of a Client
// contends in Redis.
func (p *turn) awaitHead(ctx context.Context) (*Hold, error) {
	c := p.m.c
	for !p.w.head {
		if h, err := p.sleep(ctx, time.Hour, p.w.turn); err != nil || h != nil {
			return h, err
		}
		c.mu.Lock()
		p.w.head = p.ln.waiters[0] == p.w
		c.mu.Unlock()
	}
	if p.w.skipFirst {
		// The waiter before us just took the lock: an attempt now can only
		// fail. Wait for its unlock message instead (or a refresh, in case
		// its hold ends without one: a lapsed lease, a failed unlock).
		c.subscribe(p.ln)
		return p.sleep(ctx, lineRefresh, p.ln.wake)
	}
	return nil, nil
}

// contend is the head waiter's loop: attempt the lock, and while it is
// busy, keep this client in line and wait for the next attempt.
func (p *turn) contend(ctx context.Context) (*Hold, error) {
	c := p.m.c
	for {
		c.mu.Lock()
		unlocks, confirms := p.ln.unlocks, p.ln.confirms
		c.mu.Unlock()
		h, b, err := p.m.attempt(ctx, p.owner, p.dur, p.watchdog, lineEntryTTL)
		if err != nil || h != nil {
			return h, err
		}
		c.mu.Lock()
		p.ln.inLine = true
		c.mu.Unlock()
		c.subscribe(p.ln)
		if h, err := p.awaitRetry(ctx, b, unlocks, confirms); err != nil || h != nil {
			return h, err
		}
	}
}

// awaitRetry sleeps until the next attempt after one that found the lock
// busy (b), unlocks and confirms being the line's counts before it. It
// retries at least every lineRefresh, which keeps our place in line. Each
// unlock hands the lock to the client first in line, so a client lets the
// unlocks that go to those ahead of it go by; a new subscription
// confirmation (messages may have been missed) ends the sleep at once.
func (p *turn) awaitRetry(ctx context.Context, b busy, unlocks, confirms uint64) (*Hold, error) {
	c := p.m.c
	switch {
	case b.wait < 0: // no TTL on the key (not our protocol): look again now and then
		b.wait = time.Second
	case b.wait == 0:
		b.wait = time.Millisecond
	}
	retryAt := time.Now().Add(min(b.wait, lineRefresh))
	for {
		if h, err := p.sleep(ctx, time.Until(retryAt), p.ln.wake); err != nil || h != nil {
			return h, err
		}
		c.mu.Lock()
		u, cf := p.ln.unlocks, p.ln.confirms
		c.mu.Unlock()
		if !time.Now().Before(retryAt) || cf != confirms || b.skip < 0 || u-unlocks > uint64(b.skip) {
			return nil, nil
		}
	}
}

// sleep waits for d (capped by the deadline), a poke on wake, a local
// hand-off (it returns the hold handed over; nil when the hand-off failed),
// ctx or Close.
func (p *turn) sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) (*Hold, error) {
	c := p.m.c
	if !p.deadline.IsZero() {
		left := time.Until(p.deadline)
		if left <= 0 {
			return nil, ErrNotObtained
		}
		d = min(d, left)
	}
	p.timer.Reset(d)
	select {
	case <-wake:
	case <-p.timer.C:
	case hd := <-p.w.grant:
		c.mu.Lock()
		p.w.received, p.w.claimed = true, false
		c.mu.Unlock()
		return hd, nil // nil: the hand-off failed; carry on
	case <-ctx.Done():
		return nil, errors.Join(ErrNotObtained, ctx.Err())
	case <-c.closeCh:
		return nil, ErrClosed
	}
	return nil, nil
}

// joinLine puts a waiter for m at the back of c's line for it; ctx, dur and
// watchdog are for the hold a local hand-off gives it.
func (c *Client) joinLine(ctx context.Context, m *Mutex, dur time.Duration, watchdog bool) (*line, *waiter, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, nil, ErrClosed
	}
	ln := c.lines[m.name]
	if ln == nil {
		ln = &line{m: m, wake: make(chan struct{}, 1)}
		c.lines[m.name] = ln
		c.channels[m.channel] = ln
	}
	w := &waiter{head: len(ln.waiters) == 0, ctx: ctx, dur: dur, watchdog: watchdog, grant: make(chan *Hold, 1)}
	if !w.head {
		w.turn = make(chan struct{})
	}
	ln.waiters = append(ln.waiters, w)
	return ln, w, nil
}

// leaveLine takes w out of the line when its Lock call returns (acquired: with
// a hold), and lets the line in Redis go when it was the last waiter.
func (c *Client) leaveLine(ln *line, w *waiter, acquired bool) {
	c.mu.Lock()
	if w.claimed && !w.received {
		// An Unlock is handing us the lock as we leave. If it has sent it
		// already, let it go; if not, do not wait for it (Lock returns within
		// its context): the Unlock releases what it would have sent.
		select {
		case hd := <-w.grant:
			w.received = true
			if hd != nil {
				c.mu.Unlock()
				ctx, cancel := context.WithTimeout(context.Background(), compensateTimeout)
				_ = hd.Unlock(ctx)
				cancel()
				c.mu.Lock()
			}
		default:
			w.abandoned = true
		}
	}
	for i, x := range ln.waiters {
		if x == w {
			copy(ln.waiters[i:], ln.waiters[i+1:])
			ln.waiters[len(ln.waiters)-1] = nil
			ln.waiters = ln.waiters[:len(ln.waiters)-1]
			if i == 0 && len(ln.waiters) > 0 {
				ln.waiters[0].skipFirst = acquired
				close(ln.waiters[0].turn)
			}
			break
		}
	}
	unsub, leave := false, false
	if len(ln.waiters) == 0 {
		delete(c.lines, ln.m.name)
		delete(c.channels, ln.m.channel)
		unsub = ln.subscribed
		ln.subscribed = false
		leave = ln.inLine && !acquired // the acquire took us out of the line
	}
	c.mu.Unlock()
	if unsub {
		c.sub.unsubscribe(ln.m.channel)
	}
	if leave {
		// The last waiter gave up: leave the line now rather than make the
		// others wait for our entry to lapse.
		ctx, cancel := context.WithTimeout(context.Background(), compensateTimeout)
		keys := []string{ln.m.line, ln.m.timeout, ln.m.channel}
		if c.sharded(ctx) {
			_ = leaveScript.Run(ctx, c.rdb, keys, c.id, spublishArg).Err()
		} else {
			_ = leaveScript.Run(ctx, c.rdb, keys, c.id).Err()
		}
		cancel()
	}
}

// subscribe makes sure the line's unlock channel is subscribed.
func (c *Client) subscribe(ln *line) {
	c.mu.Lock()
	if ln.subscribed || c.closed {
		c.mu.Unlock()
		return
	}
	ln.subscribed = true
	c.mu.Unlock()
	c.sub.subscribe(ln.m.channel)
}

// hasLine reports whether a waiter of c is in line for the lock name.
func (c *Client) hasLine(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.lines[name]
	return ok
}

// claimHead reserves the head waiter of the lock's line for a local
// hand-off, or returns nil when there is none to give it to.
func (c *Client) claimHead(name string) *waiter {
	c.mu.Lock()
	defer c.mu.Unlock()
	ln := c.lines[name]
	if ln == nil || len(ln.waiters) == 0 || c.closed {
		return nil
	}
	w := ln.waiters[0]
	if w.claimed {
		return nil
	}
	w.claimed, w.received = true, false
	return w
}

// handOff releases the chain by giving the lock straight to w, the next
// waiter of this Client, in one script call. The caller holds l.op.
func (l *lease) handOff(ctx context.Context, w *waiter, sent time.Duration) error {
	c, m := l.c, l.m
	owner := c.nextOwner()
	res, err := transferScript.Run(ctx, c.rdb, []string{m.name, m.token, m.line, m.timeout},
		l.owner, owner, w.dur.Milliseconds(), c.id).Result()
	var fence int64
	if err == nil {
		arr, ok := res.([]any)
		if ok && len(arr) == 1 {
			fence, ok = arr[0].(int64)
		}
		if !ok {
			if n, isInt := res.(int64); isInt && n == 0 {
				w.grant <- nil
				l.lose()
				return ErrNotHeld
			}
			err = fmt.Errorf("unexpected reply %v", res)
		}
	}
	if err != nil {
		// The transfer may or may not have run: release both owners in the
		// background (each a compare-and-set on an owner no one else has),
		// so the lock does not sit out a lease; the waiter carries on.
		deadline := time.Duration(l.deadline.Load())
		w.grant <- nil
		l.lose()
		c.retryRelease(m, l.owner, l.fence, 1, l.dur, deadline)
		c.retryRelease(m, owner, 0, 1, w.dur, sent+w.dur)
		return fmt.Errorf("lock: unlock %q: %w", l.name, err)
	}
	l.count = 0
	l.release()
	nl := newLease(w.ctx, m, owner, fence, w.dur, w.watchdog, sent)
	nl.turns = l.turns + 1
	if err := c.register(nl); err != nil {
		nl.end(stateLost)
		w.grant <- nil
		c.retryRelease(m, owner, fence, 1, w.dur, sent+w.dur) // Close raced us: a no-op once closed
		// What Close cut short is the waiter's hold (the waiter hears
		// ErrClosed); the Unlock itself succeeded.
		return nil //nolint:nilerr // the error is the waiter's, not this Unlock's
	}
	hd := &Hold{l: nl}
	c.mu.Lock()
	abandoned := w.abandoned
	if !abandoned {
		w.grant <- hd // buffered: never blocks
	}
	c.mu.Unlock()
	if abandoned {
		// The waiter's context ended during the transfer: release the lock
		// it would have got (which may hand it on to the next waiter).
		_ = hd.Unlock(ctx) // on a Redis error the release goes on in the background
	}
	return nil
}

// poke wakes the head waiter of the line on channel, if any, after an
// unlock message or a subscription confirmation.
func (c *Client) poke(channel string, unlock bool) {
	c.mu.Lock()
	ln := c.channels[channel]
	if ln != nil {
		if unlock {
			ln.unlocks++
		} else {
			ln.confirms++
		}
	}
	c.mu.Unlock()
	if ln != nil {
		select {
		case ln.wake <- struct{}{}:
		default:
		}
	}
}
