// Package combine serves the requests of one key in batches. Requests of a
// key that arrive while the key is being served wait in the key's queue;
// the next leader takes up to a batch's worth of them and serves them
// together, so what a batch costs once (a lock, a transaction) is paid once
// per batch, not once per request. Each request still gets its own answer.
//
// Every key's queue is capped: a request past the cap is refused at once
// (ErrFull), so a flood of one key costs memory bounded by the cap, not by
// the flood. A request whose caller gives up while it still waits (not yet
// in a batch) leaves in O(1); one already in a batch gets the batch's
// outcome, whatever its caller does.
package combine

import (
	"context"
	"errors"
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// Submit's errors.
var (
	// ErrFull: the key's queue holds its limit.
	ErrFull = errors.New("combine: the key's queue is full")
	// ErrGaveUp, joined with the context's error: the caller's context
	// ended before a batch took the request, so nothing was done for it.
	ErrGaveUp = errors.New("combine: the caller gave up before a batch took the request")
)

// Call is one request: its caller's context and item, and, once served,
// its answer.
type Call[T, R any] struct {
	Ctx   context.Context
	Item  T
	state atomic.Int32
	done  chan struct{}
	res   R
	err   error
}

const (
	waiting   int32 = iota
	taken           // in a batch: its answer is the outcome
	abandoned       // its caller gave up before a batch took it
)

// Answer gives the call its outcome; a batch answers each of its calls
// exactly once.
func (c *Call[T, R]) Answer(r R, err error) {
	c.res, c.err = r, err
	close(c.done)
}

// ServeFunc serves one batch of key; it answers every call before it
// returns.
type ServeFunc[T, R any] func(key string, batch []*Call[T, R])

// Combiner holds the queues of every key. It is safe for concurrent use.
type Combiner[T, R any] struct {
	seed     maphash.Seed
	shards   [64]shard[T, R] // keys spread over mutexes: a hot key contends only with its shard's
	serve    ServeFunc[T, R]
	batchMax int
	limit    int
}

type shard[T, R any] struct {
	mu sync.Mutex
	m  map[string]*queue[T, R]
}

// queue is one key's queue. Its fields are guarded by its shard's mutex.
type queue[T, R any] struct {
	pending []*Call[T, R] // oldest first; may hold abandoned calls
	live    int           // calls in pending still waiting, plus Enter's waiters
	dead    int           // abandoned calls still in pending
	active  bool          // a leader is serving the key
	// admitted counts Admit's requests: in progress anywhere, not only in
	// the queue (see Admit).
	admitted int
}

// New returns a Combiner that serves batches of up to batchMax calls with
// serve, and holds at most limit waiting requests per key.
func New[T, R any](batchMax, limit int, serve ServeFunc[T, R]) *Combiner[T, R] {
	c := &Combiner[T, R]{seed: maphash.MakeSeed(), serve: serve, batchMax: max(1, batchMax), limit: limit}
	for i := range c.shards {
		c.shards[i].m = make(map[string]*queue[T, R])
	}
	return c
}

// Submit queues item under key and returns its answer once a batch has
// served it. It returns ErrFull at once when the key's queue is full, and
// ErrGaveUp joined with ctx's error when ctx ends before a batch took the
// request (then nothing was or will be done for it). The caller that finds no leader serving the
// key serves one batch itself, then hands the queue to a new leader.
func (c *Combiner[T, R]) Submit(ctx context.Context, key string, item T) (R, error) {
	call := &Call[T, R]{Ctx: ctx, Item: item, done: make(chan struct{})}
	ok, lead := c.join(key, call)
	if !ok {
		var zero R
		return zero, ErrFull
	}
	if lead {
		c.lead(key)
	}
	select {
	case <-call.done:
		return call.res, call.err
	case <-ctx.Done():
	}
	if c.leave(key, call) {
		var zero R
		return zero, errors.Join(ErrGaveUp, ctx.Err())
	}
	<-call.done // in a batch already: its outcome is the answer
	return call.res, call.err
}

// Alone serves item as a batch of its own, on the caller's goroutine,
// counted against the key's limit like a waiting request (ErrFull past it).
func (c *Combiner[T, R]) Alone(ctx context.Context, key string, item T) (R, error) {
	if !c.Enter(key) {
		var zero R
		return zero, ErrFull
	}
	defer c.Exit(key)
	call := &Call[T, R]{Ctx: ctx, Item: item, done: make(chan struct{})}
	call.state.Store(taken)
	c.serve(key, []*Call[T, R]{call})
	return call.res, call.err
}

// lead serves one batch of key, then hands the queue to a new leader
// goroutine (so no caller waits for batches after its own). The leader
// that finds the queue empty ends the key's turn.
func (c *Combiner[T, R]) lead(key string) {
	batch := c.takeCalls(key, c.batchMax, true)
	if batch == nil {
		return
	}
	c.serve(key, batch)
	go c.lead(key)
}

// More takes up to n more waiting calls of key into a batch being served
// (by its ServeFunc): those that came while it waited for its lock. It may
// return none.
func (c *Combiner[T, R]) More(key string, n int) []*Call[T, R] {
	return c.takeCalls(key, n, false)
}

func (c *Combiner[T, R]) shard(key string) *shard[T, R] {
	return &c.shards[maphash.String(c.seed, key)%uint64(len(c.shards))]
}

// join puts call at the back of key's queue. It reports false when the
// queue is full, and whether call's goroutine must lead (no leader is
// serving the key).
func (c *Combiner[T, R]) join(key string, call *Call[T, R]) (ok, lead bool) {
	c.update(key, func(q *queue[T, R]) {
		if q.live >= c.limit {
			return
		}
		q.pending = append(q.pending, call)
		q.live++
		ok, lead = true, !q.active
		q.active = true
	})
	return ok, lead
}

// leave marks call abandoned if no batch has taken it yet; it reports
// whether it did.
func (c *Combiner[T, R]) leave(key string, call *Call[T, R]) bool {
	if !call.state.CompareAndSwap(waiting, abandoned) {
		return false
	}
	c.update(key, func(q *queue[T, R]) {
		q.live--
		q.dead++
		if q.dead > 64 && q.dead > q.live {
			q.compact()
		}
	})
	return true
}

func (q *queue[T, R]) compact() {
	kept := make([]*Call[T, R], 0, q.live+q.live/2)
	for _, call := range q.pending {
		if call.state.Load() == waiting {
			kept = append(kept, call)
		}
	}
	q.pending, q.dead = kept, 0
}

// takeCalls removes up to n waiting calls from the front of key's queue
// and marks them taken; abandoned calls on the way are dropped. With
// endTurn, finding none ends the leader's turn.
func (c *Combiner[T, R]) takeCalls(key string, n int, endTurn bool) []*Call[T, R] {
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	q := sh.get(key)
	var batch []*Call[T, R]
	i := 0
	for ; i < len(q.pending) && len(batch) < n; i++ {
		call := q.pending[i]
		q.pending[i] = nil
		if call.state.CompareAndSwap(waiting, taken) {
			batch = append(batch, call)
			q.live--
		} else {
			q.dead--
		}
	}
	q.pending = q.pending[i:]
	if len(batch) == 0 && endTurn {
		q.active = false
	}
	sh.forget(key, q)
	return batch
}

// Enter counts a request of key that waits outside any batch (for a lock
// of its own) against the key's limit; it reports false when the queue is
// full. Exit ends what Enter began.
func (c *Combiner[T, R]) Enter(key string) (ok bool) {
	c.update(key, func(q *queue[T, R]) {
		if ok = q.live < c.limit; ok {
			q.live++
		}
	})
	return ok
}

// Exit ends what Enter began.
func (c *Combiner[T, R]) Exit(key string) {
	c.update(key, func(q *queue[T, R]) { q.live-- })
}

// update runs f on key's queue (made if none) under its shard's mutex,
// then forgets the queue if f left it idle.
func (c *Combiner[T, R]) update(key string, f func(q *queue[T, R])) {
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	q := sh.get(key)
	f(q)
	sh.forget(key, q)
}

// Admit counts one more request of key in progress at its caller, before
// and beside its time in the queue (a pre-check, a read), against limit;
// it reports false, and counts nothing, when limit are in already. Release
// ends what Admit began. The count lives beside the key's queue, so a key
// costs one map entry while it is in use.
func (c *Combiner[T, R]) Admit(key string, limit int) (ok bool) {
	c.update(key, func(q *queue[T, R]) {
		if ok = q.admitted < limit; ok {
			q.admitted++
		}
	})
	return ok
}

// Release ends what Admit began.
func (c *Combiner[T, R]) Release(key string) {
	c.update(key, func(q *queue[T, R]) { q.admitted-- })
}

// Admitted returns the requests of key that Admit counts.
func (c *Combiner[T, R]) Admitted(key string) int {
	return c.count(key, func(q *queue[T, R]) int { return q.admitted })
}

// Waiting returns the requests of key waiting in its queue, Enter's
// included.
func (c *Combiner[T, R]) Waiting(key string) int {
	return c.count(key, func(q *queue[T, R]) int { return q.live })
}

// count reads one count of key's queue (0 when it has none).
func (c *Combiner[T, R]) count(key string, of func(q *queue[T, R]) int) int {
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if q := sh.m[key]; q != nil {
		return of(q)
	}
	return 0
}

// keys returns how many keys have a queue (for tests: idle ones are
// forgotten).
func (c *Combiner[T, R]) keys() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// get returns key's queue, made if there is none. The caller holds sh.mu.
func (sh *shard[T, R]) get(key string) *queue[T, R] {
	q := sh.m[key]
	if q == nil {
		q = &queue[T, R]{}
		sh.m[key] = q
	}
	return q
}

// forget drops an idle queue, so keys no longer used cost nothing. The
// caller holds sh.mu.
func (sh *shard[T, R]) forget(key string, q *queue[T, R]) {
	if !q.active && q.live == 0 && q.admitted == 0 && len(q.pending) == 0 {
		delete(sh.m, key)
	}
}
