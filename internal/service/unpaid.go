package service

import "strconv"

// No hoarding: with a payment window, a buyer's reserved orders hold units
// that nobody has paid for. A SKU caps what one buyer may have reserved and
// unpaid at once; an order past the cap is refused with an *UnpaidError
// until the buyer pays or cancels. Both stores count a buyer's unpaid
// units in the order's own transaction and in every move of a reserved
// order (confirm, cancel, expiry), so the cap holds under concurrency.

// MaxUnpaidCap bounds an explicit cap of the admin API.
const MaxUnpaidCap = 1_000_000_000

// UnpaidSetting is the admin's setting of a SKU's cap on each buyer's
// reserved, unpaid units, as stored: the zero value is the default (see
// UnpaidCapFor); Set with Cap 0 is no cap, Set with Cap n is n units.
type UnpaidSetting struct {
	Set bool
	Cap int64
}

// UnpaidCap is a cap on one buyer's reserved, unpaid units in force; 0 is
// none, written as null in JSON.
type UnpaidCap int64

// MarshalJSON writes the cap as an integer, or null for none.
func (c UnpaidCap) MarshalJSON() ([]byte, error) {
	if c <= 0 {
		return []byte("null"), nil
	}
	return strconv.AppendInt(nil, int64(c), 10), nil
}

// UnpaidCapFor is the cap in force on a SKU whose per-buyer limit is limit
// (0: none) and payment window windowSeconds, set as set, where one order
// asks for at most maxQuantity units. An explicit setting is the cap. The
// default is max(limit, maxQuantity) with a window (one order of the
// largest size may wait for payment, never more, and never less than the
// limit allows, so the limit refuses first) and none without a window (no
// order is ever unpaid). Both stores and the API's answers use it.
func UnpaidCapFor(set UnpaidSetting, limit, windowSeconds, maxQuantity int64) UnpaidCap {
	switch {
	case set.Set:
		return UnpaidCap(max(set.Cap, 0))
	case windowSeconds <= 0:
		return 0
	}
	return UnpaidCap(max(limit, maxQuantity))
}
