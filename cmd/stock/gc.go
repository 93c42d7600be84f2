package main

import "runtime/debug"

// defaultGCPercent is the collector's setting of this process where GOGC is
// not set: a request-heavy service whose live heap is small collects far
// more often than it needs at GOGC=100 (and each collection scans every
// connection's goroutine stack). No memory limit is set by default: a
// crowd of connections needs more than a small one would leave, and a
// collector chasing a limit it cannot meet takes half the CPU; set
// GOMEMLIMIT to the container's memory (deploy/k8s does).
const defaultGCPercent = 400

// tuneGC sets defaultGCPercent unless GOGC is set (the runtime reads GOGC
// from the environment itself, at start).
func tuneGC(lookup func(string) (string, bool)) {
	if _, ok := lookup("GOGC"); !ok {
		debug.SetGCPercent(defaultGCPercent)
	}
}
