package main

import (
	"runtime/debug"
	"testing"
)

// tuneGC sets the collector's default only where GOGC is not set.
func TestTuneGC(t *testing.T) {
	percent := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(percent) })

	tuneGC(func(string) (string, bool) { return "", false })
	if p := debug.SetGCPercent(100); p != defaultGCPercent {
		t.Errorf("GOGC unset: GC percent %d; want %d", p, defaultGCPercent)
	}
	tuneGC(func(string) (string, bool) { return "200", true })
	if p := debug.SetGCPercent(100); p != 100 {
		t.Errorf("GOGC set in the environment: GC percent %d; want it left at 100", p)
	}
}
