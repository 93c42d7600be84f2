package bench

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkLoneWaiterWakeup: a holder (own go-redis client and lock client)
// holds the lock; one waiter (another go-redis client and lock client) starts
// waiting; the holder unlocks 1us after the waiter called Lock. Each sample is
// the time from just before the holder's Unlock call to the return of the
// waiter's Lock. bsm retries every 10ms (LinearBackoff), redsync uses its
// defaults (32 tries, 50-250ms random delay). The workload is a fixed number
// of samples (not b.N); ns/op, B/op and allocs/op are per sample and cover the
// whole cycle (holder lock, waiter lock, holder unlock, waiter unlock).
//
// The 1us gap makes a race: often the release reaches Redis before the
// waiter's first attempt, which then simply wins. "slow-frac" is the share of
// samples whose first attempt failed (the waiter really waited; counted by a
// go-redis hook on the waiter's client), and slow-p50/p99 are over those
// samples alone. waiter-dials/op counts connections the waiter's go-redis
// client dialed per sample (pooled connections are warmed first).
func BenchmarkLoneWaiterWakeup(b *testing.B) {
	cleanupAfter(b)
	cases := []struct {
		im         impl
		minSamples int
		minDur     time.Duration
		maxDur     time.Duration
	}{
		{ours(), 1000, 2 * time.Second, 10 * time.Second},
		{bsm(30*time.Second, 10*time.Millisecond, 30*time.Second), 400, 2 * time.Second, 10 * time.Second},
		{redsyncImpl(), 150, 2 * time.Second, 25 * time.Second},
	}
	for _, tc := range cases {
		b.Run(tc.im.name, func(b *testing.B) {
			fixedWorkload(b, func(report reportFunc) {
				key := keyName(b)
				hNew, hClose := tc.im.open(newRDB(b, 2))
				defer hClose()
				wc := &cmdCounter{match: isAttempt}
				wNew, wClose := tc.im.open(newRDB(b, 2, wc))
				defer wClose()
				holder, waiter := hNew(key), wNew(key)
				ctx := context.Background()

				var lat, waited []time.Duration // all samples; those whose first attempt failed
				dials0 := wc.dials.Load()
				var ms0, ms1 runtime.MemStats
				runtime.ReadMemStats(&ms0)
				start := time.Now()
				for {
					el := time.Since(start)
					if el >= tc.maxDur || (el >= tc.minDur && len(lat) >= tc.minSamples) {
						break
					}
					if err := holder.Lock(ctx); err != nil {
						b.Fatal(err)
					}
					var waitStart atomic.Int64 // UnixNano; 0 until the waiter calls Lock
					got := make(chan time.Time, 1)
					attempts0 := wc.cmds.Load()
					wc.on.Store(true)
					go func() {
						waitStart.Store(time.Now().UnixNano())
						if err := waiter.Lock(ctx); err != nil {
							b.Error(err)
							got <- time.Time{}
							return
						}
						got <- time.Now()
					}()
					for waitStart.Load() == 0 {
					}
					for time.Now().UnixNano()-waitStart.Load() < int64(time.Microsecond) {
					}
					t0 := time.Now()
					if err := holder.Unlock(ctx); err != nil {
						b.Fatal(err)
					}
					t1 := <-got
					if t1.IsZero() {
						b.FailNow()
					}
					wc.on.Store(false)
					lat = append(lat, t1.Sub(t0))
					if wc.cmds.Load()-attempts0 > 1 {
						waited = append(waited, t1.Sub(t0))
					}
					if err := waiter.Unlock(ctx); err != nil {
						b.Fatal(err)
					}
				}
				elapsed := time.Since(start)
				runtime.ReadMemStats(&ms1)
				n := float64(len(lat))
				report(float64(elapsed.Nanoseconds())/n, "ns/op")
				report(float64(ms1.TotalAlloc-ms0.TotalAlloc)/n, "B/op")
				report(float64(ms1.Mallocs-ms0.Mallocs)/n, "allocs/op")
				report(n, "samples")
				report(float64(wc.dials.Load()-dials0)/n, "waiter-dials/op")
				report(float64(len(waited))/n, "slow-frac")
				reportLatency(report, "", lat)
				reportLatency(report, "slow-", waited)
			})
		})
	}
}
