package service

import (
	"context"
	"os"
	"strings"
	"testing"
)

func newCalls(n int) []*call {
	cs := make([]*call, n)
	for i := range cs {
		cs[i] = &call{ctx: context.Background(), d: Deduction{Quantity: i}, done: make(chan struct{})}
	}
	return cs
}

// Calls that leave are skipped, the rest are taken in arrival order, the
// cap counts live calls only, and an idle line is forgotten.
func TestLineLeaveTakeAndCap(t *testing.T) {
	ls := newLines()
	cs := newCalls(10_000)
	for i, c := range cs {
		ok, lead := ls.join("sku", c, len(cs))
		if !ok || lead != (i == 0) {
			t.Fatalf("join %d = %v, %v; want ok, lead only for the first", i, ok, lead)
		}
	}
	if ok, _ := ls.join("sku", newCalls(1)[0], len(cs)); ok {
		t.Fatal("join past the cap succeeded")
	}
	for i, c := range cs {
		if i%2 == 1 && !ls.leave("sku", c) {
			t.Fatalf("leave %d = false; want true (not taken)", i)
		}
	}
	if n := ls.waiting("sku"); n != 5000 {
		t.Fatalf("waiting after 5000 of 10000 left = %d; want 5000", n)
	}
	if ok, _ := ls.join("sku", newCalls(1)[0], 5001); !ok {
		t.Fatal("join with 5000 live under a cap of 5001 refused; the cap must not count calls that left")
	}
	want := 0
	for {
		b := ls.take("sku", 64)
		if b == nil {
			break
		}
		for _, c := range b {
			if want < 10_000 && c.d.Quantity != want {
				t.Fatalf("took call %d; want %d (arrival order, skipping those that left)", c.d.Quantity, want)
			}
			if ls.leave("sku", c) {
				t.Fatal("a taken call could leave")
			}
			want += 2
		}
	}
	if want != 10_002 {
		t.Fatalf("took up to %d; want every live call", want)
	}
	if n := len(ls.shard("sku").m); n != 0 {
		t.Fatalf("%d lines left after the last take; want the idle line forgotten", n)
	}
}

// BenchmarkLineLeave is the cost of one request giving up while 10,000 of
// its SKU wait (it was O(length) under one mutex for all SKUs).
func BenchmarkLineLeave(b *testing.B) {
	const n = 10_000
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		ls := newLines()
		cs := newCalls(n)
		for _, c := range cs {
			ls.join("sku", c, n)
		}
		b.StartTimer()
		for _, c := range cs {
			ls.leave("sku", c)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/leave")
}

// BenchmarkLineFull is the cost of refusing an order past the cap.
func BenchmarkLineFull(b *testing.B) {
	ls := newLines()
	cs := newCalls(2000)
	for _, c := range cs {
		ls.join("sku", c, len(cs))
	}
	extra := newCalls(1)[0]
	b.ReportAllocs()
	for b.Loop() {
		if ok, _ := ls.join("sku", extra, len(cs)); ok {
			b.Fatal("joined past the cap")
		}
	}
}

// The README's strategy table is the one the service renders from its own
// table, so the two cannot drift.
func TestREADMEStrategyTable(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := StrategyMarkdown(); !strings.Contains(string(b), want) {
		t.Fatalf("README.md lacks the strategy table of internal/service/strategy.go; paste this:\n%s", want)
	}
	for _, s := range strategyTable {
		if s.UsesLock != (s.Name == StrategyLock || s.Name == StrategyLockVersion) || s.Retries <= 0 {
			t.Errorf("%s: inconsistent row %+v", s.Name, s)
		}
	}
}
