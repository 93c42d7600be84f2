// Package bench compares github.com/seckill/stock/internal/lock with
// github.com/bsm/redislock and github.com/go-redsync/redsync/v4 on the shared
// Redis at 127.0.0.1:6379. See README.md for what each benchmark measures.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/lock"
)

// redisAddr is the shared Redis; override with BENCH_REDIS_ADDR.
var redisAddr = func() string {
	if a := os.Getenv("BENCH_REDIS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}()

// runID makes every key of one `go test` process unique on the shared Redis.
var runID = func() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}()

// keyPrefix starts every key name that the benchmarks create. The companion
// keys of our lock ("redisson_lock_token:{<name>}", the unlock latch) embed
// the name, so "*"+keyPrefix+"*" matches all of them.
func keyPrefix() string { return "lockbench:" + runID + ":" }

// keyName is a fresh lock name for one benchmark.
func keyName(b testing.TB, parts ...string) string {
	return keyPrefix() + strings.ReplaceAll(b.Name(), "/", ".") + ":" + strings.Join(parts, ":")
}

// newRDB returns a go-redis client of the shared Redis, checked with a PING,
// warmed to conns pooled connections, and closed when the benchmark ends.
func newRDB(b testing.TB, conns int, hooks ...redis.Hook) *redis.Client {
	b.Helper()
	r := redis.NewClient(&redis.Options{Addr: redisAddr})
	for _, h := range hooks {
		r.AddHook(h)
	}
	warm(b, r, conns)
	b.Cleanup(func() { _ = r.Close() })
	return r
}

// warm opens n pooled connections, so that dialing is not measured.
func warm(b testing.TB, r *redis.Client, n int) {
	b.Helper()
	errs := make(chan error, n)
	for range n {
		go func() { errs <- r.Ping(context.Background()).Err() }()
	}
	for range n {
		if err := <-errs; err != nil {
			b.Fatalf("redis at %s: %v", redisAddr, err)
		}
	}
}

// cleanup deletes every key of this process on the shared Redis.
func cleanup(b testing.TB, r *redis.Client) {
	ctx := context.Background()
	iter := r.Scan(ctx, 0, "*"+keyPrefix()+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 500 {
			r.Unlink(ctx, batch...)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		r.Unlink(ctx, batch...)
	}
	if err := iter.Err(); err != nil {
		b.Logf("cleanup scan: %v", err)
	}
}

// cleanupAfter registers cleanup of this process's keys at the end of b.
func cleanupAfter(b testing.TB) {
	r := redis.NewClient(&redis.Options{Addr: redisAddr})
	b.Cleanup(func() {
		cleanup(b, r)
		_ = r.Close()
	})
}

// --- a common shape for the three implementations --------------------------

// locker is one goroutine's handle on one lock name.
type locker interface {
	Lock(ctx context.Context) error
	Unlock(ctx context.Context) error
}

// impl makes lockers on one go-redis client; stop ends what it started.
type impl struct {
	name string
	// open returns a per-client factory of per-goroutine lockers.
	open func(r *redis.Client) (newLocker func(key string) locker, stop func())
}

type oursLocker struct {
	m *lock.Mutex
	h *lock.Hold
}

func (l *oursLocker) Lock(ctx context.Context) (err error) {
	l.h, err = l.m.Lock(ctx)
	return err
}

func (l *oursLocker) Unlock(ctx context.Context) error { return l.h.Unlock(ctx) }

func ours(opts ...lock.Option) impl {
	return impl{name: "ours", open: func(r *redis.Client) (func(string) locker, func()) {
		c := lock.New(r, opts...)
		return func(key string) locker { return &oursLocker{m: c.Mutex(key)} }, func() { _ = c.Close() }
	}}
}

type bsmLocker struct {
	c    *redislock.Client
	key  string
	ttl  time.Duration
	wait time.Duration // bound of one Obtain's retries (0: one attempt)
	opt  *redislock.Options
	l    *redislock.Lock
}

func (l *bsmLocker) Lock(ctx context.Context) (err error) {
	if l.wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.wait)
		defer cancel()
	}
	l.l, err = l.c.Obtain(ctx, l.key, l.ttl, l.opt)
	return err
}

func (l *bsmLocker) Unlock(ctx context.Context) error { return l.l.Release(ctx) }

// bsm uses lease ttl; with retry > 0 it retries every retry for up to wait.
func bsm(ttl, retry, wait time.Duration) impl {
	return impl{name: "bsm", open: func(r *redis.Client) (func(string) locker, func()) {
		c := redislock.New(r)
		var opt *redislock.Options
		if retry > 0 {
			opt = &redislock.Options{RetryStrategy: redislock.LinearBackoff(retry)}
		}
		return func(key string) locker {
			return &bsmLocker{c: c, key: key, ttl: ttl, wait: wait, opt: opt}
		}, func() {}
	}}
}

type redsyncLocker struct{ m *redsync.Mutex }

func (l *redsyncLocker) Lock(ctx context.Context) error { return l.m.LockContext(ctx) }

func (l *redsyncLocker) Unlock(ctx context.Context) error {
	ok, err := l.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = fmt.Errorf("redsync: unlock: not held")
	}
	return err
}

// redsyncImpl is one single-node Redsync per go-redis client. A redsync
// Mutex keeps the value of its last acquire, so each goroutine has its own.
func redsyncImpl(opts ...redsync.Option) impl {
	return impl{name: "redsync", open: func(r *redis.Client) (func(string) locker, func()) {
		rs := redsync.New(goredis.NewPool(r))
		return func(key string) locker { return &redsyncLocker{m: rs.NewMutex(key, opts...)} }, func() {}
	}}
}

// --- statistics -------------------------------------------------------------

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.5) - 1 // nearest rank
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// reportFunc is testing.B.ReportMetric, or a recording wrapper of it.
type reportFunc func(n float64, unit string)

// reportLatency reports p50, p99 and max of ds in microseconds as prefix-p50-us etc.
func reportLatency(report reportFunc, prefix string, ds []time.Duration) (p50, p99 time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	p50, p99 = percentile(s, 0.50), percentile(s, 0.99)
	report(us(p50), prefix+"p50-us")
	report(us(p99), prefix+"p99-us")
	if len(s) > 0 {
		report(us(s[len(s)-1]), prefix+"max-us")
	}
	return p50, p99
}

var fixedResults sync.Map // benchmark name -> map[unit]value

// fixedWorkload runs a benchmark whose workload is fixed in size or duration
// rather than scaled by b.N. It runs run once per b.N == 1 call (so -count
// repeats it) and pads that run to -benchtime, so that the framework does not
// call it again with a larger b.N; if it does all the same (-benchtime=Nx), the
// metrics of the measured run are reported again without running it.
// run reports its metrics, including ns/op, B/op and allocs/op, via report.
func fixedWorkload(b *testing.B, run func(report reportFunc)) {
	if b.N > 1 {
		if v, ok := fixedResults.Load(b.Name()); ok {
			for unit, n := range v.(map[string]float64) {
				b.ReportMetric(n, unit)
			}
			return
		}
	}
	res := make(map[string]float64)
	start := time.Now()
	run(func(n float64, unit string) {
		res[unit] = n
		b.ReportMetric(n, unit)
	})
	fixedResults.Store(b.Name(), res)
	if f := flag.Lookup("test.benchtime"); f != nil {
		if d, err := time.ParseDuration(f.Value.String()); err == nil {
			time.Sleep(d - time.Since(start))
		}
	}
}

// spin busy-waits for d on the monotonic clock (a critical section that
// occupies a CPU, and far more precise than time.Sleep at 500us).
func spin(d time.Duration) {
	start := time.Now()
	for time.Since(start) < d {
	}
}

// cmdCounter is a go-redis hook counting, while on, the commands for which
// match reports true, and always the connections dialed.
type cmdCounter struct {
	match func(name string) bool
	on    atomic.Bool
	cmds  atomic.Int64
	dials atomic.Int64
}

func isEval(name string) bool {
	switch name {
	case "eval", "evalsha", "eval_ro", "evalsha_ro":
		return true
	}
	return false
}

// isAttempt matches the command of one acquire attempt of any of the three
// (our acquire script, bsm's obtain script, redsync's SET NX).
func isAttempt(name string) bool { return isEval(name) || name == "set" }

func (c *cmdCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c.dials.Add(1)
		return next(ctx, network, addr)
	}
}

func (c *cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if c.on.Load() && c.match(cmd.Name()) {
			c.cmds.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if c.on.Load() {
			for _, cmd := range cmds {
				if c.match(cmd.Name()) {
					c.cmds.Add(1)
				}
			}
		}
		return next(ctx, cmds)
	}
}

// processCPU is the user+system CPU time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
