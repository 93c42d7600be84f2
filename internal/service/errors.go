package service

import (
	"errors"
	"fmt"
)

// The service's errors: one type, so a caller can tell them from any other.

// Error is the type of every error of the service contract below, so a
// caller can tell them from any other error (IsError) without a list that
// could drift: a new one is covered by being declared here.
type Error struct{ msg string }

func (e *Error) Error() string { return e.msg }

// IsError reports whether err is, or wraps, one of the service's errors.
func IsError(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

// Errors of the service contract. The handler maps each to one HTTP status.
var (
	// ErrInvalid is wrapped by every validation error; the message says which field.
	ErrInvalid = &Error{msg: "service: invalid input"}
	// ErrUnknownSKU: no stock row for the SKU.
	ErrUnknownSKU = &Error{msg: "service: unknown sku"}
	// ErrOrderNotFound: no order with that id or key.
	ErrOrderNotFound = &Error{msg: "service: order not found"}
	// ErrSoldOut: available < quantity.
	ErrSoldOut = &Error{msg: "service: sold out"}
	// ErrLimitExceeded: the order would take the buyer past the SKU's
	// per-buyer limit; errors.As to *LimitError for the allowance left.
	ErrLimitExceeded = &Error{msg: "service: per-buyer limit exceeded"}
	// ErrUnpaidLimit: the order would take the buyer's reserved, unpaid
	// units of the SKU past its cap (UnpaidCap); errors.As to *UnpaidError
	// for the cap and what the buyer has unpaid.
	ErrUnpaidLimit = &Error{msg: "service: unpaid limit reached"}
	// ErrKeyReused: the idempotency key already placed an order with another body.
	ErrKeyReused = &Error{msg: "service: idempotency key reused with a different request"}
	// ErrInProgress: another request with the same idempotency key is still
	// being served at this instance; retry with the same key.
	ErrInProgress = &Error{msg: "service: a request with this idempotency key is in progress"}
	// ErrBusy: the SKU lock, or a conflict-free write, could not be had in time.
	ErrBusy = &Error{msg: "service: busy, retry later"}
	// ErrUnavailable: Redis (in reject mode) or MySQL is unreachable.
	ErrUnavailable = &Error{msg: "service: dependency unavailable"}
	// ErrLockLost: the SKU lock was lost before commit; nothing was written.
	ErrLockLost = &Error{msg: "service: lock lost before commit, order not placed"}

	// ErrConflict is returned by Store.Deduct when a versioned UPDATE matched
	// no row: the version moved, so someone wrote without (or despite) the lock.
	ErrConflict = &Error{msg: "service: version conflict"}
	// ErrDuplicateKey is returned by Store.Deduct when the idempotency key is
	// already taken (a concurrent replay).
	ErrDuplicateKey = &Error{msg: "service: duplicate idempotency key"}
)

// ErrLockNotObtained is the Locker's answer when the SKU lock was not had
// within the wait; the service turns it into ErrBusy (or ErrUnavailable
// when the request's context ended).
var ErrLockNotObtained = errors.New("service: SKU lock not obtained in time")

// errNotQueued is an order whose client gave up before a batch took it:
// certainly not placed.
var errNotQueued = errors.New("service: the client gave up before the order was queued")

// errQueuedPastSoldOut answers the orders still queued when their SKU
// joined the sold-out fast path: each is answered from that path's shared
// read instead of a turn of the lock (Place), never placed or refused by it.
var errQueuedPastSoldOut = errors.New("service: the SKU sold out while the order was queued")

// errSoldOutKeyRead is ErrSoldOut from a read of the stock row that read
// the order's key too (none): answerRefusal need not look it up again.
var errSoldOutKeyRead = fmt.Errorf("%w (its key has no order)", ErrSoldOut)

// LimitError is an order refused by the SKU's per-buyer limit.
type LimitError struct {
	Limit     int64 // units one buyer may hold
	Held      int64 // units the buyer holds already
	Requested int64
}

// Remaining is what the buyer may still order.
func (e *LimitError) Remaining() int64 { return max(0, e.Limit-e.Held) }

func (e *LimitError) Error() string {
	return fmt.Sprintf("%v: the limit is %d per buyer, %d held, %d requested", ErrLimitExceeded, e.Limit, e.Held, e.Requested)
}

func (e *LimitError) Unwrap() error { return ErrLimitExceeded }

// UnpaidError is an order refused by the SKU's cap on a buyer's reserved,
// unpaid units. Not final: a confirm, cancel or expiry of one of the
// buyer's orders makes room again.
type UnpaidError struct {
	Cap       int64 // units one buyer may have reserved and unpaid
	Unpaid    int64 // the buyer's reserved, unpaid units already
	Requested int64
}

func (e *UnpaidError) Error() string {
	return fmt.Sprintf("%v: at most %d unpaid units per buyer, %d unpaid, %d requested; pay or cancel first",
		ErrUnpaidLimit, e.Cap, e.Unpaid, e.Requested)
}

func (e *UnpaidError) Unwrap() error { return ErrUnpaidLimit }

// RestockedError refuses an order that arrived before the SKU's latest
// restock (or raised limit): a refusal of its key may have been decided
// from the state before that change, so it is not placed now. Nothing was
// written; a retry with the same key is a new attempt. It wraps ErrBusy.
type RestockedError struct {
	Seq int64 // the SKU's restock sequence the store found
}

func (e *RestockedError) Error() string {
	return fmt.Sprintf("%v: the SKU was restocked while this order waited; retry with the same key", ErrBusy)
}

func (e *RestockedError) Unwrap() error { return ErrBusy }
