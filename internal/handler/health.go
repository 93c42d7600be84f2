package handler

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
)

// Check is one readiness check.
type Check struct {
	Name     string
	Required bool // false: reported, but a failure keeps the instance ready
	Fn       func(ctx context.Context) error
}

// readyTimeout bounds one round of the readiness checks.
const readyTimeout = 2 * time.Second

func (h *Handler) healthz(c *gin.Context) {
	writeJSON(c, http.StatusOK, gin.H{"status": "ok"})
}

func (h *Handler) readyz(c *gin.Context) {
	r, ok := h.ready.result(c.Request.Context())
	if !ok {
		writeJSON(c, http.StatusServiceUnavailable, gin.H{"status": "not ready", "checks": gin.H{}})
		return
	}
	if !r.ready {
		writeJSON(c, http.StatusServiceUnavailable, gin.H{"status": "not ready", "checks": r.checks})
		return
	}
	writeJSON(c, http.StatusOK, gin.H{"status": "ready", "checks": r.checks})
}

// readiness runs the readiness checks at most one round at a time and
// answers from the last round while it is younger than maxAge, so probes
// (or anyone calling /readyz in a loop) cost MySQL and Redis one ping per
// check per maxAge, whatever their number.
type readiness struct {
	checks []Check
	maxAge time.Duration

	mu      sync.Mutex
	last    readyResult
	at      time.Time     // when the round of last began; zero: none yet
	running chan struct{} // closed when the round in progress ends; nil: none
}

// readyResult is one round's outcome: each check "up" or "down".
type readyResult struct {
	ready  bool
	checks map[string]string
}

// result returns a round at most maxAge old, waiting for the round in
// progress (or starting one) when the last is older; false when ctx ends
// first.
func (r *readiness) result(ctx context.Context) (readyResult, bool) {
	r.mu.Lock()
	if !r.at.IsZero() && time.Since(r.at) < r.maxAge {
		res := r.last
		r.mu.Unlock()
		return res, true
	}
	done := r.running
	if done == nil {
		done = make(chan struct{})
		r.running = done
		// The round is shared: a caller that leaves must not cancel it.
		go r.run(context.WithoutCancel(ctx), done)
	}
	r.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return readyResult{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last, true
}

// run is one round of the checks; it closes done when its result is in.
func (r *readiness) run(ctx context.Context, done chan struct{}) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	res := readyResult{ready: true, checks: make(map[string]string, len(r.checks))}
	for _, chk := range r.checks {
		if err := chk.Fn(ctx); err != nil {
			res.checks[chk.Name] = "down"
			if chk.Required {
				res.ready = false
			}
			continue
		}
		res.checks[chk.Name] = "up"
	}
	r.mu.Lock()
	r.last, r.at, r.running = res, start, nil
	r.mu.Unlock()
	close(done)
}
