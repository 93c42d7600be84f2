// Package redlock is the SKU lock's Redlock gate: SET NX PX on N
// independent Redis masters, held by a majority.
package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/skulock/gate"
	"github.com/seckill/stock/internal/skulock/setnx"
)

var (
	//go:embed raise.lua
	redlockRaiseSrc string
	redlockRaise    = redis.NewScript(redlockRaiseSrc)
)

// Locker is the service.Locker over N independent Redis masters (no
// replication between them): the lock is held when a majority (N/2+1)
// granted SET NX PX within the lease, for the lease minus the time the
// acquire took minus a clock drift allowance. It is safe for concurrent
// use; Close closes the clients it opened and waits for its clean-up.
type Locker struct {
	nodes   []redis.UniversalClient
	prefix  string
	lease   time.Duration
	timeout time.Duration // per node call
	lost    func()
	bg      gate.Background
}

// RedlockDrift is the clock drift factor: a hold's validity is its lease
// minus the acquire's elapsed time minus RedlockDrift*lease minus 2ms (the
// allowance of the Redlock description for the nodes' clocks running at
// different rates).
const RedlockDrift = 0.01

// DefaultNodeTimeout bounds each node's call (acquire, raise, release) when
// New is given 0: far below any sensible lease, so a dead or paused
// node costs the acquire this much, not the lease.
const DefaultNodeTimeout = 100 * time.Millisecond

// Config is the redlock gate's own settings.
type Config struct {
	// The independent Redis masters, a comma list of an odd number, at
	// least 3.
	Addrs []string `env:"STOCK_REDLOCK_ADDRS"`
	// Bound of each master's call, and never more than a tenth of the
	// lease.
	NodeTimeout time.Duration `env:"STOCK_REDLOCK_NODE_TIMEOUT" envDefault:"100ms" min:"1ms" nonzero:"true"`
}

// New returns the locker over nodes (3 or 5 independent masters is
// the usual choice; any N >= 1 works, with quorum N/2+1). lease is what
// TryLock's lease 0 means; timeout bounds each node's call (0:
// DefaultNodeTimeout, and never more than a tenth of the lease used); lost,
// if set, is called once per hold that reached its deadline unreleased.
// Keys on each node: prefix+"redlock:"+gate.Name(sku) and
// prefix+"redlock_fence:"+gate.Name(sku).
func New(nodes []redis.UniversalClient, prefix string, lease, timeout time.Duration, lost func()) *Locker {
	if timeout <= 0 {
		timeout = DefaultNodeTimeout
	}
	return &Locker{nodes: nodes, prefix: prefix, lease: lease, timeout: timeout, lost: lost}
}

// NodeOptions are the client options Open uses for each master: no
// command retries (a resend of an acquire is answered correctly by the
// script, but the time it takes belongs to the lease) and dial, read and
// write timeouts of the node timeout.
func NodeOptions(addr, password string, timeout time.Duration) *redis.Options {
	if timeout <= 0 {
		timeout = DefaultNodeTimeout
	}
	return &redis.Options{Addr: addr, Password: password, DialTimeout: timeout, ReadTimeout: timeout,
		WriteTimeout: timeout, MaxRetries: -1, DialerRetries: 1, PoolSize: 32}
}

func (l *Locker) quorum() int { return len(l.nodes)/2 + 1 }

func (l *Locker) keys(sku string) []string {
	return []string{l.prefix + "redlock:" + gate.Name(sku), l.prefix + "redlock_fence:" + gate.Name(sku)}
}

// nodeTimeout is the bound of one node's call for a hold of lease.
func (l *Locker) nodeTimeout(lease time.Duration) time.Duration {
	return max(min(l.timeout, lease/10), time.Millisecond)
}

// onAll runs f against every node in parallel, each under the node timeout.
func (l *Locker) onAll(ctx context.Context, timeout time.Duration, f func(ctx context.Context, i int, rdb redis.UniversalClient)) {
	var wg sync.WaitGroup
	for i, rdb := range l.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			f(nctx, i, rdb)
		}()
	}
	wg.Wait()
}

// releaseAll sends the compare-and-delete to every node, also those that
// failed or refused: an acquire whose reply was lost may have landed there.
// It returns how many nodes deleted the hold's key and the errors.
func (l *Locker) releaseAll(ctx context.Context, timeout time.Duration, key, token string) (int, error) {
	var mu sync.Mutex
	var n int
	var errs []error
	l.onAll(ctx, timeout, func(ctx context.Context, i int, rdb redis.UniversalClient) {
		v, err := setnx.ReleaseScript.Run(ctx, rdb, []string{key}, token).Int64()
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", i, err))
		}
		n += int(v)
	})
	return n, errors.Join(errs...)
}

// TryLock takes sku's lock on a majority of the nodes within wait, for
// lease (0: the locker's default). Between failed rounds it sleeps a
// jittered backoff (so contending clients do not keep splitting the votes).
// Errors: service.ErrLockNotObtained (joined with ctx's error when ctx
// ended); an error naming the nodes when fewer than a quorum answered (the
// store could not be asked).
func (l *Locker) TryLock(ctx context.Context, sku string, wait, lease time.Duration) (service.Hold, error) {
	if lease <= 0 {
		lease = l.lease
	}
	keys := l.keys(sku)
	timeout := l.nodeTimeout(lease)
	drift := time.Duration(float64(lease)*RedlockDrift) + 2*time.Millisecond
	return gate.Poll(ctx, wait, func() (service.Hold, bool, error) {
		token := gate.NewToken() // a round of its own: a late reply of the last round cannot count here
		start := time.Now()
		fences := make([]int64, len(l.nodes)) // 0: not granted
		errs := make([]error, len(l.nodes))
		l.onAll(ctx, timeout, func(nctx context.Context, i int, rdb redis.UniversalClient) {
			fences[i], errs[i] = setnx.AcquireScript.Run(nctx, rdb, keys, token, lease.Milliseconds()).Int64()
		})
		granted, answered, fence := 0, 0, int64(0)
		for i := range l.nodes {
			if errs[i] == nil {
				answered++
				if fences[i] > 0 {
					granted++
					fence = max(fence, fences[i])
				}
			}
		}
		ok := granted >= l.quorum()
		if ok {
			ok = l.raise(ctx, timeout, keys[1], fence, fences, errs)
		}
		validity := lease - time.Since(start) - drift
		if ok && validity > 0 {
			release := func(ctx context.Context) (bool, error) {
				n, err := l.releaseAll(ctx, timeout, keys[0], token)
				if n >= l.quorum() {
					err = nil // the nodes that failed let the key expire
				}
				return n >= l.quorum(), err
			}
			return gate.NewLeaseHold(ctx, start.Add(validity), fence, l.lost, release), true, nil
		}
		// Not held: give back what was granted, and what may have been.
		l.bg.Run(func() {
			_, _ = l.releaseAll(context.WithoutCancel(ctx), timeout, keys[0], token)
		})
		if answered < l.quorum() {
			return nil, false, fmt.Errorf("redlock: %q: %d of %d nodes answered, %d needed: %w",
				keys[0], answered, len(l.nodes), l.quorum(), errors.Join(errs...))
		}
		return nil, false, nil
	})
}

// raise makes the fence monotonic across holders: after it, a majority of
// nodes hold a counter >= fence, so the next holder's majority, which
// overlaps this one in at least one node, INCRs past it there. Nodes that
// granted with a smaller counter (and the others, best effort) are raised;
// when the granting nodes already agree on fence, nothing is sent. It
// reports whether a majority holds >= fence.
func (l *Locker) raise(ctx context.Context, timeout time.Duration, key string, fence int64, fences []int64, errs []error) bool {
	at := 0
	for i := range fences {
		if errs[i] == nil && fences[i] == fence {
			at++
		}
	}
	if at >= l.quorum() {
		return true
	}
	var mu sync.Mutex
	l.onAll(ctx, timeout, func(nctx context.Context, i int, rdb redis.UniversalClient) {
		if errs[i] == nil && fences[i] == fence {
			return
		}
		if v, err := redlockRaise.Run(nctx, rdb, []string{key}, fence).Int64(); err == nil && v >= fence {
			mu.Lock()
			at++
			mu.Unlock()
		}
	})
	return at >= l.quorum()
}

// Close waits for the releases still running in the background (the node
// clients stay the caller's).
func (l *Locker) Close() error {
	l.bg.Wait()
	return nil
}
