package service

import "errors"

// BatchRow is what planning a batch needs of the SKU's stock row.
type BatchRow struct {
	Available     int64
	PerBuyerLimit int64 // 0: none
	RestockSeq    int64
}

// BatchPlan is a batch's outcome, decided before anything is written.
type BatchPlan struct {
	Errs   []error // per item: nil when placed, else why not
	Placed []int   // the indexes of the placed items, in order
	Total  int64   // the units of the placed items
}

// PlanBatch fills a batch in order while stock lasts. Each item is checked,
// in this order, for:
//   - admission before the latest restock (a *RestockedError);
//   - stock (ErrSoldOut; a later, smaller item may still fit);
//   - its key, taken before (taken; nil: none) or earlier in the batch
//     (ErrDuplicateKey);
//   - its buyer's allowance: allow (nil: the SKU has neither a per-buyer
//     limit nor a payment window) takes the item's units or returns a
//     *LimitError, or an *UnpaidError (the limit checked first).
//
// Both stores place a batch by this plan. allow is where a store counts the
// allowance and the unpaid units atomically (MySQL's upserts); any error
// from it other than a *LimitError or an *UnpaidError ends the plan and is
// returned.
func PlanBatch(row BatchRow, items []BatchItem, taken func(BuyerKey) bool, allow func(BatchItem) error) (BatchPlan, error) {
	p := BatchPlan{Errs: make([]error, len(items))}
	inBatch := make(map[BuyerKey]bool, len(items))
	left := row.Available
	for i, it := range items {
		q := int64(it.Quantity)
		k := BuyerKey{Buyer: it.Buyer, Key: it.Key}
		if err := Restocked(it.Admitted, row.RestockSeq); err != nil {
			p.Errs[i] = err
			continue
		}
		if q > left {
			p.Errs[i] = ErrSoldOut
			continue
		}
		if inBatch[k] || (taken != nil && taken(k)) {
			p.Errs[i] = ErrDuplicateKey
			continue
		}
		if allow != nil {
			if err := allow(it); err != nil {
				if errors.Is(err, ErrLimitExceeded) || errors.Is(err, ErrUnpaidLimit) {
					p.Errs[i] = err
					continue
				}
				return BatchPlan{}, err
			}
		}
		inBatch[k] = true
		left -= q
		p.Total += q
		p.Placed = append(p.Placed, i)
	}
	return p, nil
}
