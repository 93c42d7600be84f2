package service

import (
	"errors"
	"fmt"
	"time"
)

// Status is an order's status: reserved until it is paid, cancelled or
// expired, then one of the three final statuses.
type Status string

// The order statuses.
const (
	StatusReserved  Status = "reserved"
	StatusConfirmed Status = "confirmed"
	StatusCancelled Status = "cancelled"
	StatusExpired   Status = "expired"
)

// Statuses is every order status, in the order an order can pass them.
var Statuses = []Status{StatusReserved, StatusConfirmed, StatusCancelled, StatusExpired}

// final is a final status: the op that leads to it and the error that
// refuses every other op asked of an order in it.
type final struct {
	status  Status
	op      Op
	refusal *Error
}

// finals is the one list of final statuses; Decide, Refusal and the
// metrics' outcome read it.
var finals = [...]final{
	{StatusConfirmed, OpConfirm, ErrOrderConfirmed},
	{StatusCancelled, OpCancel, ErrOrderCancelled},
	{StatusExpired, OpExpire, ErrOrderExpired},
}

// Final reports whether s is a final status.
func (s Status) Final() bool {
	_, ok := finalOf(s)
	return ok
}

// Returns reports whether moving to s gives the order's units back.
func (s Status) Returns() bool { return s == StatusCancelled || s == StatusExpired }

// finalOf is s's row of finals.
func finalOf(s Status) (final, bool) {
	for _, f := range finals {
		if f.status == s {
			return f, true
		}
	}
	return final{}, false
}

// statusOf is the final status op leads a reserved order to.
func statusOf(op Op) Status {
	for _, f := range finals {
		if f.op == op {
			return f.status
		}
	}
	return StatusReserved
}

// Refusal reports whether err is a final status refusing an op
// (ErrOrderConfirmed, ErrOrderCancelled or ErrOrderExpired), and which.
func Refusal(err error) (Status, bool) {
	for _, f := range finals {
		if errors.Is(err, f.refusal) {
			return f.status, true
		}
	}
	return "", false
}

// NewOrderStatus is the status and deadline of an order placed on a SKU
// with a payment window of windowSeconds when the store's clock reads now:
// reserved until now plus the window, or confirmed at once (no window).
// Both stores take now after the last lock the write waits for, so a
// deadline is never counted from before a wait.
func NewOrderStatus(windowSeconds int64, now time.Time) (Status, *Deadline) {
	if windowSeconds <= 0 {
		return StatusConfirmed, nil
	}
	return StatusReserved, &Deadline{Time: now.Add(time.Duration(windowSeconds) * time.Second).UTC().Truncate(time.Microsecond)}
}

// DeadlineSlack is how far a written deadline may trail NewOrderStatus at
// commit before a store rewrites it: a store that reads its clock before
// a wait it cannot rule out rewrites the deadline after the wait when it
// came to more than this.
const DeadlineSlack = 50 * time.Millisecond

// statusError is the answer to an op an order's final status refuses.
func statusError(s Status) error {
	if f, ok := finalOf(s); ok {
		return f.refusal
	}
	return fmt.Errorf("service: order in unknown status %q", s)
}
