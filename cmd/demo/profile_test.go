package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/seckill/stock/loadtest/driver"
)

// The profile document is written from a real CPU profile: the samples
// line, the machine table, one row per part, and pprof's tables.
func TestProfileDoc(t *testing.T) {
	var prof bytes.Buffer
	if err := pprof.StartCPUProfile(&prof); err != nil {
		t.Fatal(err)
	}
	before := procCPU(os.Getpid())
	// Half a second of this process's CPU, not of the clock: on a busy
	// machine the clock's 300 ms held too few samples.
	var sink []string
	for deadline := time.Now().Add(time.Minute); procCPU(os.Getpid())-before < 0.5 && time.Now().Before(deadline); {
		for range 10_000 {
			sink = append(sink, strings.Repeat("x", 64)) // allocates: some GC too
			if len(sink) > 1e5 {
				sink = sink[:0]
			}
		}
	}
	pprof.StopCPUProfile()
	if after := procCPU(os.Getpid()); after <= before {
		t.Fatalf("procCPU of this process went from %v to %v over 300 ms of work", before, after)
	}
	var allocs bytes.Buffer
	if err := pprof.Lookup("allocs").WriteTo(&allocs, 0); err != nil {
		t.Fatal(err)
	}
	p := &profiler{split: []cpuShare{{"the test", 0.9}}, allocs: allocs.Bytes(), secs: 1, instances: 2,
		window: serverCounts{orders: 100, mysql: map[string]int64{"Questions": 250}, redis: map[string]int64{"evalsha": 50}}}
	o := options{goTool: "go", profile: filepath.Join(t.TempDir(), "profile.md")}
	res := &driver.Result{Label: "lock+version", Buyers: 10, Concurrency: 2, OrdersPerSec: 100, Passed: true}
	if err := writeProfileDoc(context.Background(), o, p, prof.Bytes(), res, []driver.RateResult{{Name: ceilingHealthz, PerSec: 1000}}); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(o.profile)
	if err != nil {
		t.Fatal(err)
	}
	// pprof's tables are there; which functions head them depends on where
	// the samples fell (under the race detector, often in its runtime).
	for _, want := range []string{"Samples: ", "| the test | 0.90 |", "orders/s = 0.100x", "## Top functions by cumulative time", "flat%",
		"## Per order", "| the test | 9000.0 |", "| MySQL Questions | 2.500 |", "| Redis evalsha | 0.500 |", "per order of its share",
		"## Instance 0's allocations by function, bytes over the window (`profile.allocs.pb.gz`)", "alloc_space"} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("profile document lacks %q:\n%s", want, doc)
		}
	}
	if m := regexp.MustCompile(`share \(buyer i orders from instance i mod 2\): ([0-9]+) bytes`).FindStringSubmatch(string(doc)); m == nil || m[1] == "0" {
		t.Errorf("no allocations per order from the allocation profile:\n%s", doc)
	}
	if n := strings.Count(string(doc), "% |\n"); n != len(profileShares) {
		t.Errorf("%d share rows; want %d:\n%s", n, len(profileShares), doc)
	}
	if _, err := os.Stat(strings.TrimSuffix(o.profile, ".md") + ".pb.gz"); err != nil {
		t.Error(err)
	}
}
