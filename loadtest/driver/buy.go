package driver

import (
	"context"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill/stock/client"
	"github.com/seckill/stock/internal/auth"
)

// buy runs every buyer, each crowd with its own workers, and returns each
// buyer's outcome and every request.
func (r *runner) buy(ctx context.Context, res *Result) ([]buyer, []attempt) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Duration)
	defer cancel()
	buyers := make([]buyer, r.cfg.Buyers)
	perWorker := make([][]attempt, r.cfg.Concurrency)
	crowds := r.cfg.crowds()
	nexts := make([]atomic.Int64, len(crowds))
	var wg sync.WaitGroup
	r.start = time.Now()
	res.Started = r.start
	w, first := 0, 0
	for k, cr := range crowds {
		lo := first // the crowd's first buyer
		for range cr.Concurrency {
			log := &perWorker[w]
			w++
			wg.Go(func() {
				for {
					j := int(nexts[k].Add(1) - 1)
					if j >= cr.Buyers || ctx.Err() != nil {
						return
					}
					if cr.Rate > 0 && !r.sleepUntil(ctx, time.Duration(float64(j)/cr.Rate*float64(time.Second))) {
						return // the cap came first: not started
					}
					i := lo + j
					buyers[i].last = "aborted" // started; replaced by its outcome
					if ctx.Err() != nil {
						return
					}
					buyers[i] = r.buyer(ctx, i, cr.Retries, log)
				}
			})
		}
		first += cr.Buyers
	}
	wg.Wait()
	res.Seconds = time.Since(r.start).Seconds()
	res.Aborted = ctx.Err() != nil
	var all []attempt
	for _, a := range perWorker {
		all = append(all, a...)
	}
	return buyers, all
}

// sleepUntil waits until offset into the buying phase; false if ctx ended first.
func (r *runner) sleepUntil(ctx context.Context, offset time.Duration) bool {
	d := time.Until(r.start.Add(offset))
	if d <= 0 {
		return ctx.Err() == nil
	}
	return Sleep(ctx, d)
}

// buyer places one order under one key, retrying (at most retries times)
// with that key while the answer is "not now" (429, 502, 503, 504 or none).
func (r *runner) buyer(ctx context.Context, i, retries int, log *[]attempt) buyer {
	c, err := r.buyerClient(i)
	if err != nil {
		return buyer{last: "token: " + err.Error()}
	}
	if r.cfg.ClientIP != nil {
		ctx = withClientIP(ctx, r.cfg.ClientIP(i))
	}
	u, key := i%len(r.cfg.URLs), keyOf(r.runID, i)
	var b buyer
	for try := 0; ; try++ {
		base := r.cfg.URLs[u]
		sent := time.Now()
		placed, err := c(u).Place(ctx, key, r.sku, r.cfg.Quantity)
		d := time.Since(sent)
		ans, answered := answerOf(PlacedStatus(placed), err)
		if !answered && ctx.Err() != nil {
			// The duration cap, not the server: neither an answer nor a latency.
			b.last, b.answered, b.limited = "aborted", false, false
			return b
		}
		status := "no-response"
		if answered {
			status = strconv.Itoa(ans.status)
		}
		*log = append(*log, attempt{buyer: i, at: time.Since(r.start), latency: d, status: status, problem: ans.problem})
		if r.cfg.Observe != nil {
			r.cfg.Observe(Event{Buyer: i, Try: try, URL: base, Sent: sent, At: sent.Add(d), Status: status, Problem: ans.problem})
		}
		if r.cfg.Failover && (!answered || gatewayDown(ans.status)) {
			u = (u + 1) % len(r.cfg.URLs)
		}
		b.last, b.answered = status, answered
		b.limited = answered && rateLimited(ans.status, ans.problem)
		switch {
		case !answered:
		case err == nil:
			b.ack = &ack{buyer: i, status: ans.status, order: placed.Order}
			return b
		case ans.status == http.StatusTooManyRequests, gatewayDown(ans.status):
		default: // 409 sold out, or a 4xx that will not change
			return b
		}
		if try >= retries || !Sleep(ctx, backoff(ans.retryAfter, try)) {
			return b
		}
	}
}

// buyerClient is buyer i's client of the instance u: with its token when
// the instances check tokens.
func (r *runner) buyerClient(i int) (func(u int) *client.Client, error) {
	if r.cfg.JWTSecret == "" {
		return func(u int) *client.Client { return r.apis[u] }, nil
	}
	tok, err := auth.Mint([]byte(r.cfg.JWTSecret), r.cfg.BuyerID(r.runID, i), time.Hour, "", "")
	if err != nil {
		return nil, err
	}
	as := make([]*client.Client, len(r.apis))
	for u, c := range r.apis {
		as[u] = c.As(tok)
	}
	return func(u int) *client.Client { return as[u] }, nil
}

// gatewayDown reports a 502, 503 or 504: the instance (or the proxy's way
// to it) is not there now.
func gatewayDown(status int) bool {
	return status == http.StatusBadGateway || status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout
}

// Sleep waits d; false if ctx ended first.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// ProblemRateLimited is the problem kind of a 429 from the per-client-IP
// rate limit; any other 429 (the SKU's line is full: "busy") counts as busy.
const ProblemRateLimited = "rate-limited"

func rateLimited(status int, problem string) bool {
	return status == http.StatusTooManyRequests && problem == ProblemRateLimited
}

// backoff is the pause before retry number try+1: Retry-After when the
// answer gave one, else 50ms doubling, capped at 5s, with +-50% jitter.
func backoff(retryAfter time.Duration, try int) time.Duration {
	base := 0.05 * math.Pow(2, float64(try))
	if retryAfter > 0 {
		base = retryAfter.Seconds()
	}
	return time.Duration(min(base, 5) * (0.5 + mrand.Float64()) * float64(time.Second)) //nolint:gosec // G404: jitter, not a secret
}
