package bench

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
)

const (
	contClients    = 3
	contGoroutines = 8 // per client
	contHold       = 500 * time.Microsecond
	contDuration   = 5 * time.Second
)

// BenchmarkContention: one lock key, 3 go-redis clients each with its own
// lock client (ours) or peer instance, 8 goroutines per client. Each goroutine
// loops over requests: take the lock, busy-wait 500us (spin on time.Since),
// unlock. The run lasts a fixed 5s (not b.N); ns/op, B/op and allocs/op are
// per request. Reported: req/s (requests whose critical section completed in
// the 5s), and the wait for the lock (Lock call to Lock return). Requests
// still waiting at the end are counted as waits of the time they had waited so
// far, a lower bound (censored/op says how many there were per request).
// bsm retries every 10ms with a 30s bound on one Obtain; redsync has its
// default 50-250ms random delay with WithTries(1000) so it never gives up.
// redis-cmds/op counts the commands the three go-redis clients sent per
// request (pub/sub SUBSCRIBE/UNSUBSCRIBE not included).
func BenchmarkContention(b *testing.B) {
	cleanupAfter(b)
	impls := []impl{
		ours(),
		bsm(30*time.Second, 10*time.Millisecond, 30*time.Second),
		redsyncImpl(redsync.WithTries(1000)),
	}
	for _, im := range impls {
		b.Run(im.name, func(b *testing.B) {
			fixedWorkload(b, func(report reportFunc) { runContention(b, report, im) })
		})
	}
}

func runContention(b *testing.B, report reportFunc, im impl) {
	key := keyName(b)
	type worker struct {
		client int
		l      locker
		waits  []time.Duration
		done   int
	}
	var workers []*worker
	cc := &cmdCounter{match: func(string) bool { return true }}
	for ci := range contClients {
		newLocker, closeFn := im.open(newRDB(b, contGoroutines+2, cc))
		defer closeFn()
		for range contGoroutines {
			workers = append(workers, &worker{client: ci, l: newLocker(key), waits: make([]time.Duration, 0, 4096)})
		}
	}
	// Warm up every locker once (scripts loaded, pools and pub/sub dialed).
	for _, w := range workers {
		if err := w.l.Lock(context.Background()); err != nil {
			b.Fatal(err)
		}
		if err := w.l.Unlock(context.Background()); err != nil {
			b.Fatal(err)
		}
	}

	runtime.GC()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	ctx, cancel := context.WithCancel(context.Background())
	var stop atomic.Bool
	var failures atomic.Int64
	var censored atomic.Int64
	var wg sync.WaitGroup
	cc.on.Store(true)
	start := time.Now()
	end := start.Add(contDuration)
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				t0 := time.Now()
				err := w.l.Lock(ctx)
				wait := time.Since(t0)
				if err != nil {
					if ctx.Err() != nil {
						censored.Add(1)
						w.waits = append(w.waits, wait)
						return
					}
					failures.Add(1)
					b.Errorf("lock: %v", err)
					return
				}
				spin(contHold)
				now := time.Now()
				if err := w.l.Unlock(context.Background()); err != nil && !errors.Is(err, context.Canceled) {
					failures.Add(1)
					b.Errorf("unlock: %v", err)
				}
				if now.After(end) {
					return // the critical section ended after the run: not counted
				}
				w.waits = append(w.waits, wait)
				w.done++
			}
		}()
	}
	time.Sleep(time.Until(end))
	stop.Store(true)
	cancel()
	wg.Wait()
	cc.on.Store(false)
	runtime.ReadMemStats(&ms1)

	var waits []time.Duration
	done := 0
	perWorkerMin, perWorkerMax := int(^uint(0)>>1), 0
	perClient := make([]int, contClients)
	for _, w := range workers {
		waits = append(waits, w.waits...)
		done += w.done
		perClient[w.client] += w.done
		perWorkerMin, perWorkerMax = min(perWorkerMin, w.done), max(perWorkerMax, w.done)
	}
	b.Logf("%s: requests per client %v", im.name, perClient)
	n := float64(max(done, 1))
	report(float64(contDuration.Nanoseconds())/n, "ns/op")
	report(float64(ms1.TotalAlloc-ms0.TotalAlloc)/n, "B/op")
	report(float64(ms1.Mallocs-ms0.Mallocs)/n, "allocs/op")
	report(float64(done)/contDuration.Seconds(), "req/s")
	report(float64(censored.Load())/n, "censored/op")
	report(float64(cc.cmds.Load())/n, "redis-cmds/op")
	report(float64(perWorkerMin), "min-req/goroutine")
	report(float64(perWorkerMax), "max-req/goroutine")
	report(float64(slices.Min(perClient)), "min-req/client")
	report(float64(slices.Max(perClient)), "max-req/client")
	reportLatency(report, "wait-", waits)
}
