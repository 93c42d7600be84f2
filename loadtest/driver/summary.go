package driver

import (
	"math"
	"net/http"
	"sort"
	"time"
)

// summarise fills the counts, rates, latencies and timeline, of the run
// and of each crowd.
func summarise(res *Result, cfg Config, buyers []buyer, attempts []attempt) {
	res.Statuses = map[string]int{}
	res.Outcomes = map[string]int{}
	res.Problems = map[string]int{}
	res.Requests = len(attempts)
	var last time.Duration
	n := int(math.Ceil(res.Seconds*float64(time.Second)/float64(BucketWidth))) + 1
	res.Timeline = Timeline{BucketMS: int(BucketWidth / time.Millisecond), Created: make([]int, n), Requests: make([]int, n)}
	for _, a := range attempts {
		if a.problem != "" {
			res.Problems[a.problem]++
		}
		bi := min(int(a.at/BucketWidth), n-1)
		res.Timeline.Requests[bi]++
		if a.status == "201" {
			res.Timeline.Created[bi]++
			last = max(last, a.at)
		}
	}
	all := tallyOf(attempts, buyers, func(int) bool { return true })
	res.BuyersRun = all.buyersRun
	res.Statuses, res.Outcomes, res.RateLimited, res.Busy = all.statuses, all.outcomes, all.rateLimited, all.busy
	res.RateLimitedBuyers, res.Created, res.Replayed, res.Latency = all.limitedBuyers, all.created, all.replayed, all.latency
	res.LastOrderSeconds = last.Seconds()
	if res.Seconds > 0 {
		res.OrdersPerSec = float64(res.Created) / res.Seconds
		res.RequestsPerSec = float64(res.Requests) / res.Seconds
	}
	if len(cfg.Crowds) == 0 {
		return
	}
	first := 0
	for _, cr := range cfg.Crowds {
		lo, hi := first, first+cr.Buyers
		first = hi
		t := tallyOf(attempts, buyers[lo:hi], func(i int) bool { return i >= lo && i < hi })
		res.Crowds = append(res.Crowds, CrowdResult{
			Name: cr.Name, FirstBuyer: lo, Buyers: cr.Buyers, Concurrency: cr.Concurrency, Retries: cr.Retries, Rate: cr.Rate,
			BuyersRun: t.buyersRun, Requests: t.requests, Statuses: t.statuses, Outcomes: t.outcomes,
			RateLimited: t.rateLimited, Busy: t.busy, RateLimitedBuyers: t.limitedBuyers,
			Created: t.created, Replayed: t.replayed, Latency: t.latency,
			FirstSent: t.firstSent.Seconds(), LastAnswer: t.lastAnswer.Seconds(),
		})
	}
}

// tally is the counts of some buyers and their requests.
type tally struct {
	requests, rateLimited, busy int
	buyersRun, limitedBuyers    int
	created, replayed           int
	statuses, outcomes          map[string]int
	latency                     Latency
	firstSent, lastAnswer       time.Duration
}

// tallyOf counts the attempts of the buyers that in selects, and those
// buyers that started (a buyer the duration cap kept from starting has no
// last status).
func tallyOf(attempts []attempt, buyers []buyer, in func(buyer int) bool) tally {
	t := tally{statuses: map[string]int{}, outcomes: map[string]int{}}
	lat := make([]time.Duration, 0, len(attempts))
	var sum time.Duration
	t.firstSent = -1
	for _, a := range attempts {
		if !in(a.buyer) {
			continue
		}
		t.requests++
		t.statuses[a.status]++
		if a.status == "429" {
			if a.problem == ProblemRateLimited {
				t.rateLimited++
			} else {
				t.busy++
			}
		}
		lat = append(lat, a.latency)
		sum += a.latency
		if sent := a.at - a.latency; t.firstSent < 0 || sent < t.firstSent {
			t.firstSent = sent
		}
		t.lastAnswer = max(t.lastAnswer, a.at)
	}
	t.firstSent = max(t.firstSent, 0)
	for i := range buyers {
		b := &buyers[i]
		if b.last == "" {
			continue
		}
		t.buyersRun++
		t.outcomes[b.last]++
		if b.limited {
			t.limitedBuyers++
		}
		if b.ack != nil {
			if b.ack.status == http.StatusCreated {
				t.created++
			} else {
				t.replayed++
			}
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	if len(lat) > 0 {
		t.latency = Latency{
			P50: ms(quantile(lat, .50)), P95: ms(quantile(lat, .95)), P99: ms(quantile(lat, .99)),
			Max: ms(lat[len(lat)-1]), Mean: ms(sum / time.Duration(len(lat))),
		}
	}
	return t
}

// quantile is the nearest-rank quantile of sorted durations.
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
