package bench

import (
	"context"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// BenchmarkUncontended is one Lock+Unlock of a free lock by one goroutine:
// ours Lock (watchdog lease) + Unlock; bsm Obtain (no retry) + Release;
// redsync Lock + Unlock (one node, defaults). "ours-fixedlease" is
// TryLock(ctx, 0, 30s) + Unlock: one attempt and no watchdog, the same
// contract as bsm's Obtain.
func BenchmarkUncontended(b *testing.B) {
	cleanupAfter(b)
	impls := []impl{
		ours(),
		bsm(30*time.Second, 0, 0),
		redsyncImpl(),
	}
	for _, im := range impls {
		b.Run(im.name, func(b *testing.B) {
			r := newRDB(b, 2)
			newLocker, closeFn := im.open(r)
			defer closeFn()
			benchLockUnlock(b, r, newLocker(keyName(b)))
		})
	}
	b.Run("ours-fixedlease", func(b *testing.B) {
		r := newRDB(b, 2)
		newLocker, closeFn := ours().open(r)
		defer closeFn()
		l := newLocker(keyName(b)).(*oursLocker)
		ctx := context.Background()
		for range 10 { // load scripts, warm up
			h, err := l.m.TryLock(ctx, 0, 30*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			_ = h.Unlock(ctx)
		}
		b.ReportAllocs()
		b.ResetTimer()
		cpu0 := processCPU()
		for b.Loop() {
			h, err := l.m.TryLock(ctx, 0, 30*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			if err := h.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(us(processCPU()-cpu0)/float64(b.N), "client-cpu-us/op")
	})
}

func benchLockUnlock(b *testing.B, _ *redis.Client, l locker) {
	ctx := context.Background()
	for range 10 { // load scripts, warm up
		if err := l.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for b.Loop() {
		if err := l.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(us(processCPU()-cpu0)/float64(b.N), "client-cpu-us/op")
}

// BenchmarkUncontendedInterleaved runs the same Lock+Unlock loops as
// BenchmarkUncontended, but alternates the implementations in blocks of 200
// cycles for a fixed 6s, and reports the median block time per cycle of each,
// the process CPU time (user+sys, go-redis and runtime included) per cycle of
// each, and ours/bsm: the median over block pairs of ours' time over the
// adjacent bsm block's. On a shared 2-core machine, noise that drifts over
// seconds hits adjacent blocks alike, so the ratio is steadier than one
// sequential sub-benchmark against another. ns/op is suppressed; B/op and
// allocs/op are ours (see BenchmarkUncontended for the others).
func BenchmarkUncontendedInterleaved(b *testing.B) {
	cleanupAfter(b)
	fixedWorkload(b, func(report reportFunc) {
		const block = 200
		impls := []impl{ours(), bsm(30*time.Second, 0, 0), redsyncImpl()}
		lockers := make([]locker, len(impls))
		for i, im := range impls {
			newLocker, closeFn := im.open(newRDB(b, 2))
			defer closeFn()
			lockers[i] = newLocker(keyName(b, im.name))
		}
		ctx := context.Background()
		cycle := func(l locker) {
			if err := l.Lock(ctx); err != nil {
				b.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
		for _, l := range lockers {
			for range 20 {
				cycle(l)
			}
		}
		// Allocations of ours, measured apart: ReadMemStats stops the world,
		// which must not land next to a timed block.
		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		const allocCycles = 2000
		for range allocCycles {
			cycle(lockers[0])
		}
		runtime.ReadMemStats(&ms1)
		perOp := make([][]time.Duration, len(impls))
		cpu := make([]time.Duration, len(impls))
		// Each round runs one block of each implementation, starting with a
		// different one each round, so no implementation always follows the
		// same other one.
		for round, start := 0, time.Now(); time.Since(start) < 6*time.Second; round++ {
			for k := range lockers {
				i := (round + k) % len(lockers)
				t0, c0 := time.Now(), processCPU()
				for range block {
					cycle(lockers[i])
				}
				perOp[i] = append(perOp[i], time.Since(t0)/block)
				cpu[i] += processCPU() - c0
			}
		}
		for i, im := range impls {
			s := slices.Clone(perOp[i])
			slices.Sort(s)
			report(float64(percentile(s, 0.5).Nanoseconds()), im.name+"-ns/op")
			report(us(cpu[i])/float64(len(perOp[i])*block), im.name+"-client-cpu-us/op")
		}
		// Median of the ratios of adjacent blocks: drift cancels out.
		ratios := make([]float64, len(perOp[0]))
		for j := range ratios {
			ratios[j] = float64(perOp[0][j]) / float64(perOp[1][j])
		}
		slices.Sort(ratios)
		report(ratios[len(ratios)/2], "ours/bsm")
		report(0, "ns/op")
		report(float64(ms1.TotalAlloc-ms0.TotalAlloc)/allocCycles, "B/op")
		report(float64(ms1.Mallocs-ms0.Mallocs)/allocCycles, "allocs/op")
	})
}
