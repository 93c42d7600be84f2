package main

import "runtime/debug"

// The collector's defaults for this process, where the runtime's own are
// not set: a request-heavy service whose live heap is small collects far
// more often than it needs at GOGC=100 (each collection also scans every
// connection's goroutine stack). A collection per 400% of growth, with a
// soft limit that keeps the process's memory well under 100 MiB.
const (
	defaultGCPercent   = 400
	defaultMemoryLimit = 80 << 20
)

// tuneGC sets defaultGCPercent unless GOGC is set, and defaultMemoryLimit
// unless GOMEMLIMIT is set (the runtime reads both from the environment
// itself, at start).
func tuneGC(lookup func(string) (string, bool)) {
	if _, ok := lookup("GOGC"); !ok {
		debug.SetGCPercent(defaultGCPercent)
	}
	if _, ok := lookup("GOMEMLIMIT"); !ok {
		debug.SetMemoryLimit(defaultMemoryLimit)
	}
}
