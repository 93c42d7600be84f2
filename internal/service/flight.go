package service

import (
	"context"
	"fmt"
	"sync"
)

// flights are the idempotency keys with an attempt in progress at this
// instance. A second request with a key in flight waits for the first to
// end, then decides from what the first left in MySQL: a replay of its
// order, or a fresh attempt. Without this, a retry could be told "sold out"
// by the pre-check while the first attempt still waited in the queue, and the
// first then place the order after a restock: a final answer contradicted by
// what is later written for the key. Across instances the unique key decides
// (a concurrent insert of the same key fails and is answered by a replay).
type flights struct {
	mu sync.Mutex
	m  map[string]*flight
}

type flight struct{ done chan struct{} }

// begin waits until no attempt of key is in flight here, then registers
// this one; the returned func ends it. It returns an error wrapping
// ErrInProgress when ctx ends first.
func (f *flights) begin(ctx context.Context, key string) (func(), error) {
	for {
		f.mu.Lock()
		cur := f.m[key]
		if cur == nil {
			fl := &flight{done: make(chan struct{})}
			f.m[key] = fl
			f.mu.Unlock()
			return func() {
				f.mu.Lock()
				delete(f.m, key)
				f.mu.Unlock()
				close(fl.done)
			}, nil
		}
		f.mu.Unlock()
		select {
		case <-cur.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", ErrInProgress, ctx.Err())
		}
	}
}
