package main

import (
	"math"
	"runtime/debug"
	"testing"
)

// tuneGC sets the collector's defaults only where GOGC and GOMEMLIMIT are
// not set.
func TestTuneGC(t *testing.T) {
	percent, limit := debug.SetGCPercent(100), debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetGCPercent(percent); debug.SetMemoryLimit(limit) })

	tuneGC(func(string) (string, bool) { return "", false })
	if p, l := debug.SetGCPercent(100), debug.SetMemoryLimit(math.MaxInt64); p != defaultGCPercent || l != defaultMemoryLimit {
		t.Errorf("unset: GC percent %d, memory limit %d; want %d and %d", p, l, defaultGCPercent, defaultMemoryLimit)
	}
	tuneGC(func(string) (string, bool) { return "200", true })
	if p, l := debug.SetGCPercent(100), debug.SetMemoryLimit(math.MaxInt64); p != 100 || l != math.MaxInt64 {
		t.Errorf("set in the environment: GC percent %d, memory limit %d; want them left at 100 and no limit", p, l)
	}
}
