package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/seckill/stock/internal/lock"
)

const (
	renewHolds    = 10_000
	renewWatchdog = 3 * time.Second // renewal period: a third of it
	renewBatch    = 100
	renewPeriods  = 3
)

// BenchmarkRenewal holds 10,000 watchdog locks of one lock client
// (WithWatchdogTimeout(3s), WithRenewBatchSize(100)) for 3 renewal periods
// (1s each) and counts the renewal script calls of each period twice: by the
// Hooks.Renewed callback and by a go-redis hook counting EVAL/EVALSHA (nothing
// else runs scripts meanwhile). Periods that began before all holds were taken
// are skipped. bsm and redsync have no watchdog (a holder calls
// Refresh/Extend itself, one call per lock), so there is nothing to compare.
// The workload is fixed (not b.N); ns/op is suppressed, and B/op and
// allocs/op are per hold over its whole life (acquire, 3 renewals, unlock).
func BenchmarkRenewal(b *testing.B) {
	fixedWorkload(b, func(report reportFunc) { runRenewal(b, report) })
}

func runRenewal(b *testing.B, report reportFunc) {
	cleanupAfter(b)
	cc := &cmdCounter{match: isEval}
	cc.on.Store(true)
	r := newRDB(b, 16, cc)

	type call struct {
		at               time.Time
		renewed, lost    int
		err              error
		evalsBeforeCount int64 // cc.cmds when the callback ran
	}
	var mu sync.Mutex
	var calls []call
	c := lock.New(r,
		lock.WithWatchdogTimeout(renewWatchdog),
		lock.WithRenewBatchSize(renewBatch),
		lock.WithHooks(lock.Hooks{Renewed: func(renewed, lost int, err error) {
			mu.Lock()
			calls = append(calls, call{at: time.Now(), renewed: renewed, lost: lost, err: err, evalsBeforeCount: cc.cmds.Load()})
			mu.Unlock()
		}}),
	)
	defer func() { _ = c.Close() }()

	ctx := context.Background()
	holds := make([]*lock.Hold, renewHolds)
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	prefix := keyName(b)
	var wg sync.WaitGroup
	const workers = 16
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < renewHolds; i += workers {
				h, err := c.Mutex(fmt.Sprintf("%s%d", prefix, i)).Lock(ctx)
				if err != nil {
					errs <- err
					return
				}
				holds[i] = h
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	allHeld := time.Now()
	// Wait for renewPeriods complete periods after allHeld, plus a margin.
	time.Sleep(time.Duration(renewPeriods+1)*renewWatchdog/3 + 200*time.Millisecond)
	mu.Lock()
	got := append([]call(nil), calls...)
	mu.Unlock()

	// Group calls into periods: a gap of more than a sixth of the watchdog
	// timeout starts a new burst.
	type burst struct {
		start, end          time.Time
		calls, renewed, bad int
		evals0, evals1      int64 // EVAL/EVALSHA count at the first and last call
	}
	var bursts []burst
	for i, cl := range got {
		if i == 0 || cl.at.Sub(got[i-1].at) > renewWatchdog/6 {
			bursts = append(bursts, burst{start: cl.at, evals0: cl.evalsBeforeCount})
		}
		bu := &bursts[len(bursts)-1]
		bu.end = cl.at
		bu.evals1 = cl.evalsBeforeCount
		bu.calls++
		bu.renewed += cl.renewed
		if cl.err != nil || cl.lost > 0 {
			bu.bad++
		}
	}
	var full []burst
	for _, bu := range bursts {
		if bu.start.After(allHeld) {
			full = append(full, bu)
		}
	}
	if len(full) > renewPeriods {
		full = full[:renewPeriods]
	}
	if len(full) == 0 {
		b.Fatalf("no renewal period observed (%d calls)", len(got))
	}
	var callsSum, renewedSum, bad int
	var evals int64
	var longest time.Duration
	for i, bu := range full {
		e := bu.evals1 - bu.evals0 + 1 // the hook counts a call before it runs, the callback after
		b.Logf("period %d: %d calls (Renewed hook), %d EVAL/EVALSHA (go-redis hook), %d holds renewed, %d failed calls, burst %v",
			i+1, bu.calls, e, bu.renewed, bu.bad, bu.end.Sub(bu.start))
		evals += e
		callsSum += bu.calls
		renewedSum += bu.renewed
		bad += bu.bad
		longest = max(longest, bu.end.Sub(bu.start))
	}
	n := float64(len(full))
	report(0, "ns/op")
	report(float64(callsSum)/n, "calls/period")
	report(float64(renewedSum)/n, "renewed/period")
	report(float64(bad), "failed-calls")
	report(float64(evals)/n, "evalsha/period")
	report(float64(longest.Microseconds())/1000, "burst-ms")

	for _, h := range holds {
		if err := h.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	runtime.ReadMemStats(&ms1)
	report(float64(ms1.TotalAlloc-ms0.TotalAlloc)/renewHolds, "B/op")
	report(float64(ms1.Mallocs-ms0.Mallocs)/renewHolds, "allocs/op")
}
