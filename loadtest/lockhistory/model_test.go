package lockhistory_test

import (
	"testing"
	"time"

	"github.com/seckill/stock/loadtest/lockhistory"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func op(client int, fence, read int64, out lockhistory.Outcome, call, ret int) lockhistory.Op {
	return lockhistory.Op{Client: client, Fence: fence, Read: read, Wrote: read + 1, Outcome: out, Call: at(call), Return: at(ret)}
}

const applied, refused, unknown = lockhistory.Applied, lockhistory.Refused, lockhistory.Unknown

// The checker's verdicts on hand-made histories: the model and porcupine
// both have to be right for every one of them.
func TestCheckHandMade(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []lockhistory.Op
		want bool
	}{
		{"one after the other", []lockhistory.Op{op(0, 1, 0, applied, 0, 10), op(1, 2, 1, applied, 11, 20), op(0, 3, 2, applied, 21, 30)}, true},
		{"overlapping but each read the other's write", []lockhistory.Op{op(0, 1, 0, applied, 0, 20), op(1, 2, 1, applied, 10, 30)}, true},
		// Two holders at once: both read 0 and wrote 1. No order of the
		// two has the second read what the first wrote.
		{"two holders read the same value (lost update)", []lockhistory.Op{op(0, 1, 0, applied, 0, 20), op(1, 2, 0, applied, 5, 15)}, false},
		{"a read of a value never written", []lockhistory.Op{op(0, 1, 0, applied, 0, 10), op(1, 2, 5, applied, 11, 20)}, false},
		{"a stale read after the write, not overlapping", []lockhistory.Op{op(0, 1, 0, applied, 0, 10), op(1, 2, 0, applied, 11, 20)}, false},
		// The paused holder's write was refused by the fence: it read 0
		// before the next holder wrote, and changed nothing.
		{"the stale holder's write refused", []lockhistory.Op{op(0, 1, 0, refused, 0, 30), op(1, 2, 0, applied, 5, 15), op(1, 3, 1, applied, 31, 40)}, true},
		// Fencing the write alone leaves a gap: the stale holder (fence 1)
		// writes after the next holder (fence 2) read but before it wrote;
		// its fence is still the newest written, so both writes land.
		{"a write-fenced gap: the stale write lands mid-section", []lockhistory.Op{op(0, 1, 0, applied, 0, 12), op(1, 2, 0, applied, 5, 15)}, false},
		{"a refused write that read a value never there", []lockhistory.Op{op(0, 1, 3, refused, 0, 10)}, false},
		// A write whose reply was lost may have landed or not: both
		// continuations are linearizable.
		{"an unknown write that landed", []lockhistory.Op{op(0, 1, 0, unknown, 0, 10), op(1, 2, 1, applied, 11, 20)}, true},
		{"an unknown write that did not land", []lockhistory.Op{op(0, 1, 0, unknown, 0, 10), op(1, 2, 0, applied, 11, 20)}, true},
	} {
		v := lockhistory.Check(tc.ops, 10*time.Second)
		if v.Unknown || v.Linearizable != tc.want {
			t.Errorf("%s: %s; want linearizable %v", tc.name, v, tc.want)
		}
	}
}

// Overlaps counts the pairs of applied sections that ran at once.
func TestOverlaps(t *testing.T) {
	ops := []lockhistory.Op{op(0, 1, 0, applied, 0, 20), op(1, 2, 0, applied, 5, 15), op(2, 3, 1, refused, 10, 12), op(0, 4, 1, applied, 30, 40)}
	if n := lockhistory.Overlaps(ops); n != 1 {
		t.Errorf("Overlaps = %d; want 1", n)
	}
}
