// Package lockhistory is Jepsen's lock workload for the SKU lock's gates,
// checked with porcupine: clients take the lock, read a register, wait,
// write the value + 1 and release, and every critical section is recorded
// with its start, end and fencing token. The history is linearizable when
// the critical sections can be put in one order, each inside its own
// interval, in which every one read what the previous one wrote: a lost
// update (two holders that read the same value) is not.
package lockhistory

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"
)

// Outcome is what became of a critical section's write.
type Outcome int

const (
	// Applied means the register took the write.
	Applied Outcome = iota
	// Refused means a fenced register refused it (a newer fence had been seen).
	Refused
	// Unknown means the write's reply was lost; it may or may not have landed.
	Unknown
)

func (o Outcome) String() string {
	return [...]string{"applied", "refused", "unknown"}[o]
}

// Op is one critical section: the value it read, the value it wrote and
// what became of the write, between Call (before the read) and Return
// (after the write's reply).
type Op struct {
	Client       int
	Fence        int64
	Read, Wrote  int64
	Outcome      Outcome
	Call, Return time.Time
}

// Model is the register under read-then-write critical sections: one
// whose read saw the current value moves it to what it wrote (Applied),
// leaves it (Refused), or either (Unknown); one whose read did not see the
// current value cannot be placed there.
func Model() porcupine.Model {
	m := porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{int64(0)} },
		Step: func(state, input, output interface{}) []interface{} {
			s, op := state.(int64), input.(Op)
			if op.Read != s {
				return nil
			}
			switch op.Outcome {
			case Applied:
				return []interface{}{op.Wrote}
			case Refused:
				return []interface{}{s}
			}
			return []interface{}{s, op.Wrote}
		},
		DescribeOperation: func(input, _ interface{}) string {
			op := input.(Op)
			return fmt.Sprintf("client %d fence %d: read %d, write %d %s", op.Client, op.Fence, op.Read, op.Wrote, op.Outcome)
		},
		DescribeState: func(state interface{}) string { return fmt.Sprint(state) },
	}
	return m.ToModel()
}

// Verdict is the checker's answer on one history.
type Verdict struct {
	Ops          int
	Linearizable bool
	// Unknown: the checker ran out of time (neither proof nor violation).
	Unknown bool
	Info    porcupine.LinearizationInfo
}

// Check checks ops against Model within timeout. Ops with an Unknown
// write are open-ended (they may take effect any time after their call).
func Check(ops []Op, timeout time.Duration) Verdict {
	var h []porcupine.Operation
	var first time.Time
	for _, op := range ops {
		if first.IsZero() || op.Call.Before(first) {
			first = op.Call
		}
	}
	for _, op := range ops {
		ret := op.Return.Sub(first).Nanoseconds()
		if op.Outcome == Unknown {
			ret = 1 << 62
		}
		h = append(h, porcupine.Operation{ClientId: op.Client, Input: op, Output: nil,
			Call: op.Call.Sub(first).Nanoseconds(), Return: ret})
	}
	res, info := porcupine.CheckOperationsVerbose(Model(), h, timeout)
	return Verdict{Ops: len(ops), Linearizable: res == porcupine.Ok, Unknown: res == porcupine.Unknown, Info: info}
}

// String is "linearizable", "NOT linearizable" or "unknown (timed out)".
func (v Verdict) String() string {
	switch {
	case v.Unknown:
		return "unknown (timed out)"
	case v.Linearizable:
		return "linearizable"
	}
	return "NOT linearizable"
}

// Overlaps counts pairs of critical sections whose intervals overlap
// while both wrote (two holders at once, whatever the register made of
// it).
func Overlaps(ops []Op) int {
	n := 0
	for i := range ops {
		for j := i + 1; j < len(ops); j++ {
			a, b := ops[i], ops[j]
			if a.Outcome == Applied && b.Outcome == Applied && a.Call.Before(b.Return) && b.Call.Before(a.Return) {
				n++
			}
		}
	}
	return n
}
