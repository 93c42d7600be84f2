package service

import (
	"bytes"
	"fmt"
	"math"
	"time"
)

// A sale's schedule: when a SKU opens and closes. The store's clock (the
// one that sets payment deadlines) decides, in the transaction of each
// order; an instance's own clock decides nothing.

// Errors of the schedule, each carried by a *SaleClosedError.
var (
	// ErrSaleNotStarted: the order came before the SKU's sale_starts_at.
	ErrSaleNotStarted = &Error{msg: "service: the sale has not started"}
	// ErrSaleEnded: the order came at or after the SKU's sale_ends_at.
	ErrSaleEnded = &Error{msg: "service: the sale has ended"}
)

// Instant is a moment of a schedule, in UTC to the microsecond, or none
// (the zero value). It is comparable with == and encodes as RFC 3339, or
// as null when none.
type Instant struct{ time.Time }

// At is t as an Instant (UTC, to the microsecond).
func At(t time.Time) Instant { return Instant{t.UTC().Truncate(time.Microsecond)} }

// InstantOf is *t as an Instant, none for nil.
func InstantOf(t *time.Time) Instant {
	if t == nil {
		return Instant{}
	}
	return At(*t)
}

// Ptr is the instant as a pointer, nil for none (a NULL column).
func (i Instant) Ptr() *time.Time {
	if i.IsZero() {
		return nil
	}
	t := i.Time
	return &t
}

// MarshalJSON encodes none as null.
func (i Instant) MarshalJSON() ([]byte, error) {
	if i.IsZero() {
		return []byte("null"), nil
	}
	return []byte(`"` + i.UTC().Format(time.RFC3339Nano) + `"`), nil
}

// UnmarshalJSON decodes null as none and an RFC 3339 string as its instant.
func (i *Instant) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		*i = Instant{}
		return nil
	}
	var t time.Time
	if err := t.UnmarshalJSON(b); err != nil {
		return err
	}
	*i = At(t)
	return nil
}

// Schedule is when a SKU's sale opens and closes; none for either: open
// from its creation, never closed.
type Schedule struct {
	StartsAt Instant
	EndsAt   Instant
}

// Refusal is the error refusing an order whose transaction read the stock
// row when the store's clock read read, and carried forward to now (never
// behind it): a *SaleClosedError before the start, by read (so no order
// the store saw before the start gets through, however long its statement
// took), or from the end on, by now (so none gets through after it); nil
// while the sale is open.
func (s Schedule) Refusal(read, now time.Time) error {
	switch {
	case !s.StartsAt.IsZero() && read.Before(s.StartsAt.Time):
		return &SaleClosedError{Schedule: s, Now: read.UTC()}
	case !s.EndsAt.IsZero() && !now.Before(s.EndsAt.Time):
		return &SaleClosedError{Schedule: s, Now: now.UTC(), Ended: true}
	}
	return nil
}

// TimeSetting is one instant of an admin's change: Set false leaves the
// stored value as it is; Set with a zero At clears it.
type TimeSetting struct {
	Set bool
	At  Instant
}

// apply is the value after the setting, given the stored cur.
func (ts TimeSetting) apply(cur Instant) Instant {
	if ts.Set {
		return ts.At
	}
	return cur
}

// ScheduleAfter is the schedule the setting leaves, given the stored cur.
// An end not after the start wraps ErrInvalid; an end in the past is
// allowed (it ends the sale at once).
func (set StockSetting) ScheduleAfter(cur Schedule) (Schedule, error) {
	s := Schedule{StartsAt: set.StartsAt.apply(cur.StartsAt), EndsAt: set.EndsAt.apply(cur.EndsAt)}
	if !s.StartsAt.IsZero() && !s.EndsAt.IsZero() && !s.EndsAt.After(s.StartsAt.Time) {
		return s, fmt.Errorf("%w: sale_ends_at must be after sale_starts_at", ErrInvalid)
	}
	return s, nil
}

// SaleClosedError refuses an order placed outside its SKU's sale. It wraps
// ErrSaleNotStarted or, with Ended, ErrSaleEnded. Nothing was written.
type SaleClosedError struct {
	Schedule
	Now   time.Time // the store's clock at the refusal
	Ended bool
}

func (e *SaleClosedError) Error() string {
	if e.Ended {
		return fmt.Sprintf("%v: it ended at %s", ErrSaleEnded, e.EndsAt.Format(time.RFC3339Nano))
	}
	return fmt.Sprintf("%v: it starts at %s", ErrSaleNotStarted, e.StartsAt.Format(time.RFC3339Nano))
}

func (e *SaleClosedError) Unwrap() error {
	if e.Ended {
		return ErrSaleEnded
	}
	return ErrSaleNotStarted
}

// RetryAfter is the whole seconds from the refusal to the start, rounded
// up (at least 1); 0 once the sale ended.
func (e *SaleClosedError) RetryAfter() int64 {
	if e.Ended {
		return 0
	}
	return max(1, int64(math.Ceil(e.StartsAt.Sub(e.Now).Seconds())))
}
