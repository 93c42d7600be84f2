package main

import (
	"io"
	"slices"
	"testing"
	"time"
)

// The Zipf picks are the same for the same seed, stay within the SKUs, and
// the more wanted a SKU by its rank, the more buyers pick it (checked on
// ranks far enough apart that a draw of 20,000 cannot swap them).
func TestZipfPicks(t *testing.T) {
	t.Parallel()
	a, b := zipfPicks(20_000, 100, 1.1, 44), zipfPicks(20_000, 100, 1.1, 44)
	if !slices.Equal(a, b) {
		t.Fatal("zipfPicks(20000, 100, 1.1, 44) differs between two calls")
	}
	counts := make([]int, 100)
	for _, k := range a {
		if k < 0 || k >= 100 {
			t.Fatalf("zipfPicks picked SKU %d; want 0..99", k)
		}
		counts[k]++
	}
	for _, pair := range [][2]int{{0, 1}, {1, 4}, {4, 19}, {19, 99}} {
		if counts[pair[0]] <= counts[pair[1]] {
			t.Errorf("SKU %d picked %d times, SKU %d %d times; want the first more", pair[0], counts[pair[0]], pair[1], counts[pair[1]])
		}
	}
	if one := zipfPicks(10, 1, 1.1, 1); slices.Max(one) != 0 {
		t.Errorf("zipfPicks over one SKU = %v; want all 0", one)
	}
}

func TestSpreadUnits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		units int64
		skus  int
		want  []int64
	}{
		{1000, 100, slices.Repeat([]int64{10}, 100)},
		{10, 4, []int64{3, 3, 2, 2}},
		{2, 3, []int64{1, 1, 0}},
	} {
		if got := spreadUnits(tc.units, tc.skus); !slices.Equal(got, tc.want) {
			t.Errorf("spreadUnits(%d, %d) = %v; want %v", tc.units, tc.skus, got, tc.want)
		}
	}
}

// The first senders are ordered by the time their request was written,
// those who never sent last; the share is of all the units won.
func TestFairness(t *testing.T) {
	t.Parallel()
	sent := []time.Duration{30, -1, 10, 20, 40}
	if got, want := sendOrder(sent), []int{2, 3, 0, 4, 1}; !slices.Equal(got, want) {
		t.Fatalf("sendOrder(%v) = %v; want %v", sent, got, want)
	}
	won := []int64{1, 0, 1, 0, 1} // buyers 0, 2 and 4 won
	order := sendOrder(sent)
	for _, tc := range []struct {
		n    int
		want float64
	}{{1, 1.0 / 3}, {2, 1.0 / 3}, {3, 2.0 / 3}, {5, 1}, {9, 1}} {
		if got := unitShare(order, won, tc.n); got != tc.want {
			t.Errorf("unitShare(%v, %v, %d) = %v; want %v", order, won, tc.n, got, tc.want)
		}
	}
	if got := unitShare(order, make([]int64, 5), 2); got != 0 {
		t.Errorf("unitShare with no unit won = %v; want 0", got)
	}
	f := openFigures{units: 2, buyers: 5, keys: []string{"k0", "k1", "k2", "k3", "k4"}, sent: sent,
		db: openDB{byKey: map[string]int64{"k0": 1, "k2": 1, "k4": 1}}}
	f.fairness()
	if f.firstShare != 1.0/3 || f.expected != 0.4 {
		t.Errorf("fairness: first share %v, expected %v; want 1/3 and 0.4", f.firstShare, f.expected)
	}
}

// finish counts the first second's answers and their latency (from
// the request written to the answer), the final answers, 5xx, failures and
// sale-not-started answers.
func TestBuyerFigures(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	results := []buyerResult{
		{Tries: []openTry{{Sent: 5 * ms, At: 105 * ms, Status: 201}}},
		{Tries: []openTry{{Sent: 6 * ms, At: 306 * ms, Status: 409, Kind: "sold-out"}}},
		{Tries: []openTry{{Sent: 7 * ms, At: 1507 * ms, Status: 503, Kind: "overloaded"}, {Sent: 2 * time.Second, At: 2100 * ms, Status: 201}}},
		{Tries: []openTry{{Sent: -2 * ms, At: 3 * ms, Status: 409, Kind: "sale-not-started"}, {Sent: 5 * ms, At: 805 * ms, Status: 409, Kind: "sold-out"}}},
		{Tries: []openTry{{Sent: 8 * ms, At: 900 * ms}}, Err: "unexpected EOF"},
		{Warm: "connection refused"},
	}
	shape := openShape{units: []int64{2}, picks: make([]int, len(results))}
	f := openFigures{results: results, keys: []string{"a", "b", "c", "d", "e", "f"}}
	f.finish(shape, 2)
	if f.firstSec != 4 || f.p50 != 300 || f.maxMS != 800 {
		t.Errorf("first second: %d answers, p50 %v ms, max %v ms; want 4, 300, 800 (p50: the 3rd of 5, 100, 300, 800 ms)", f.firstSec, f.p50, f.maxMS)
	}
	if f.fiveXX != 1 || f.failed != 1 || f.early != 1 || f.warmFailed != 1 || f.retried != 2 || f.ordered != 5 {
		t.Errorf("5xx %d, failed %d, early %d, warm failed %d, retried %d, ordered %d; want 1, 1, 1, 1, 2, 5",
			f.fiveXX, f.failed, f.early, f.warmFailed, f.retried, f.ordered)
	}
	if got, want := f.finalsText(), "201: 2, 409 sold-out: 2, no answer: 1, not sent: 1"; got != want {
		t.Errorf("finals %q; want %q", got, want)
	}
	if got, want := f.sentAgainText(), "2 (409 sale-not-started: 1, 503 overloaded: 1)"; got != want {
		t.Errorf("sent again %q; want %q", got, want)
	}
	if f.firstP50 != 306*ms || f.firstP99 != 1507*ms {
		t.Errorf("first answers p50 %v, p99 %v; want 306ms, 1.507s (of 3, 105, 306, 1507 ms)", f.firstP50, f.firstP99)
	}
	if f.lastAnswer != 2100*ms || f.goalMet() {
		t.Errorf("last answer %v, goal met %v; want 2.1s, false", f.lastAnswer, f.goalMet())
	}
}

func TestSplitCrowds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ n, per, crowds int }{{20_000, 8000, 3}, {2000, 8000, 1}, {16_000, 8000, 2}, {0, 8000, 1}} {
		got := splitCrowds(tc.n, tc.per)
		seen := 0
		for _, g := range got {
			if len(g) > tc.per {
				t.Errorf("splitCrowds(%d, %d): a crowd of %d", tc.n, tc.per, len(g))
			}
			seen += len(g)
		}
		if len(got) != tc.crowds || seen != tc.n {
			t.Errorf("splitCrowds(%d, %d) = %d crowds of %d buyers; want %d of %d", tc.n, tc.per, len(got), seen, tc.crowds, tc.n)
		}
	}
}

func TestOpenFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		flags   []string
		prewarm []string
		shapes  []string
		wantErr bool
	}{
		{nil, []string{"0", "default"}, []string{"hot", "zipf"}, false},
		{[]string{"-open-prewarm", "0,10s,default"}, []string{"0", "10s", "default"}, []string{"hot", "zipf"}, false},
		{[]string{"-open-prewarm", "soon"}, nil, nil, true},
		{[]string{"-open-zipf", "1"}, nil, nil, true},
		{[]string{"-open-skus", "0", "-open-zipf", "1"}, []string{"0", "default"}, []string{"hot"}, false},
		{[]string{"-open-shapes", "zipf"}, []string{"0", "default"}, []string{"zipf"}, false},
		{[]string{"-open-shapes", "zipf", "-open-skus", "0"}, nil, nil, true},
		{[]string{"-open-shapes", "cold"}, nil, nil, true},
		{[]string{"-open-strategy", "fastest"}, nil, nil, true},
	} {
		args := append([]string{"demo", "-phases", "open"}, c.flags...)
		o, err := parseOptions(args, io.Discard)
		if c.wantErr {
			if err == nil {
				t.Errorf("parseOptions(%q) = nil error; want one", args)
			}
			continue
		}
		if err != nil || o.open == nil || !slices.Equal(o.open.prewarm, c.prewarm) || o.open.buyers != 20_000 || o.open.strategy != "lock+version" {
			t.Errorf("parseOptions(%q) = %+v, %v; want STOCK_PREWARM %v, 20000 buyers, lock+version", args, o.open, err, c.prewarm)
			continue
		}
		var shapes []string
		for _, sh := range o.open.shapes() {
			shapes = append(shapes, sh.name)
		}
		if !slices.Equal(shapes, c.shapes) {
			t.Errorf("parseOptions(%q): sales %v; want %v", args, shapes, c.shapes)
		}
	}
}
